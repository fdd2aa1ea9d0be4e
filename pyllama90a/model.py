"""`Model`: one llama.cpp model and its context, with text generation, chat, embeddings and state."""
from __future__ import annotations

import os
import threading
import time
import warnings
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Literal, Mapping, Sequence

import numpy as np

from . import _log
from ._ffi import ffi, lib
from .errors import (INT32_MAX, BusyError, ClosedError, ContextError, ContextOverflowError, DecodeError,
                     InvalidArgumentError, LlamaError, ModelFormatError, ModelLoadError, StateFileError, check, flag,
                     fs_path, int_in_range, positive_int, token_ids, utf8)
from .attention_paths import AttentionPaths
from .attention_policy import AttentionChoice, choose
from .chat import PreparedChat, finish_reason, prepare_chat
from .chat_template import ChatTemplate
from .constrained import Constraint, OutputRules, constraint_from
from .gguf_header import read_header
from ._vocab import token_piece, vocab_tokenize
from .kv_types import block_size, check_kv_type, ggml_type
from .sampling import SamplerChain, SamplingParams
from .state_file import StateIdentity, model_fingerprint, read_state_file, write_state_file
from .text_stream import TextStream
from .tool_calls import ParsedToolCall

FLASH_ATTN = {"auto": "LLAMA_FLASH_ATTN_TYPE_AUTO", "on": "LLAMA_FLASH_ATTN_TYPE_ENABLED",
              "off": "LLAMA_FLASH_ATTN_TYPE_DISABLED"}
FinishReason = Literal["stop", "length", "tool_calls"]

# llama.cpp pads n_ctx up to a multiple of 256 in a uint32 and positions are int32 (llama_pos): the largest
# context whose padded size still fits both
MAX_N_CTX = INT32_MAX // 256 * 256
LLAMA_MAX_SEQ = 256  # llama-cparams.h: llama.cpp refuses more sequences
# llama.cpp pads every sequence's share of the cells up to a multiple of 256 (llama-context.cpp), so a smaller
# share would silently multiply the KV memory asked for (n_ctx 128 with n_seq_max 256 would allocate 65,536 cells)
MIN_CELLS_PER_SEQUENCE = 256
GGML_MAX_N_THREADS = 512  # ggml.h: the most threads a ggml CPU threadpool takes


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
    tool_calls: tuple[ParsedToolCall, ...] = ()  # chat with tools: the calls (`text` is then the content)


@dataclass(frozen=True)
class Piece:
    """One streamed piece: whole UTF-8 characters only. The last piece has a finish_reason.

    A chat with tools streams its content in `text` and its calls in `tool_calls`, as OpenAI's deltas:
    {"index", "id", "type", "function": {"name", "arguments": ""}} when a call starts, then
    {"index", "function": {"arguments": <fragment>}} as its arguments arrive."""
    text: str
    tokens: list[int] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    completion: Completion | None = None  # on the last piece: the whole result
    tool_calls: list[dict] = field(default_factory=list)


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


def check_limits(max_tokens: object, stop: str | Sequence[str] | None) -> list[str]:
    """A request's max_tokens (a positive int32) and stop strings (a str, a list or tuple of them, or None for
    none), checked; returns the stops as a list."""
    positive_int("max_tokens", max_tokens)
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else list(stop) if isinstance(stop, (list, tuple)) else None
    if stops is None or not all(isinstance(s, str) and s for s in stops):
        raise InvalidArgumentError(f"stop must be a non-empty str, a list of them or None, got {stop!r}"[:200])
    for s in stops:
        utf8("a stop string", s)
    return stops


def check_sequences(n_ctx: int, n_batch: int, n_seq_max: int) -> None:
    """The limits llama.cpp asserts (aborting the process) or silently pads around for several sequences."""
    if n_seq_max > LLAMA_MAX_SEQ:
        raise InvalidArgumentError(f"n_seq_max must be at most {LLAMA_MAX_SEQ} (llama.cpp's limit), got {n_seq_max}")
    padded_n_ctx = -(-n_ctx // 256) * 256  # what llama.cpp divides among the sequences
    if n_seq_max > 1 and padded_n_ctx // n_seq_max < MIN_CELLS_PER_SEQUENCE:
        raise InvalidArgumentError(
            f"n_ctx={n_ctx} gives each of n_seq_max={n_seq_max} sequences {padded_n_ctx // n_seq_max} cells; each "
            f"needs at least {MIN_CELLS_PER_SEQUENCE} (llama.cpp pads a sequence's cells up to that), so n_ctx must "
            f"be at least {MIN_CELLS_PER_SEQUENCE * n_seq_max}")
    if n_seq_max > n_batch:  # llama.cpp keeps an output row per sequence in a batch of n_batch outputs
        raise InvalidArgumentError(f"n_batch={n_batch} must be at least n_seq_max={n_seq_max}")


def max_threads() -> int:
    """The most CPU threads a Model takes: the machine's logical CPUs. ggml's threads meet at a barrier after
    every operation and spin while they wait, so more threads than CPUs only take turns on the same cores (10,000
    threads made a few-token generation take 38 s instead of a fraction of a second)."""
    return min(os.cpu_count() or 1, GGML_MAX_N_THREADS)


def _load_reason() -> str:
    """': <why>' from llama.cpp's "error loading model: <why>" log line (the key and value a check refused),
    so the exception's first line says it; '' when it logged none."""
    marker = "error loading model: "
    for line in reversed(_log.recent_native_log()):
        if marker in line:
            return ": " + line.split(marker, 1)[1]
    return ""


class Model:
    """A GGUF model with a context, e.g. `Model(path, ctk="q4_0", ctv="q4_0", flash_attn="off")`.

    KV types by name: f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl; flash_attn "on", "off" or "auto".
    Use as a context manager or call close(); a model that is garbage collected is freed too.

    Threads: a Model runs one thing on its context at a time. While a generation runs (a non-streaming call, or
    a stream from its first piece until it ends or its iterator is closed), every method that uses the context
    raises BusyError, from any thread, the stream's own thread included: generate, chat, eval, logits,
    last_logits, truncate, embed, save_state, load_state, compute_buffer_bytes and close. Methods that only read
    the model (tokenize, detokenize, prompt_tokens, apply_chat_template, metadata, kv_cache, n_ctx, n_ctx_seq,
    n_ctx_train, n_cached, attention) are always allowed. A lock serializes the calls, so close() never frees the
    model under another thread's call.
    """

    def __init__(self, path: str | os.PathLike | None = None, *, ctk: str = "f16", ctv: str = "f16",
                 flash_attn: str = "auto", n_ctx: int = 4096, n_batch: int = 512, n_ubatch: int = 512,
                 n_gpu_layers: int = -1, n_threads: int | None = None, seed: int | None = None,
                 embedding: bool = False, n_seq_max: int = 1, chat_template: str | None = None,
                 attention_paths: AttentionPaths | None = None) -> None:
        self._ctx = self._model = None
        self._lock = threading.RLock()
        self._busy: str | None = None  # what holds the context: a generation, or a BatchEngine
        if path is None:
            from .default_model import default_model

            path = default_model()
        raw_path = fs_path("path", path)
        self.path = Path(os.fsdecode(raw_path))
        self.ctk = check_kv_type(ctk, "K")
        self.ctv = check_kv_type(ctv, "V")
        if not isinstance(flash_attn, str) or flash_attn not in FLASH_ATTN:
            raise InvalidArgumentError(f"flash_attn must be one of {', '.join(FLASH_ATTN)}, got {flash_attn!r}")
        self.flash_attn = flash_attn
        positive_int("n_ctx", n_ctx, MAX_N_CTX)
        # sequences with a KV stream of n_ctx / n_seq_max cells each (BatchEngine); this Model's own calls use 0
        positive_int("n_seq_max", n_seq_max)
        positive_int("n_batch", n_batch)  # an int32 in llama_batch_init
        n_ubatch = min(positive_int("n_ubatch", n_ubatch), n_batch)
        check_sequences(n_ctx, n_batch, n_seq_max)
        int_in_range("n_gpu_layers", n_gpu_layers, -1, INT32_MAX)  # -1: all layers
        n_threads = _default_threads() if n_threads is None else positive_int("n_threads", n_threads)
        if n_threads > max_threads():
            raise InvalidArgumentError(f"n_threads={n_threads} is more than this machine's {max_threads()} logical "
                                       f"CPUs; more threads only wait for each other")
        self._sampling_seed = seed
        if seed is not None:
            SamplingParams(seed=seed)  # validates
        self.embedding = flag("embedding", embedding)
        if chat_template is not None:  # Jinja text that replaces the GGUF's: compiled now, so errors show here
            ChatTemplate(chat_template)
        self._template_source = chat_template
        self._chat_template: ChatTemplate | None = None
        self._chat_template_read = False

        header = read_header(self.path)
        self._check_header(header, n_ctx)
        # what a state file must have been saved by (state_file.py); taken now, from the file llama.cpp loads next
        self._model_sha256 = model_fingerprint(raw_path, header.data_offset)

        _log.clear_recent()
        mparams = lib.llama_model_default_params()
        mparams.n_gpu_layers = n_gpu_layers
        model = lib.llama_model_load_from_file(raw_path, mparams)
        if model == ffi.NULL:  # (the reason is looked up only on failure)
            raise ModelLoadError(f"llama.cpp could not load {self.path}{_load_reason()}", _log.recent_native_log())
        self._model = model
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
        self._attention_paths = AttentionPaths()
        if attention_paths is not None:
            self.attention_paths = attention_paths
        self._kv_tokens: list[int] = []  # tokens whose K and V are in the cache, in order (sequence 0)

    # -- validation before llama.cpp sees anything -------------------------------------------------

    def _check_header(self, header, n_ctx: int) -> None:  # noqa: ANN001 - a GGUFHeader
        """Every check of the GGUF's values before llama.cpp reads them (hyperparameter validation goes here)."""
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
            self._refuse_if_busy("close the model")
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

    @contextmanager
    def _held_by(self, holder: str) -> Iterator[None]:
        """Mark the context as used by `holder` (e.g. a BatchEngine) while the block runs: every context call is
        refused with BusyError meanwhile; calls that only read the model stay allowed."""
        with self._using_context(f"start {holder}"):
            self._busy = holder
        try:
            yield
        finally:
            with self._lock:
                self._busy = None

    def _refuse_if_busy(self, action: str) -> None:
        if self._busy:
            raise BusyError(f"cannot {action}: {self._busy} is using this Model; finish or close it first")

    @contextmanager
    def _using_context(self, action: str) -> Iterator:
        """Hold the lock and refuse while a generation runs: for every call that reads or changes the context.
        Yields the context."""
        with self._lock:
            ctx = self._live()
            self._refuse_if_busy(action)
            yield ctx

    @contextmanager
    def _using_model(self) -> Iterator:
        """Hold the lock (so close() waits) for a call that only reads the model; allowed during a generation."""
        with self._lock:
            yield self._live()

    # -- facts ---------------------------------------------------------------------------------------

    @property
    def n_ctx(self) -> int:
        with self._using_model() as ctx:
            return lib.llama_n_ctx(ctx)

    @property
    def n_ctx_seq(self) -> int:
        """Cells one sequence can use: n_ctx, or n_ctx / n_seq_max with several sequences."""
        with self._using_model() as ctx:
            return lib.llama_n_ctx(ctx) // lib.llama_n_seq_max(ctx)

    @property
    def n_ctx_train(self) -> int:
        with self._using_model():
            return lib.llama_model_n_ctx_train(self._model)

    @property
    def kv_cache(self) -> KVCacheInfo:
        """KV types, context size and the exact bytes of the K and V tensors (fixed when the context is made)."""
        k, v = ffi.new("size_t *"), ffi.new("size_t *")
        with self._using_model() as ctx:
            lib.llama_kv_cache_bytes(ctx, k, v)
            return KVCacheInfo(self.ctk, self.ctv, lib.llama_n_ctx(ctx), k[0], v[0])

    @property
    def attention_paths(self) -> AttentionPaths:
        """Which of pyllama90a's attention kernels this context's graphs use (all by default); assign another
        AttentionPaths to switch some off (the compute buffers are re-reserved at once)."""
        return self._attention_paths

    @attention_paths.setter
    def attention_paths(self, paths: AttentionPaths) -> None:
        if not isinstance(paths, AttentionPaths):
            raise InvalidArgumentError(f"attention_paths must be an AttentionPaths, got {type(paths).__name__}")
        with self._using_context("change the attention paths") as ctx:
            params = lib.llama_pyl_attn_default_params()
            params.paths = paths.bits
            _log.clear_recent()
            if not lib.llama_pyl_set_attn_params(ctx, params):
                raise ContextError("llama.cpp could not reserve the compute buffers of these attention paths",
                                   _log.recent_native_log())
            self._attention_paths = paths

    @property
    def attention(self) -> AttentionChoice:
        """What flash_attn setting llama.cpp was given, on which device, and why (see attention_policy)."""
        return self._attention

    @property
    def compute_buffer_bytes(self) -> int:
        """Bytes of the compute buffers llama.cpp reserved for this context (all backends)."""
        with self._using_context("read the compute buffers") as ctx:  # a decode may re-reserve them
            return lib.llama_compute_buffer_bytes(ctx)

    def metadata(self, key: str) -> str | None:
        """The GGUF metadata value of `key` as text, or None when the model has no such key."""
        raw_key = utf8("key", key, nul_ok=False)
        with self._using_model():
            buf = ffi.new("char[]", 4096)
            n = lib.llama_model_meta_val_str(self._model, raw_key, buf, len(buf))
            if n >= len(buf):  # snprintf-like: n is the whole value's length
                buf = ffi.new("char[]", n + 1)
                n = lib.llama_model_meta_val_str(self._model, raw_key, buf, len(buf))
        return None if n < 0 else ffi.unpack(buf, n).decode("utf-8", "replace")

    # -- tokens --------------------------------------------------------------------------------------

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]:
        data = utf8("text", text)
        flag("add_special", add_special)
        flag("parse_special", parse_special)
        if len(data) > INT32_MAX - 8:  # its length and the token buffer's are int32 in llama_tokenize
            raise InvalidArgumentError(f"text has {len(data)} bytes; llama.cpp tokenizes at most {INT32_MAX - 8}")
        with self._using_model():
            return vocab_tokenize(self._vocab, data, add_special, parse_special)

    def detokenize(self, tokens: Sequence[int], special: bool = False) -> str:
        flag("special", special)
        with self._using_model():
            tokens = self._checked_tokens(tokens)
            toks = ffi.new("llama_token[]", tokens)
            cap = min(max(16, 8 * len(tokens)), INT32_MAX)
            buf = ffi.new("char[]", cap)
            n = lib.llama_detokenize(self._vocab, toks, len(tokens), buf, cap, False, special)
            if n < 0:
                cap = -n
                buf = ffi.new("char[]", cap)
                n = lib.llama_detokenize(self._vocab, toks, len(tokens), buf, cap, False, special)
        return ffi.unpack(buf, check(n, LlamaError, "detokenization failed")).decode("utf-8", "replace")

    def _checked_tokens(self, tokens: object) -> list[int]:
        return token_ids(tokens, self._n_vocab)

    def _piece(self, token: int) -> bytes:
        return token_piece(self._vocab, token)

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
        tokens = self._checked_tokens(tokens)
        if not tokens:
            raise InvalidArgumentError("tokens is empty")
        n_ctx = self.n_ctx_seq
        if after + len(tokens) > n_ctx:
            raise ContextOverflowError(f"{after} cached + {len(tokens)} new tokens do not fit n_ctx={n_ctx}")
        return tokens

    @property
    def n_cached(self) -> int:
        """How many tokens the KV cache holds (sequence 0)."""
        with self._using_model():
            return len(self._kv_tokens)

    def eval(self, tokens: Sequence[int]) -> None:
        """Decode `tokens` after the cached ones (positions continue); for manual cache control and benchmarks."""
        with self._using_context("eval") as ctx:
            tokens = self._fitting_tokens(tokens, len(self._kv_tokens))
            n_batch = lib.llama_n_batch(ctx)
            for start in range(0, len(tokens), n_batch):
                self._decode(tokens[start:start + n_batch])
            lib.llama_synchronize(ctx)

    def last_logits(self) -> np.ndarray:
        """A copy of the logits after the last evaluated token, shape (n_vocab,)."""
        with self._using_context("read the logits") as ctx:
            if not self._kv_tokens:
                raise LlamaError("nothing was evaluated yet")
            row = check(lib.llama_get_logits_ith(ctx, -1), LlamaError, "no logits for the last token")
            return np.frombuffer(ffi.buffer(row, 4 * self._n_vocab), dtype=np.float32).copy()

    def truncate(self, n_tokens: int) -> None:
        """Keep only the first `n_tokens` cached tokens."""
        int_in_range("n_tokens", n_tokens, 0, INT32_MAX)  # a position (int32)
        with self._using_context("truncate the cache") as ctx:
            if n_tokens >= len(self._kv_tokens):
                return
            mem = lib.llama_get_memory(ctx)
            if not lib.llama_memory_seq_rm(mem, 0, n_tokens, -1):  # pragma: no cover - never for a KV cache
                raise LlamaError("llama.cpp could not truncate the cache")
            del self._kv_tokens[n_tokens:]

    def logits(self, tokens: Sequence[int]) -> np.ndarray:
        """Evaluate `tokens` from an empty cache; logits after every token, shape (len(tokens), n_vocab)."""
        with self._using_context("compute logits") as ctx:
            tokens = self._fitting_tokens(tokens, 0)
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
                 top_p: float = 0.95, min_p: float = 0.05, repeat_penalty: float = 1.0,
                 frequency_penalty: float = 0.0, presence_penalty: float = 0.0, seed: int | None = None,
                 stop: str | Sequence[str] | None = (), stream: bool = False, response_format: object = None,
                 json_schema: object = None, grammar: str | None = None, regex: str | None = None,
                 logit_bias: Mapping[object, float] | None = None) -> Completion | Iterator[Piece]:
        """Continue `prompt` (text, or token ids used as they are). temperature=0 is greedy.

        The output can be constrained by at most one of: json_schema (a dict, JSON text or a pydantic model
        class), response_format (OpenAI's {"type": "json_object"} / {"type": "json_schema", ...}, or a pydantic
        model class), grammar (GBNF text, as llama.cpp takes it) or regex; logit_bias maps token ids to a bias
        in [-100, 100] (-100 bans). Constraints need the llguidance package (pyllama90a[structured]).

        With stream=True, an iterator of Pieces; the Model is busy from its first piece until it ends or is closed.
        """
        tokens = self.prompt_tokens(prompt)
        constraint = constraint_from(json_schema=json_schema, response_format=response_format, regex=regex,
                                     grammar=grammar)
        return self._start(tokens, max_tokens, stop, stream, self._rules(constraint, logit_bias), None,
                           temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                           repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                           presence_penalty=presence_penalty, seed=seed)

    def prompt_tokens(self, prompt: str | Sequence[int]) -> list[int]:
        """A prompt's tokens: text tokenized with BOS as the model wants, or a list of token ids, checked."""
        if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(t, int) for t in prompt):
            with self._using_model():
                return self._checked_tokens(prompt)
        if not isinstance(prompt, str):
            raise InvalidArgumentError(f"prompt must be a str or a list of token ids, got {type(prompt).__name__}")
        if not prompt:
            raise InvalidArgumentError("prompt is empty")
        return self.tokenize(prompt, add_special=True, parse_special=False)

    def chat(self, messages: Sequence[dict], *, max_tokens: int = 256, temperature: float = 0.8, top_k: int = 40,
             top_p: float = 0.95, min_p: float = 0.05, repeat_penalty: float = 1.0, frequency_penalty: float = 0.0,
             presence_penalty: float = 0.0, seed: int | None = None, stop: str | Sequence[str] | None = (),
             stream: bool = False, tools: Sequence[dict] | None = None, tool_choice: object = None,
             parallel_tool_calls: bool = True, response_format: object = None, json_schema: object = None,
             grammar: str | None = None, regex: str | None = None, logit_bias: Mapping[object, float] | None = None,
             chat_template_kwargs: Mapping[str, Any] | None = None) -> Completion | Iterator[Piece]:
        """Generate the assistant's reply to `messages` (OpenAI's shape: role, content, an assistant's
        tool_calls, tool results) with the model's chat template (see chat_template). The sampling and
        constraint arguments are generate()'s.

        tools: OpenAI's function tools; tool_choice "auto" (the default with tools), "none", "required" or
        {"type": "function", "function": {"name": ...}}. A required or named call is guaranteed to be a call of
        a listed function whose arguments match its schema; with "auto" the model may answer in text, and a call
        it starts is constrained from its first marker on. The result's `tool_calls` holds the calls (ids,
        names, arguments as JSON text), `text` the content, and finish_reason is "tool_calls".
        chat_template_kwargs: extra template variables (e.g. {"enable_thinking": False}).
        """
        constraint = constraint_from(json_schema=json_schema, response_format=response_format, regex=regex,
                                     grammar=grammar)
        prepared = prepare_chat(self, messages, tools=tools, tool_choice=tool_choice,
                                parallel_tool_calls=parallel_tool_calls, constraint=constraint,
                                template_kwargs=chat_template_kwargs)
        return self._start(prepared.tokens, max_tokens, stop, stream, self._rules(prepared.constraint, logit_bias),
                           prepared, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p,
                           repeat_penalty=repeat_penalty, frequency_penalty=frequency_penalty,
                           presence_penalty=presence_penalty, seed=seed)

    @property
    def chat_template(self) -> ChatTemplate | None:
        """The Jinja template chat() renders: Model(chat_template=...) if given, else the GGUF's
        tokenizer.chat_template; None when there is neither (chat() then uses llama.cpp's built-in ChatML).
        A GGUF template that does not compile raises ChatTemplateError here (and in chat())."""
        with self._using_model():
            if not self._chat_template_read:
                self._chat_template = ChatTemplate.for_model(self, self._template_source)
                self._chat_template_read = True
            return self._chat_template

    def apply_chat_template(self, messages: Sequence[dict], *, tools: Sequence[dict] | None = None,
                            add_generation_prompt: bool = True, **template_kwargs: Any) -> str:
        """The prompt text chat() would tokenize for `messages` (and `tools`)."""
        template = self.chat_template
        if template is None:
            from .chat_template import normalize_messages, text_only_history

            if not add_generation_prompt or template_kwargs:
                raise InvalidArgumentError(f"{self.path.name} has no chat template: llama.cpp's built-in ChatML "
                                           "takes no add_generation_prompt=False or template variables")
            return self._builtin_chat_template(text_only_history(normalize_messages(messages), tools or ()),
                                               "chatml")
        return template.render(messages, tools=tools, add_generation_prompt=add_generation_prompt, **template_kwargs)

    def _builtin_chat_template(self, messages: Sequence[dict], name: str | None) -> str:
        """`messages` ({"role", "content"} strings) rendered by llama.cpp's built-in template `name` (None: the
        one it matches to the GGUF's template text), ready for the assistant's turn."""
        # the template gets NUL-terminated strings: a NUL would silently cut a message
        encoded = [(utf8(f"messages[{i}]['role']", m["role"], nul_ok=False),
                    utf8(f"messages[{i}]['content']", m["content"], nul_ok=False)) for i, m in enumerate(messages)]
        cap = 2 * sum(len(role) + len(content) for role, content in encoded) + 256
        if cap > INT32_MAX:  # the output buffer's length is an int32
            raise InvalidArgumentError(f"messages are too long for llama.cpp's chat template ({cap} bytes)")
        keep = [(ffi.new("char[]", role), ffi.new("char[]", content)) for role, content in encoded]
        chat = ffi.new("llama_chat_message[]", len(keep))
        for i, (role, content) in enumerate(keep):
            chat[i].role, chat[i].content = role, content
        with self._using_model():
            tmpl = ffi.new("char[]", name.encode()) if name else lib.llama_model_chat_template(self._model, ffi.NULL)
            if tmpl == ffi.NULL:
                raise LlamaError(f"{self.path.name} has no chat template")
            for _ in range(2):
                buf = ffi.new("char[]", cap)
                n = lib.llama_chat_apply_template(tmpl, chat, len(keep), True, buf, cap)
                if n < 0:
                    raise LlamaError(f"llama.cpp does not support the chat template {name or self.path.name}")
                if n <= cap:
                    return ffi.unpack(buf, n).decode("utf-8", "replace")
                cap = n
        raise LlamaError("chat template output kept growing")  # pragma: no cover

    def _rules(self, constraint: Constraint | None, logit_bias: Mapping[object, float] | None) -> OutputRules | None:
        with self._using_model():
            return OutputRules.for_request(self, constraint, logit_bias)

    def _start(self, tokens: list[int], max_tokens: int, stop: str | Sequence[str] | None, stream: bool,
               rules: OutputRules | None, chat: PreparedChat | None, **sampling: object) -> Completion | Iterator[Piece]:
        stops = check_limits(max_tokens, stop)
        flag("stream", stream)
        if sampling.get("seed") is None:
            sampling["seed"] = self._sampling_seed
        params = SamplingParams(**sampling)  # type: ignore[arg-type]
        n_ctx = self.n_ctx_seq
        if len(tokens) >= n_ctx:
            raise ContextOverflowError(f"the prompt has {len(tokens)} tokens but the context holds n_ctx={n_ctx}")
        pieces = self._run(tokens, max_tokens, stops, params, rules)
        if chat is not None and chat.tool_format is not None:
            pieces = _split_tool_calls(pieces, chat)
        if stream:
            return pieces
        last = None
        for last in pieces:
            pass
        assert last is not None and last.completion is not None
        return last.completion

    def _run(self, prompt: list[int], max_tokens: int, stops: list[str], params: SamplingParams,
             rules: OutputRules | None) -> Iterator[Piece]:
        with self._using_context("start a generation"):
            self._busy = "another generation"
        try:
            yield from self._generate_pieces(prompt, max_tokens, stops, params, rules)
        finally:
            self._busy = None

    def _generate_pieces(self, prompt: list[int], max_tokens: int, stops: list[str], params: SamplingParams,
                         rules: OutputRules | None) -> Iterator[Piece]:
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
            if rules is not None:  # bias and mask llama.cpp's own row, which the sampler chain reads next
                rules.apply(logits_row(self._ctx, -1, self._n_vocab))
            token = sampler.sample(self._ctx)
            if rules is not None:
                rules.accept(token)
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
        texts: list[str] = [text] if isinstance(text, str) else list(text) if isinstance(text, (list, tuple)) else []
        if not texts or not all(isinstance(t, str) and t for t in texts):
            raise InvalidArgumentError("embed() takes a non-empty str or a non-empty list of non-empty str")
        for i, t in enumerate(texts):
            utf8("text" if single else f"text[{i}]", t)
        with self._using_context("embed") as ctx:
            n_embd = lib.llama_model_n_embd(self._model)
            n_ubatch = lib.llama_n_batch(ctx)
            out = np.empty((len(texts), n_embd), dtype=np.float32)
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
        """Write the KV cache and its tokens to `path` (smaller with quantized K/V), with a header naming this
        model, KV types and n_ctx and a checksum (state_file.py). The file appears whole or not at all, readable
        by its owner only (it holds the conversation)."""
        raw_path = fs_path("path", path)
        with self._using_context("save the state") as ctx:
            write_state_file(raw_path, self._state_identity(ctx), self._kv_tokens, self._state_bytes(ctx))

    def load_state(self, path: str | os.PathLike) -> None:
        """Restore a state written by save_state() of a Model with the same model file, KV types and n_ctx.

        A missing, corrupt or mismatched file raises StateFileError and leaves the cache as it was."""
        raw_path = fs_path("path", path)
        with self._using_context("load a state") as ctx:
            tokens, payload = read_state_file(raw_path, self._state_identity(ctx), self.n_ctx_seq, self._n_vocab)
            previous = self._state_bytes(ctx)  # llama.cpp may have changed the cache by the time it refuses
            _log.clear_recent()
            if lib.llama_state_set_data(ctx, ffi.from_buffer(payload), len(payload)) == len(payload):
                self._kv_tokens = tokens
                return
            refusal = _log.recent_native_log()
            if lib.llama_state_set_data(ctx, ffi.from_buffer(previous), len(previous)) != len(previous):
                lib.llama_memory_clear(lib.llama_get_memory(ctx), True)  # pragma: no cover - never seen
                self._kv_tokens = []
                raise StateFileError(f"llama.cpp refused the state in {os.fsdecode(raw_path)} and the previous "
                                     f"cache could not be restored: the cache is now empty", refusal)
            raise StateFileError(f"llama.cpp refused the state in {os.fsdecode(raw_path)} (saved with another "
                                 f"flash_attn setting?); the previous cache is kept", refusal)

    def _state_identity(self, ctx) -> StateIdentity:  # noqa: ANN001 - cdata
        return StateIdentity(self._model_sha256, self.ctk, self.ctv, lib.llama_n_ctx(ctx), lib.llama_n_seq_max(ctx))

    @staticmethod
    def _state_bytes(ctx) -> memoryview:  # noqa: ANN001 - cdata
        """llama.cpp's state of the whole context (its memory: the KV cells of every sequence)."""
        size = lib.llama_state_get_size(ctx)
        buf = ffi.new("uint8_t[]", size)
        _log.clear_recent()
        if size == 0 or lib.llama_state_get_data(ctx, buf, size) != size:
            raise LlamaError("llama.cpp could not copy its state", _log.recent_native_log())
        return memoryview(ffi.buffer(buf))

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"n_ctx={self.n_ctx}"
        return f"Model({str(self.path)!r}, ctk={self.ctk!r}, ctv={self.ctv!r}, flash_attn={self.flash_attn!r}, {state})"


def logits_row(ctx, index: int, n_vocab: int) -> np.ndarray:  # noqa: ANN001 - cdata
    """A writable float32 view of llama.cpp's logits row of batch position `index` (-1: the last), no copy."""
    row = lib.llama_get_logits_ith(ctx, index)
    if row == ffi.NULL:
        raise LlamaError(f"llama.cpp has no logits for batch position {index}", _log.recent_native_log())
    return np.frombuffer(ffi.buffer(row, 4 * n_vocab), dtype=np.float32)


def _split_tool_calls(pieces: Iterator[Piece], chat: PreparedChat) -> Iterator[Piece]:
    """A chat's pieces with the text split into content (Piece.text) and tool-call deltas (Piece.tool_calls);
    the last piece's Completion has the calls, the content as its text and finish_reason "tool_calls"."""
    parser = chat.stream()
    assert parser is not None
    tokens: list[int] = []  # tokens of text the parser holds back, sent with the piece that shows it
    try:
        for piece in pieces:
            deltas = parser.feed(piece.text)
            tokens += piece.tokens
            if piece.completion is None:
                if deltas:
                    yield _piece_of(deltas, tokens)
                    tokens = []
                continue
            deltas += parser.finish()
            result = parser.result()
            done = piece.completion
            reason = finish_reason(done.finish_reason, bool(result.tool_calls))
            completion = Completion(result.content, done.tokens, reason, done.usage, done.timings,  # type: ignore[arg-type]
                                    tuple(result.tool_calls))
            last = _piece_of(deltas, tokens)
            yield Piece(last.text, last.tokens, reason, completion, last.tool_calls)  # type: ignore[arg-type]
    finally:
        close = getattr(pieces, "close", None)
        if close is not None:
            close()  # an early close of this stream ends the generation (frees the Model) at once


def _piece_of(deltas: list[dict], tokens: list[int]) -> Piece:
    text = "".join(d.get("content", "") for d in deltas)
    calls = [tc for d in deltas for tc in d.get("tool_calls", ())]
    return Piece(text, tokens, tool_calls=calls)


def _default_threads() -> int:
    try:
        import psutil

        return psutil.cpu_count(logical=False) or os.cpu_count() or 1
    except ImportError:  # pragma: no cover
        return os.cpu_count() or 1
