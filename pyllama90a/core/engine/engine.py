"""Continuous batching: many generations share one llama context, one engine thread decodes them all.

Each of `parallel` slots owns a sequence id with its own KV stream of n_ctx / parallel cells. Requests wait in
a bounded queue and join free slots between decode steps; one llama_decode call per step carries the next
token of every generating slot plus prompt chunks of the slots still prefilling (at most n_batch tokens). This
module keeps the queue and the engine thread, which waits for work and runs each step of step.py.
A slot keeps its KV cells after a request ends, so a new request that starts with the same tokens (a system
prompt, a chat history) decodes only the rest: from its slot's cells, another slot's, or the host-RAM prompt
cache (prefix_reuse.py, prompt_cache.py).

    with BatchEngine(path, ctk="q4_0", ctv="q4_0", parallel=4) as engine:
        for chunk in engine.stream("Once upon a time", max_tokens=32):
            print(chunk.text, end="")
"""
from __future__ import annotations

import collections
import contextlib
import functools
import logging
import os
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, TypeVar

from ...errors import (
    BusyError,
    ClosedError,
    ContextOverflowError,
    EngineStoppedError,
    InvalidArgumentError,
    QueueFullError,
    positive_int,
)
from ..chat.messages import Messages, normalize_messages
from ..chat.prepare import prepare_chat
from ..constrained import Constraint
from ..generation.context_shift import kept_at_shift
from ..generation.request import GenerationRequest, RequestOptions
from ..generation.sequence import GenerationSequence, TokenLogprob
from ..model.model import Model
from . import async_api
from .counts import EngineCounts
from .lora_turns import LoraTurns
from .prefix_reuse import PrefixReuse
from .prompt_cache import PromptCache, PromptCacheStats
from .slot_files import SlotFiles
from .slots import Chunk, EngineStats, Handle, Job, Slot
from .step import EngineStep, emit

if TYPE_CHECKING:  # pragma: no cover (Python 3.11's typing.Unpack; only the type checker reads it)
    from typing_extensions import Unpack

    from ..generation.lora_request import RequestedLora
    from ..generation.sampling import SamplingOptions

log = logging.getLogger(__name__)
T = TypeVar("T")


class BatchEngine:
    """Serves generation requests from `parallel` slots of one context; thread-safe submit()/stream()."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, parallel: int = 4, queue_size: int = 64,
                 n_ctx: int = 8192, n_batch: int = 512, n_gpu_layers: int = -1, cache_ram_bytes: int = 0,
                 **settings: Any) -> None:
        """`settings`: the other ContextSettings fields (ctk, ctv, flash_attn, n_threads, chat_template,
        attention_paths) and Model's placement (split_mode, tensor_split, main_gpu, rpc), as keywords. n_ctx is
        shared by the `parallel` slots; n_ubatch is n_batch. cache_ram_bytes: a host-RAM prompt cache of that
        many bytes of sequence states (prompt_cache.py; 0: none)."""
        positive_int("parallel", parallel)
        positive_int("queue_size", queue_size)
        ram = PromptCache(positive_int("cache_ram_bytes", cache_ram_bytes, 1 << 50)) if cache_ram_bytes else None
        set_here = sorted({"n_seq_max", "n_ubatch", "embedding", "seed"} & settings.keys())
        if set_here:
            raise TypeError(f"BatchEngine() takes no {', '.join(set_here)} (it sets the context's, and each "
                            f"request has its own seed)")
        self.model = Model(path, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch, n_gpu_layers=n_gpu_layers,
                           n_seq_max=parallel, **settings)
        self.parallel = parallel
        self.n_gpu_layers, self.n_threads = n_gpu_layers, settings.get("n_threads")
        self.queue_size = queue_size
        self.n_ctx_slot = self.model.n_ctx_seq
        self.speculative = self.model.speculative  # (Model's `speculative` keyword, passed in `settings`)
        # the engine owns the context: a call on engine.model that would use it is refused (BusyError) until close()
        self._model_hold = contextlib.ExitStack()
        self._context = self._model_hold.enter_context(self.model.hold_context("a BatchEngine"))
        self.lora = LoraTurns(self.model.lora, self._context)  # the adapters' default scales, per-request sets
        self._slots: list[Slot] = [Slot(seq) for seq in range(parallel)]
        self._reuse = PrefixReuse(self._context, self._slots, ram)  # where a prompt's cached prefix comes from
        self._slot_files = SlotFiles(self.model, self._context, self._slots, self.n_ctx_slot, self._between_steps)
        self._waiting: collections.deque[Job] = collections.deque()
        self._cv = threading.Condition()
        self._stopping = False   # no more work: close() was called or the engine thread failed
        self._closed = False
        self._exited = False     # the engine thread has handed out its last chunks
        self._free_on_exit = False  # close() could not wait: the engine thread frees the model when it leaves
        self._freed = False
        self._failure: BaseException | None = None
        self._tasks: list[tuple[Callable[[], Any], Future[Any]]] = []  # run by the engine thread between two steps
        self._counts = EngineCounts()
        self._step = EngineStep(self._context, self._slots, self._waiting, self._cv, self._counts, self.lora,
                                self._reuse, self.model.drafting)  # (admit, decode, sample: step.py)
        self._thread = threading.Thread(target=self._run, name="pyllama90a-engine", daemon=True)
        self._thread.start()

    # -- public API ------------------------------------------------------------------------------------

    def tokenize_prompt(self, prompt: str | Sequence[int]) -> list[int]:
        """Text (tokenized with BOS as the model wants) or a list of token ids (checked) to a prompt's tokens."""
        return self.model.prompt_tokens(prompt)

    def chat_prompt(self, messages: Sequence[dict[str, Any]] | Messages) -> list[int]:
        """The tokens of `messages` rendered with the model's chat template, ready for the assistant's turn.
        (For tools and their constraint, pyllama90a.core.chat.prepare.prepare_chat(engine.model, ...).)"""
        return prepare_chat(self.model, normalize_messages(messages)).tokens

    def submit(self, prompt: str | Sequence[int], on_chunk: Callable[[Chunk], None], *, max_tokens: int = 256,
               stop: str | Sequence[str] | None = (), logprobs: int | None = None, ignore_eos: bool = False,
               constraint: Constraint | None = None, logit_bias: Mapping[object, object] | None = None,
               lora: Mapping[int, float] | RequestedLora | None = None, n_keep: int = 0,
               **sampling: Unpack[SamplingOptions]) -> Handle:
        """Queue a request; `on_chunk` is called from the engine thread with each Chunk (keep it quick).

        logprobs: None, or how many most likely alternatives to report with each token's log-probability.
        ignore_eos: generate max_tokens, the end-of-generation tokens banned (for benchmarks). n_keep: Model.generate's.
        constraint: a pyllama90a.core.constrained Constraint (JSON schema, regex, grammar) the output must match.
        logit_bias: token id -> bias added to its logit (OpenAI's: -100 bans, 100 all but forces).
        lora: {adapter id: scale} for this request (None: the engine's default scales; lora_turns.py).

        Raises InvalidArgumentError, ContextOverflowError (prompt does not fit a slot) or QueueFullError.
        """
        request = GenerationRequest.of(max_tokens=max_tokens, stop=stop, logprobs=logprobs, ignore_eos=ignore_eos,
                                       constraint=constraint, logit_bias=logit_bias, lora=lora, n_keep=n_keep,
                                       **sampling)
        return self.submit_request(self.tokenize_prompt(prompt), request, on_chunk)

    def submit_request(self, tokens: list[int], request: GenerationRequest,
                       on_chunk: Callable[[Chunk], None], *, slot: int | None = None, progress: bool = False) -> Handle:
        """submit() of a request and prompt tokens already checked (tokenize_prompt, or a chat's prepared tokens;
        the server's n choices share them); `slot`: the slot it must run in (it waits until that one is free);
        `progress`: a Chunk with `progress` set after each batch that decodes part of the prompt."""
        if slot is not None and (isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < self.parallel):
            raise InvalidArgumentError(f"slot must be one of this engine's {self.parallel} slots (0 to "
                                       f"{self.parallel - 1}), got {slot!r}", param="id_slot")
        if not callable(on_chunk):  # (else the engine thread's call fails, and the request is dropped unseen)
            raise InvalidArgumentError(f"on_chunk must be a callable taking a Chunk, got {type(on_chunk).__name__}")
        if len(tokens) >= self.n_ctx_slot:
            raise ContextOverflowError(f"the prompt has {len(tokens)} tokens but a slot holds {self.n_ctx_slot} "
                                       f"(n_ctx / parallel), and one more is needed to generate",
                                       n_prompt_tokens=len(tokens), n_ctx=self.n_ctx_slot)
        # the sampler chain and the grammar are built here, in the caller's thread: one that cannot be built fails
        # this request with an exception instead of failing a step of the engine thread, where it would stop everyone
        lora = self.lora.scales_for(request.lora)
        keep = kept_at_shift(self.model.context_shift, request.n_keep, tokens, self.model.handle, self.n_ctx_slot)
        job = Job(tokens, GenerationSequence(request, self.model.handle, self.n_ctx_slot, shift_keep=keep), on_chunk,
                  lora=lora, slot=slot, progress=progress)
        with self._cv:
            self._check_running()
            if len(self._waiting) >= self.queue_size:
                raise QueueFullError(f"all {self.parallel} slots are busy and {len(self._waiting)} requests wait")
            self._waiting.append(job)
            self._counts["requests"] += 1
            self._cv.notify()
        return Handle(functools.partial(self._cancel, job))

    def stream(self, prompt: str | Sequence[int], **kwargs: Unpack[RequestOptions]) -> Iterator[Chunk]:
        """submit() as a blocking iterator of Chunks; closing the iterator early cancels the request. Not from an
        on_chunk callback (BusyError): the engine thread would wait for itself; submit() works there."""
        self._refuse_on_engine_thread("a blocking stream cannot be read", "use submit() with a callback there")
        chunks: queue.Queue[Chunk] = queue.Queue()
        handle = self.submit(prompt, chunks.put, **kwargs)
        try:
            while True:
                chunk = chunks.get()
                last = async_api.last_chunk(chunk)
                yield chunk
                if last:
                    return
        finally:
            handle.cancel()

    def astream(self, prompt: str | Sequence[int], **kwargs: Unpack[RequestOptions]) -> AsyncIterator[Chunk]:
        """submit() as an async iterator of Chunks; cancelling the task or closing the iterator cancels the request
        (async_api.py)."""
        return async_api.astream(self, prompt, **kwargs)

    async def acomplete(self, prompt: str | Sequence[int],
                        **kwargs: Unpack[RequestOptions]) -> async_api.EngineCompletion:
        """The whole result of submit(): text, tokens, finish_reason and usage (async_api.py)."""
        return await async_api.acomplete(self, prompt, **kwargs)

    def _refuse_on_engine_thread(self, what: str, instead: str = "") -> None:
        """BusyError for a call that waits for the engine thread, made on it (an on_chunk callback): it would wait
        for itself, and the engine would hang for good."""
        if threading.current_thread() is self._thread:
            raise BusyError(f"{what} on the engine thread (in on_chunk): it would wait for itself"
                            + (f"; {instead}" if instead else ""))

    def _between_steps(self, task: Callable[[], T]) -> T:
        """Run `task` on the engine thread between two decode steps (it owns the context) and return its result."""
        self._refuse_on_engine_thread("slot files cannot be used")
        done: Future[T] = Future()
        with self._cv:
            self._check_running()
            self._tasks.append((task, done))
            self._cv.notify()
        return done.result()

    # -- slot files (slot_files.py) -------------------------------------------------------------------

    def save_slot(self, slot: int, path: str | os.PathLike[str], *, key: bytes | None = None,
                  admit: Callable[[int], None] | None = None) -> tuple[int, int]:
        """Write an idle slot's KV cells and tokens to `path`: (tokens saved, bytes of llama.cpp's state). With
        `key` (at least 16 bytes) the file is authenticated (HMAC-SHA256): only restore_slot with that key takes
        it. `admit`, if given, is called on the engine thread with the file's size before anything is written,
        after every earlier slot action: a quota that raises to refuse."""
        return self._slot_files.save(slot, path, key=key, admit=admit)

    def restore_slot(self, slot: int, path: str | os.PathLike[str], *, key: bytes | None = None) -> tuple[int, int]:
        """Give an idle slot the cells of a file save_slot wrote (this engine's or one like it, any slot, with the
        same `key` if any): (tokens restored, bytes read); the slot runs with the LoRA scales its cells were
        computed with. A bad file is a StateFileError: the slot keeps its cells when a check refuses it, is
        empty when llama.cpp does."""
        return self._slot_files.restore(slot, path, key=key)

    def erase_slot(self, slot: int) -> int:
        """Empty an idle slot's KV cells; how many tokens it held."""
        return self._slot_files.erase(slot)

    @property
    def failure(self) -> BaseException | None:
        """The exception that ended the engine thread, or None while it runs (or after a plain close())."""
        return self._failure

    @property
    def running(self) -> bool:
        """True until close() or a failure of the engine thread."""
        with self._cv:
            return not self._stopping

    def stats(self) -> EngineStats:
        with self._cv:
            return self._counts.stats(time.perf_counter(), len(self._waiting),
                                      sum(s.job is not None for s in self._slots), self.parallel)

    def prompt_cache_stats(self) -> PromptCacheStats | None:
        """The host-RAM prompt cache's entries, bytes and hits (None without one: cache_ram_bytes=0)."""
        return self._reuse.ram.stats() if self._reuse.ram is not None else None

    def slot_usage(self) -> list[tuple[bool, int]]:
        """(busy, tokens in its cache) of each slot, by sequence id: a snapshot (the server's /slots)."""
        with self._cv:
            return [(s.job is not None, len(s.cached)) for s in self._slots]

    def close(self, timeout: float | None = None) -> bool:
        """Stop the engine thread (requests in flight end with an error chunk) and free the model. Also after
        the thread failed; a second call does nothing. Waits up to `timeout` seconds (None: as long as it takes)
        for the thread, which may be in a consumer's on_chunk; called from on_chunk itself it does not wait.
        True when the model is freed on return; False when the engine thread frees it as it leaves."""
        with self._cv:
            if not self._closed:
                self._closed = self._stopping = True
                self._cv.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        with self._cv:
            if not self._exited:
                self._free_on_exit = True
                return False
        self._free()
        return True

    def _free(self) -> None:
        with self._cv:
            if self._freed:
                return
            self._freed = True
        self._step.close()
        self._model_hold.close()
        self.model.close()

    def __enter__(self) -> BatchEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- engine thread ---------------------------------------------------------------------------------

    def _cancel(self, job: Job) -> None:
        with self._cv:
            job.cancelled = True
            if job in self._waiting:
                self._waiting.remove(job)
            self._cv.notify()

    def _check_running(self) -> None:
        """Raise unless new work can be served (call with self._cv held)."""
        if self._failure is not None:
            raise EngineStoppedError(f"the engine thread stopped on {self._failure!r}") from self._failure
        if self._stopping:
            raise ClosedError("the engine is closed")

    def _run(self) -> None:
        error: ClosedError = ClosedError("the engine was closed")
        try:
            while self._await_work():
                self._step.run()
        except BaseException as e:  # whatever ended the thread, nobody may wait for it forever
            log.exception("the engine thread stopped")
            error = EngineStoppedError(f"the engine thread stopped on {e!r}")
            error.__cause__ = e
            with self._cv:
                self._failure = e
        finally:
            with self._cv:
                self._stopping = True  # submit() refuses from now on instead of queueing work nobody serves
                tasks, self._tasks = self._tasks, []
                jobs = [*self._waiting, *(s.job for s in self._slots if s.job is not None)]
                if self._step.admitting is not None and self._step.admitting not in jobs:
                    jobs.append(self._step.admitting)
                self._waiting.clear()
            for _, done in tasks:
                done.set_exception(error)
            for job in jobs:
                try:
                    emit(job, Chunk(finish_reason="error", error=error))
                except BaseException:  # the other consumers still get their error
                    log.exception("a consumer failed on the engine's last chunk")
            with self._cv:
                self._exited = True
                free_now = self._free_on_exit
            if free_now:
                self._free()

    def _await_work(self) -> bool:
        """Wait for a request, a cancel or a task, and run the tasks queued for between two steps. False when the
        engine stops."""
        with self._cv:
            while (not self._stopping and not self._waiting and not self._tasks
                   and all(s.job is None for s in self._slots)):
                self._cv.wait()
            if self._stopping:
                return False
            tasks, self._tasks = self._tasks, []
        for task, done in tasks:
            try:
                done.set_result(task())
            except Exception as e:  # noqa: BLE001 - the caller's error, raised in its thread
                done.set_exception(e)
        return True


__all__ = ["BatchEngine", "Chunk", "EngineStats", "EngineStoppedError", "Handle", "QueueFullError", "TokenLogprob"]
