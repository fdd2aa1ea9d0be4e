"""One decode step of a BatchEngine: waiting requests join free slots, one batch carries every generating slot's
next token and the prompt chunks that fit, llama_decode runs it, each slot samples its next token (and verifies
its draft), and the requests get their chunks: those that finish or fail end there. Engine thread only.

BatchEngine (engine.py) owns the queue, the slots and the counts and shares them (under its lock) with this
module; its thread waits for work, runs the tasks queued between steps, then calls EngineStep.run. Within a step
a decode call is counted right after llama_decode returns and before any chunk it produced is sent (a consumer
that reads stats() on its last chunk sees that call), the sampled tokens after sampling.
"""
from __future__ import annotations

import collections
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from ...errors import ConstraintError, DecodeError, NonFiniteOutputError
from ...native import Batch, ContextHandle
from ..generation.context_shift import shift
from ..generation.outputs import Usage
from ..generation.sequence import TokenLogprob
from .counts import EngineCounts
from .lora_turns import LoraTurns
from .prefix_reuse import PrefixReuse
from .slots import Chunk, Job, Slot

if TYPE_CHECKING:  # pragma: no cover (only the type checker reads it)
    from ..model.draft_model import Drafting


class EngineStep:
    """The step of one engine: its batch, and its view of the engine's `slots`, `waiting` queue and `counts`,
    which it changes under the engine's `lock` where other threads read them."""

    def __init__(self, context: ContextHandle, slots: Sequence[Slot], waiting: collections.deque[Job],
                 lock: threading.Condition, counts: EngineCounts, lora: LoraTurns, reuse: PrefixReuse,
                 drafting: Drafting | None) -> None:
        self._context, self._slots, self._waiting, self._lock = context, slots, waiting, lock
        self._counts, self._lora, self._reuse, self._drafting = counts, lora, reuse, drafting
        self._batch = Batch(context.n_batch)
        self.admitting: Job | None = None  # between the queue and a slot, so a failure there still ends it

    def close(self) -> None:
        self._batch.close()

    def run(self) -> None:
        """Drop cancelled requests, admit waiting ones, decode one batch, sample."""
        with self._lock:
            for slot in self._slots:
                if slot.job is not None and slot.job.cancelled:
                    self._counts["completion_tokens"] += len(slot.job.generated)
                    slot.job = None
            self._admit()
        active = [(s, s.job) for s in self._slots if s.job is not None]
        if not active:
            return
        active = self._lora.take_turn(active)  # (the requests of one adapter set per step)
        plan = self._fill_batch(active)
        try:
            self._context.decode(self._batch)
        except DecodeError as e:
            self._fail([(slot, job) for slot, job, _, _ in plan], e)
            return
        for slot, job, n_tokens, _ in plan:
            slot.cached.extend(job.to_decode[:n_tokens])
            del job.to_decode[:n_tokens]
        with self._lock:  # (counted before any chunk: a consumer that reads stats() on its last chunk sees this call)
            self._counts.decoded([len(s.cached) + len(j.draft) for s, j, *_ in plan])
        now = time.perf_counter()
        n_sampled = 0
        for slot, job, n_tokens, out_index in plan:
            if job.progress and not job.generated and n_tokens:  # (before the first token's chunk)
                emit(job, Chunk(progress=(job.cached, len(slot.cached), len(job.prompt))))
            if out_index is not None:
                n_sampled += self._sample(slot, job, out_index)
        with self._lock:
            self._counts.sampled(now, n_sampled)

    def _admit(self) -> None:
        """Move waiting requests into free slots (lora_turns.admit), each with its prompt's longest cached prefix
        (prefix_reuse.py). With the lock held."""
        free = [s for s in self._slots if s.job is None]
        for job in list(self._waiting):  # (one pinned to a busy slot waits; those behind it go on)
            if not free:
                break
            choices = free if job.slot is None else [s for s in free if s.seq == job.slot]
            if not choices:
                continue
            self._waiting.remove(job)
            self.admitting = job
            slot = self._lora.admit(choices, job)
            free.remove(slot)
            if self._drafting is not None:  # (its drafter knows the slot: a draft model drafts on its sequence)
                job.sequence.drafter = self._drafting.drafter(job.prompt, slot.seq)
            job.cached = self._reuse.prepare(slot, job)
            job.to_decode = job.prompt[job.cached:]
            slot.job = job
            self.admitting = None
            self._counts["prompt_tokens"] += len(job.prompt)
            self._counts["prompt_decoded"] += len(job.to_decode)

    def _fill_batch(self, active: list[tuple[Slot, Job]]) -> list[tuple[Slot, Job, int, int | None]]:
        """Generating slots' next tokens first (they wait for each step), then prompt chunks in the room left.

        Returns (slot, its job, tokens it put in the batch, batch index of its logits or None) per slot in the
        batch.
        """
        batch = self._batch
        batch.clear()
        plan: list[tuple[Slot, Job, int, int | None]] = []
        generating = [(s, j) for s, j in active if len(j.to_decode) == 1 and j.generated]
        prefilling = [(s, j) for s, j in active if not (len(j.to_decode) == 1 and j.generated)]
        for slot, job in generating + prefilling:
            room = batch.capacity - batch.n_tokens
            if room <= 0:
                break
            tokens = job.to_decode[:room]
            wants_logits = len(tokens) == len(job.to_decode)
            del job.draft[max(room - len(tokens), 0):]  # (a draft is only ever after a sampled token)
            batch.add([*tokens, *job.draft], len(slot.cached), slot.seq, logits="all" if job.draft else
                      "last" if wants_logits else "none")
            plan.append((slot, job, len(tokens), batch.n_tokens - 1 - len(job.draft) if wants_logits else None))
        return plan

    def _sample(self, slot: Slot, job: Job, index: int) -> int:
        """Sample the slot's next token (and verify its draft, if any) and report them. Returns how many tokens were
        generated."""
        draft, job.draft = job.draft, []
        try:
            steps = job.sequence.verify(self._context, index, len(slot.cached), draft)
        except (ConstraintError, NonFiniteOutputError) as e:  # this request ends, the others go on
            self._fail([(slot, job)], self._lora.blame(e, job.lora))
            return 0
        if draft:  # the drafted tokens kept join the cache; the cells of the rest are dropped
            slot.cached.extend(draft[:len(steps) - 1])
            self._context.trim_sequence(slot.seq, len(slot.cached))
            self._counts.update(draft_tokens=len(draft), drafts=1)
            self._counts["draft_accepted"] += sum(s.token == t for s, t in zip(steps, draft, strict=False))
        step = steps[-1]
        tokens = tuple(s.token for s in steps if s.token is not None)
        logprobs = tuple(s.logprob for s in steps if s.logprob is not None)
        text = "".join(s.text for s in steps)
        if step.finish is not None:
            self._finish(slot, job, step.finish, (*job.unsent, *tokens), logprobs, text)
        else:
            job.to_decode = [tokens[-1]]
            # (only with context shift: else the sequence ended the generation there; its n_ctx_seq is the slot's)
            if len(slot.cached) + 1 >= job.sequence.n_ctx_seq:
                shift(self._context, slot.seq, slot.cached, job.sequence.shift_keep)
            job.draft = job.sequence.draft(len(slot.cached) + 1)
            if text or logprobs:
                emit(job, Chunk(text, (*job.unsent, *tokens), logprobs))
                job.unsent.clear()
            else:
                job.unsent.extend(tokens)
        return len(tokens)

    def _finish(self, slot: Slot, job: Job, reason: Literal["stop", "length"], tokens: tuple[int, ...] = (),
                logprobs: tuple[TokenLogprob, ...] = (), text: str = "") -> None:
        slot.job = None
        self._counts["completion_tokens"] += len(job.generated)
        sequence = job.sequence
        usage = Usage(len(job.prompt), len(job.generated), job.cached, sequence.drafted, sequence.accepted)
        emit(job, Chunk(text, tokens, logprobs, reason, usage))

    def _fail(self, jobs: list[tuple[Slot, Job]], error: Exception) -> None:
        """A failed decode: its requests end with the error and their sequences are dropped; others go on."""
        for slot, job in jobs:
            slot.job = None
            self._context.clear_sequence(slot.seq)
            slot.cached.clear()
            self._counts["failed"] += 1
            emit(job, Chunk(finish_reason="error", error=error))


def emit(job: Job, chunk: Chunk) -> None:
    """Hand `chunk` to the job's consumer, unless it was cancelled; a consumer that raises is cancelled."""
    if job.cancelled:
        return
    try:
        job.on_chunk(chunk)
    except Exception:  # noqa: BLE001 - a consumer's bug must not stop the engine for everyone
        job.cancelled = True
    # a BaseException (SystemExit, KeyboardInterrupt) is not a bug report but a request to stop: it ends the
    # engine thread, and BatchEngine._run hands every other request an EngineStoppedError
