"""`Model`: one llama.cpp model and its context, with text generation, chat, embeddings and state."""
from __future__ import annotations

import os
import threading
import time
import warnings
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Literal, Sequence

import numpy as np

from . import _log
from ._ffi import ffi, lib
from .errors import (ClosedError, ContextError, ContextOverflowError, DecodeError, InvalidArgumentError,
                     LlamaError, ModelFormatError, ModelLoadError, check, positive_int)
from .attention_policy import AttentionChoice, choose
from .gguf_header import read_header
from .kv_types import block_size, check_kv_type, ggml_type
from .sampling import SamplerChain, SamplingParams
from .text_stream import TextStream

FLASH_ATTN = {"auto": "LLAMA_FLASH_ATTN_TYPE_AUTO", "on": "LLAMA_FLASH_ATTN_TYPE_ENABLED",
              "off": "LLAMA_FLASH_ATTN_TYPE_DISABLED"}
FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Timings:
    prompt_ms: float
    generate_ms: float
    prompt_tokens_evaluated: int  # prompt tokens actually decoded (a reused prefix is not)
    completion_tokens: int

    @property
    def prompt_tokens_per_s(self) -> float:
        return self.prompt_tokens_evaluated / (self.prompt_ms / 1e3) if self.prompt_ms > 0 else 0.0

    @property
    def generate_tokens_per_s(self) -> float:
        return self.completion_tokens / (self.generate_ms / 1e3) if self.generate_ms > 0 else 0.0


@dataclass(frozen=True)
class Completion:
    text: str
    tokens: list[int]
    finish_reason: FinishReason
    usage: Usage
    timings: Timings


@dataclass(frozen=True)
class Piece:
    """One streamed piece: whole UTF-8 characters only. The last piece has a finish_reason."""
    text: str
    tokens: list[int] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    completion: Completion | None = None  # on the last piece: the whole result


@dataclass(frozen=True)
class KVCacheInfo:
    type_k: str
    type_v: str
    n_ctx: int
    k_bytes: int
    v_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.k_bytes + self.v_bytes


def _free_native(ctx, model) -> None:  # noqa: ANN001 - cdata pointers
    # the context is freed before the model it was made from
    if ctx is not None:
        lib.llama_free(ctx)
    if model is not None:
        lib.llama_model_free(model)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def keep_cached_prefix(ctx, seq: int, cached: list[int], tokens: Sequence[int]) -> int:  # noqa: ANN001 - cdata
    """Keep what sequence `seq` caches (its tokens are `cached`) as far as `tokens` starts with it, less the last
    of `tokens` (always decoded: its logits start the generation); drop the rest from the KV cache and from
    `cached`. Returns how many tokens stay cached."""
    keep = min(common_prefix(cached, tokens), len(tokens) - 1)
    mem = lib.llama_get_memory(ctx)
    if not lib.llama_memory_seq_rm(mem, seq, keep, -1):  # a memory that cannot cut a sequence: drop it all
        lib.llama_memory_seq_rm(mem, seq, -1, -1)
        keep = 0
    del cached[keep:]
    return keep


def check_limits(max_tokens: object, stop: str | Sequence[str]) -> list[str]:
    """A request's max_tokens (a positive int) and stop strings, checked; returns the stops as a list."""
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0:
        raise InvalidArgumentError(f"max_tokens must be a positive integer, got {max_tokens!r}")
    stops = [stop] if isinstance(stop, str) else list(stop)
    if not all(isinstance(s, str) and s for s in stops):
        raise InvalidArgumentError("stop must be a non-empty str or a sequence of them")
    return stops


class Model:
    """A GGUF model with a context, e.g. `Model(path, ctk="q4_0", ctv="q4_0", flash_attn="off")`.

    KV types by name: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl; flash_attn "on", "off" or "auto".
    Use as a context manager or call close(); a model that is garbage collected is freed too.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, ctk: str = "f16", ctv: str = "f16",
                 flash_attn: str = "auto", n_ctx: int = 4096, n_batch: int = 512, n_ubatch: int = 512,
                 n_gpu_layers: int = -1, n_threads: int | None = None, seed: int | None = None,
                 embedding: bool = False, n_seq_max: int = 1) -> None:
        self._ctx = self._model = None
        self._lock = threading.RLock()
        self._busy = False
        if path is None:
            from .default_model import default_model

            path = default_model()
        self.path = Path(path)
        self.ctk = check_kv_type(ctk, "K")
        self.ctv = check_kv_type(ctv, "V")
        if flash_attn not in FLASH_ATTN:
            raise InvalidArgumentError(f"flash_attn must be one of {', '.join(FLASH_ATTN)}, got {flash_attn!r}")
        self.flash_attn = flash_attn
        positive_int("n_ctx", n_ctx)
        # sequences with a KV stream of n_ctx / n_seq_max cells each (BatchEngine); this Model's own calls use 0
        positive_int("n_seq_max", n_seq_max)
        positive_int("n_batch", n_batch)
        n_ubatch = min(positive_int("n_ubatch", n_ubatch), n_batch)
        if isinstance(n_gpu_layers, bool) or not isinstance(n_gpu_layers, int):
            raise InvalidArgumentError(f"n_gpu_layers must be an integer, got {n_gpu_layers!r}")
        n_threads = positive_int("n_threads", n_threads) if n_threads is not None else _default_threads()
        self._sampling_seed = seed
        if seed is not None:
            SamplingParams(seed=seed)  # validates
        self.embedding = bool(embedding)

        header = read_header(self.path)
        self._check_header(header, n_ctx)

        _log.clear_recent()
        mparams = lib.llama_model_default_params()
        mparams.n_gpu_layers = n_gpu_layers
        model = lib.llama_model_load_from_file(str(self.path).encode(), mparams)
        self._model = check(model, ModelLoadError, f"llama.cpp could not load {self.path}")
        self._finalizer = weakref.finalize(self, _free_native, None, self._model)

        cparams = lib.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_ubatch
        cparams.n_seq_max = n_seq_max
        cparams.kv_unified = False
        cparams.n_threads = cparams.n_threads_batch = n_threads
        cparams.type_k = ggml_type(self.ctk)
        cparams.type_v = ggml_type(self.ctv)
        self._attention = choose(flash_attn, self.ctk, self.ctv, n_gpu_layers)
        cparams.flash_attn_type = getattr(lib, FLASH_ATTN[self._attention.flash_attn])
        cparams.no_perf = False
        if self.embedding:
            cparams.pooling_type = self._pooling_for(header)
        ctx = lib.llama_init_from_model(self._model, cparams)
        self._ctx = check(ctx, ContextError,
                          f"llama.cpp could not create a context (n_ctx={n_ctx}, K {self.ctk}, V {self.ctv}, "
                          f"flash_attn {flash_attn})")
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _free_native, self._ctx, self._model)
        self._vocab = lib.llama_model_get_vocab(self._model)
        self._n_vocab = lib.llama_vocab_n_tokens(self._vocab)
        self._kv_tokens: list[int] = []  # tokens whose K and V are in the cache, in order (sequence 0)

    # -- validation before llama.cpp sees anything -------------------------------------------------

    def _check_header(self, header, n_ctx: int) -> None:  # noqa: ANN001 - a GGUFHeader
        arch = header.get("general.architecture")
        if not isinstance(arch, str):
            raise ModelFormatError(f"{self.path}: no general.architecture in the GGUF metadata")
        n_head = header.get(f"{arch}.attention.head_count")
        n_embd = header.get(f"{arch}.embedding_length")
        default_head = n_embd // n_head if isinstance(n_head, int) and n_head and isinstance(n_embd, int) else None
        for which, name, key in (("K", self.ctk, "key_length"), ("V", self.ctv, "value_length")):
            head_dim = header.get(f"{arch}.attention.{key}", default_head)
            if isinstance(head_dim, int) and head_dim % block_size(name):
                raise InvalidArgumentError(
                    f"{which} cache type {name} has blocks of {block_size(name)} values, which do not divide "
                    f"this model's head dimension {head_dim}; use f16, bf16 or f32")
        n_ctx_train = header.get(f"{arch}.context_length")
        if isinstance(n_ctx_train, int) and n_ctx > n_ctx_train:
            warnings.warn(f"n_ctx={n_ctx} is over the {n_ctx_train} tokens this model was trained on; "
                          f"expect worse output past {n_ctx_train}", stacklevel=3)

    @staticmethod
    def _pooling_for(header) -> int:  # noqa: ANN001 - a GGUFHeader
        arch = header.get("general.architecture")
        if header.get(f"{arch}.pooling_type") is not None:
            return lib.LLAMA_POOLING_TYPE_UNSPECIFIED  # the model says how to pool
        return lib.LLAMA_POOLING_TYPE_MEAN  # a causal LM says nothing: mean over tokens

    # -- lifetime ----------------------------------------------------------------------------------

    def close(self) -> None:
        """Free the context and the model. A second close does nothing."""
        with self._lock:
            if self._busy:
                raise LlamaError("cannot close the model while a generation stream is running")
            self._finalizer()
            self._ctx = self._model = None

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._ctx is None

    def _live(self):  # noqa: ANN202
        if self._ctx is None:
            raise ClosedError("this Model is closed")
        return self._ctx

    # -- facts ---------------------------------------------------------------------------------------

    @property
    def n_ctx(self) -> int:
        return lib.llama_n_ctx(self._live())

    @property
    def n_ctx_seq(self) -> int:
        """Cells one sequence can use: n_ctx, or n_ctx / n_seq_max with several sequences."""
        ctx = self._live()
        return lib.llama_n_ctx(ctx) // lib.llama_n_seq_max(ctx)

    @property
    def n_ctx_train(self) -> int:
        self._live()
        return lib.llama_model_n_ctx_train(self._model)

    @property
    def kv_cache(self) -> KVCacheInfo:
        """KV types, context size and the exact bytes of the K and V tensors."""
        k, v = ffi.new("size_t *"), ffi.new("size_t *")
        lib.llama_kv_cache_bytes(self._live(), k, v)
        return KVCacheInfo(self.ctk, self.ctv, self.n_ctx, k[0], v[0])

    @property
    def attention(self) -> AttentionChoice:
        """What flash_attn setting llama.cpp was given, on which device, and why (see attention_policy)."""
        return self._attention

    @property
    def compute_buffer_bytes(self) -> int:
        """Bytes of the compute buffers llama.cpp reserved for this context (all backends)."""
        return lib.llama_compute_buffer_bytes(self._live())

    def metadata(self, key: str) -> str | None:
        self._live()
        buf = ffi.new("char[]", 4096)
        n = lib.llama_model_meta_val_str(self._model, key.encode(), buf, len(buf))
        return None if n < 0 else ffi.string(buf).decode("utf-8", "replace")

    # -- tokens --------------------------------------------------------------------------------------

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        if not isinstance(text, str):
            raise InvalidArgumentError(f"text must be a str, got {type(text).__name__}")
        self._live()
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = ffi.new("llama_token[]", cap)
        n = lib.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        if n < 0:  # never for cap > bytes, but llama.cpp tells the size needed
            cap = -n
            buf = ffi.new("llama_token[]", cap)
            n = lib.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
        check(n, LlamaError, "tokenization failed")
        return list(ffi.unpack(buf, n))

    def detokenize(self, tokens: Sequence[int], special: bool = False) -> str:
        self._live()
        toks = self._token_array(tokens)
        cap = max(16, 8 * len(tokens))
        buf = ffi.new("char[]", cap)
        n = lib.llama_detokenize(self._vocab, toks, len(tokens), buf, cap, False, special)
        if n < 0:
            cap = -n
            buf = ffi.new("char[]", cap)
            n = lib.llama_detokenize(self._vocab, toks, len(tokens), buf, cap, False, special)
        return ffi.unpack(buf, check(n, LlamaError, "detokenization failed")).decode("utf-8", "replace")

    def _check_tokens(self, tokens: Sequence[int]) -> None:
        if not all(isinstance(t, int) and 0 <= t < self._n_vocab for t in tokens):
            raise InvalidArgumentError(f"tokens must be integers in [0, {self._n_vocab})")

    def _token_array(self, tokens: Sequence[int]):  # noqa: ANN202
        self._check_tokens(tokens)
        return ffi.new("llama_token[]", list(tokens))

    def _piece(self, token: int) -> bytes:
        buf = ffi.new("char[]", 64)
        n = lib.llama_token_to_piece(self._vocab, token, buf, 64, 0, False)
        if n < 0:
            buf = ffi.new("char[]", -n)
            n = lib.llama_token_to_piece(self._vocab, token, buf, -n, 0, False)
        return ffi.unpack(buf, n)

    # -- evaluation ----------------------------------------------------------------------------------

    def _evaluate(self, tokens: list[int]) -> int:
        """Bring the KV cache to hold exactly `tokens`, reusing the longest cached prefix.

        Returns how many tokens were decoded. The logits of the last token are ready afterwards.
        """
        ctx = self._live()
        n_ctx = self.n_ctx_seq
        if len(tokens) >= n_ctx:
            raise ContextOverflowError(
                f"the prompt has {len(tokens)} tokens but the context holds n_ctx={n_ctx} "
                f"(and one more is needed to generate)")
        common = keep_cached_prefix(ctx, 0, self._kv_tokens, tokens)
        n_batch = lib.llama_n_batch(ctx)
        for start in range(common, len(tokens), n_batch):
            self._decode(tokens[start:start + n_batch])
        return len(tokens) - common

    def _decode(self, tokens: list[int]) -> None:
        _log.clear_recent()
        arr = ffi.new("llama_token[]", tokens)
        rc = lib.llama_decode(self._ctx, lib.llama_batch_get_one(arr, len(tokens)))
        if rc != 0:
            raise DecodeError(f"llama_decode failed with code {rc} after {len(self._kv_tokens)} cached tokens",
                              _log.recent_native_log())
        self._kv_tokens.extend(tokens)

    def _fitting_tokens(self, tokens: Sequence[int], after: int) -> list[int]:
        """`tokens` as a list, checked to be valid ids that fit the context after `after` cached ones."""
        tokens = list(tokens)
        if not tokens:
            raise InvalidArgumentError("tokens is empty")
        self._check_tokens(tokens)
        n_ctx = self.n_ctx_seq
        if after + len(tokens) > n_ctx:
            raise ContextOverflowError(f"{after} cached + {len(tokens)} new tokens do not fit n_ctx={n_ctx}")
        return tokens

    def _ensure_idle(self) -> None:
        if self._busy:
            raise LlamaError("a generation stream is running on this Model")

    @property
    def n_cached(self) -> int:
        """How many tokens the KV cache holds (sequence 0)."""
        self._live()
        return len(self._kv_tokens)

    def eval(self, tokens: Sequence[int]) -> None:
        """Decode `tokens` after the cached ones (positions continue); for manual cache control and benchmarks."""
        ctx = self._live()
        tokens = self._fitting_tokens(tokens, len(self._kv_tokens))
        with self._lock:
            self._ensure_idle()
            n_batch = lib.llama_n_batch(ctx)
            for start in range(0, len(tokens), n_batch):
                self._decode(tokens[start:start + n_batch])
            lib.llama_synchronize(ctx)

    def last_logits(self) -> np.ndarray:
        """A copy of the logits after the last evaluated token, shape (n_vocab,)."""
        ctx = self._live()
        if not self._kv_tokens:
            raise LlamaError("nothing was evaluated yet")
        row = check(lib.llama_get_logits_ith(ctx, -1), LlamaError, "no logits for the last token")
        return np.frombuffer(ffi.buffer(row, 4 * self._n_vocab), dtype=np.float32).copy()

    def truncate(self, n_tokens: int) -> None:
        """Keep only the first `n_tokens` cached tokens."""
        ctx = self._live()
        if isinstance(n_tokens, bool) or not isinstance(n_tokens, int) or not 0 <= n_tokens:
            raise InvalidArgumentError(f"n_tokens must be a non-negative integer, got {n_tokens!r}")
        if n_tokens >= len(self._kv_tokens):
            return
        mem = lib.llama_get_memory(ctx)
        if not lib.llama_memory_seq_rm(mem, 0, n_tokens, -1):  # pragma: no cover - never for a KV cache
            raise LlamaError("llama.cpp could not truncate the cache")
        del self._kv_tokens[n_tokens:]

    def logits(self, tokens: Sequence[int]) -> np.ndarray:
        """Evaluate `tokens` from an empty cache; logits after every token, shape (len(tokens), n_vocab)."""
        ctx = self._live()
        tokens = self._fitting_tokens(tokens, 0)
        with self._lock:
            self._ensure_idle()
            lib.llama_memory_clear(lib.llama_get_memory(ctx), True)
            self._kv_tokens = []
            n_batch = lib.llama_n_batch(ctx)
            out = np.empty((len(tokens), self._n_vocab), dtype=np.float32)
            batch = lib.llama_batch_init(n_batch, 0, 1)
            try:
                for start in range(0, len(tokens), n_batch):
                    chunk = tokens[start:start + n_batch]
                    batch.n_tokens = len(chunk)
                    for i, tok in enumerate(chunk):
                        batch.token[i] = tok
                        batch.pos[i] = start + i
                        batch.n_seq_id[i] = 1
                        batch.seq_id[i][0] = 0
                        batch.logits[i] = 1
                    _log.clear_recent()
                    rc = lib.llama_decode(ctx, batch)
                    if rc != 0:
                        raise DecodeError(f"llama_decode failed with code {rc}", _log.recent_native_log())
                    self._kv_tokens.extend(chunk)
                    for i in range(len(chunk)):
                        row = lib.llama_get_logits_ith(ctx, i)
                        out[start + i] = np.frombuffer(ffi.buffer(row, 4 * self._n_vocab), dtype=np.float32)
            finally:
                lib.llama_batch_free(batch)
        return out

    # -- generation ----------------------------------------------------------------------------------

    def generate(self, prompt: str | Sequence[int], *, max_tokens: int = 256, temperature: float = 0.8, top_k: int = 40,
                 top_p: float = 0.95, min_p: float = 0.05, repeat_penalty: float = 1.0, seed: int | None = None,
                 stop: str | Sequence[str] = (), stream: bool = False) -> Completion | Iterator[Piece]:
        """Continue `prompt` (text, or token ids used as they are). temperature=0 is greedy.

        With stream=True, an iterator of Pieces.
        """
        tokens = self.prompt_tokens(prompt)
        return self._start(tokens, max_tokens, stop, stream, temperature=temperature, top_k=top_k, top_p=top_p,
                           min_p=min_p, repeat_penalty=repeat_penalty, seed=seed)

    def prompt_tokens(self, prompt: str | Sequence[int]) -> list[int]:
        """A prompt's tokens: text tokenized with BOS as the model wants, or a list of token ids, checked."""
        if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(t, int) for t in prompt):
            self._live()
            self._check_tokens(prompt)
            return list(prompt)
        if not isinstance(prompt, str):
            raise InvalidArgumentError(f"prompt must be a str or a list of token ids, got {type(prompt).__name__}")
        if not prompt:
            raise InvalidArgumentError("prompt is empty")
        return self.tokenize(prompt, add_special=True, parse_special=False)

    def chat(self, messages: Sequence[dict], **kwargs) -> Completion | Iterator[Piece]:  # noqa: ANN003
        """Generate the assistant's reply to `messages` ([{"role": ..., "content": ...}]) with the GGUF's template."""
        prompt = self.apply_chat_template(messages)
        stream = kwargs.pop("stream", False)
        max_tokens = kwargs.pop("max_tokens", 256)
        stop = kwargs.pop("stop", ())
        tokens = self.tokenize(prompt, add_special=True, parse_special=True)
        return self._start(tokens, max_tokens, stop, stream, **kwargs)

    def apply_chat_template(self, messages: Sequence[dict]) -> str:
        if not isinstance(messages, (list, tuple)) or not messages:
            raise InvalidArgumentError("messages must be a non-empty list of {'role': ..., 'content': ...}")
        for m in messages:
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise InvalidArgumentError(f"each message needs str 'role' and 'content', got {m!r}")
        self._live()
        tmpl = lib.llama_model_chat_template(self._model, ffi.NULL)
        if tmpl == ffi.NULL:
            raise LlamaError(f"{self.path.name} has no chat template; use generate()")
        keep = [(ffi.new("char[]", m["role"].encode()), ffi.new("char[]", m["content"].encode())) for m in messages]
        chat = ffi.new("llama_chat_message[]", len(keep))
        for i, (role, content) in enumerate(keep):
            chat[i].role, chat[i].content = role, content
        cap = 2 * sum(len(m["content"]) + len(m["role"]) for m in messages) + 256
        for _ in range(2):
            buf = ffi.new("char[]", cap)
            n = lib.llama_chat_apply_template(tmpl, chat, len(keep), True, buf, cap)
            if n < 0:
                raise LlamaError(f"llama.cpp does not support the chat template of {self.path.name}")
            if n <= cap:
                return ffi.unpack(buf, n).decode("utf-8")
            cap = n
        raise LlamaError("chat template output kept growing")  # pragma: no cover

    def _start(self, tokens: list[int], max_tokens: int, stop: str | Sequence[str], stream: bool,
               **sampling: object) -> Completion | Iterator[Piece]:
        stops = check_limits(max_tokens, stop)
        if sampling.get("seed") is None:
            sampling["seed"] = self._sampling_seed
        params = SamplingParams(**sampling)  # type: ignore[arg-type]
        self._live()
        n_ctx = self.n_ctx_seq
        if len(tokens) >= n_ctx:
            raise ContextOverflowError(f"the prompt has {len(tokens)} tokens but the context holds n_ctx={n_ctx}")
        pieces = self._run(tokens, max_tokens, stops, params)
        if stream:
            return pieces
        last = None
        for last in pieces:
            pass
        assert last is not None and last.completion is not None
        return last.completion

    def _run(self, prompt: list[int], max_tokens: int, stops: list[str], params: SamplingParams) -> Iterator[Piece]:
        with self._lock:
            if self._busy:
                raise LlamaError("another generation is running on this Model; finish or close its stream first")
            self._busy = True
        try:
            yield from self._generate_pieces(prompt, max_tokens, stops, params)
        finally:
            self._busy = False

    def _generate_pieces(self, prompt: list[int], max_tokens: int, stops: list[str],
                         params: SamplingParams) -> Iterator[Piece]:
        t0 = time.perf_counter()
        n_evaluated = self._evaluate(prompt)
        t1 = time.perf_counter()
        sampler = SamplerChain(params, self._n_vocab)
        stream = TextStream(stops)
        n_ctx = self.n_ctx_seq
        generated: list[int] = []
        finish: FinishReason = "length"
        pending: list[int] = []
        while len(generated) < max_tokens:
            token = sampler.sample(self._ctx)
            if lib.llama_vocab_is_eog(self._vocab, token):
                finish = "stop"
                break
            generated.append(token)
            pending.append(token)
            shown = stream.add(self._piece(token))
            if stream.stopped:
                finish = "stop"
                break
            if shown:
                yield Piece(shown, pending)
                pending = []
            if len(generated) >= max_tokens or len(self._kv_tokens) + 1 >= n_ctx:
                break
            self._decode([token])
        # a character cut off by max_tokens is dropped, not shown as U+FFFD (its tokens stay in `tokens`)
        t2 = time.perf_counter()
        completion = Completion(
            text=stream.text, tokens=generated, finish_reason=finish,
            usage=Usage(len(prompt), len(generated)),
            timings=Timings((t1 - t0) * 1e3, (t2 - t1) * 1e3, n_evaluated, len(generated)))
        yield Piece(stream.flush(), pending, finish, completion)

    # -- embeddings ----------------------------------------------------------------------------------

    def embed(self, text: str | Sequence[str]) -> np.ndarray:
        """L2-normalised embedding(s): shape (n_embd,) for a str, (len(texts), n_embd) for a list."""
        if not self.embedding:
            raise InvalidArgumentError("embed() needs Model(..., embedding=True)")
        single = isinstance(text, str)
        texts = [text] if single else list(text)
        if not texts or not all(isinstance(t, str) and t for t in texts):
            raise InvalidArgumentError("embed() takes a non-empty str or a non-empty list of non-empty str")
        ctx = self._live()
        n_embd = lib.llama_model_n_embd(self._model)
        n_ubatch = lib.llama_n_batch(ctx)
        out = np.empty((len(texts), n_embd), dtype=np.float32)
        with self._lock:
            self._ensure_idle()
            lib.llama_set_embeddings(ctx, True)
            try:
                for i, t in enumerate(texts):
                    tokens = self.tokenize(t)
                    if len(tokens) > n_ubatch:
                        raise ContextOverflowError(f"text {i} has {len(tokens)} tokens; embeddings take at most "
                                                   f"n_batch={n_ubatch}")
                    lib.llama_memory_clear(lib.llama_get_memory(ctx), True)
                    self._kv_tokens = []
                    self._decode(tokens)
                    vec = lib.llama_get_embeddings_seq(ctx, 0)
                    check(vec, LlamaError, "llama.cpp returned no pooled embedding")
                    out[i] = np.frombuffer(ffi.buffer(vec, 4 * n_embd), dtype=np.float32)
            finally:
                lib.llama_set_embeddings(ctx, False)
                lib.llama_memory_clear(lib.llama_get_memory(ctx), True)
                self._kv_tokens = []
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
        return out[0] if single else out

    # -- state -----------------------------------------------------------------------------------------

    def save_state(self, path: str | os.PathLike) -> None:
        """Write the KV cache and its tokens to `path` (smaller with quantized K/V)."""
        ctx = self._live()
        toks = ffi.new("llama_token[]", self._kv_tokens or [0])
        _log.clear_recent()
        check(lib.llama_state_save_file(ctx, os.fsencode(path), toks, len(self._kv_tokens)),
              LlamaError, f"could not save the state to {path}")

    def load_state(self, path: str | os.PathLike) -> None:
        """Restore a state written by save_state() of a Model with the same model file and KV settings."""
        ctx = self._live()
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"no state file at {p}")
        n_ctx = lib.llama_n_ctx(ctx)
        toks = ffi.new("llama_token[]", n_ctx)
        n = ffi.new("size_t *")
        _log.clear_recent()
        ok = lib.llama_state_load_file(ctx, os.fsencode(p), toks, n_ctx, n)
        if not ok:
            self._kv_tokens = []
            lib.llama_memory_clear(lib.llama_get_memory(ctx), True)
            check(False, LlamaError, f"could not load the state from {p} (another model, KV type or n_ctx?)")
        self._kv_tokens = list(ffi.unpack(toks, n[0]))

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"n_ctx={self.n_ctx}"
        return f"Model({str(self.path)!r}, ctk={self.ctk!r}, ctv={self.ctv!r}, flash_attn={self.flash_attn!r}, {state})"


def _default_threads() -> int:
    try:
        import psutil

        return psutil.cpu_count(logical=False) or os.cpu_count() or 1
    except ImportError:  # pragma: no cover
        return os.cpu_count() or 1
