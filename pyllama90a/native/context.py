"""ContextHandle: one llama_context on a ModelHandle (decode, logits rows, sequences, state, sizes), and
ContextParams, the settings it is made with. `_llama_params` is the one place llama_context_params is filled."""
from __future__ import annotations

import os
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from ..errors import (
    INT32_MAX,
    ClosedError,
    ContextError,
    DecodeError,
    InvalidArgumentError,
    LlamaError,
    flag,
    int_in_range,
    positive_int,
)
from ._ffi import ffi, lib
from .ggml import ggml_type
from .kv_types import FLASH_ATTN_MODES, check_kv_type
from .log import NativeCall
from .model import ModelHandle

if TYPE_CHECKING:  # pragma: no cover
    from .._native import CData  # (only in the stub, _native.pyi)
    from .batch import Batch
    from .lora import LoraHandle

POOLING = {"model": "LLAMA_POOLING_TYPE_UNSPECIFIED", "mean": "LLAMA_POOLING_TYPE_MEAN"}

# llama.cpp pads n_ctx up to a multiple of 256 in a uint32 and positions are int32 (llama_pos): the largest
# context whose padded size still fits both
MAX_N_CTX = INT32_MAX // 256 * 256
LLAMA_MAX_SEQ = 256  # llama-cparams.h: llama.cpp refuses more sequences
# llama.cpp pads every sequence's share of the cells up to a multiple of 256 (llama-context.cpp), so a smaller
# share would silently multiply the KV memory asked for (n_ctx 128 with n_seq_max 256 would allocate 65,536 cells)
MIN_CELLS_PER_SEQUENCE = 256
GGML_MAX_N_THREADS = 512  # ggml.h: the most threads a ggml CPU threadpool takes


def max_threads() -> int:
    """The most CPU threads a context takes: the machine's logical CPUs. ggml's threads meet at a barrier after
    every operation and spin while they wait, so more threads than CPUs only take turns on the same cores (10,000
    threads made a few-token generation take 38 s instead of a fraction of a second)."""
    return min(os.cpu_count() or 1, GGML_MAX_N_THREADS)


@dataclass(frozen=True)
class ContextParams:
    """What a context is made with, checked against the limits llama.cpp asserts on (aborting the process) or
    silently pads around. KV types by name; flash_attn as llama.cpp gets it ("on", "off" or "auto": it decides),
    or "hybrid" (on, with per-phase attention)."""

    n_ctx: int = 4096
    n_batch: int = 512
    n_ubatch: int = 512    # llama.cpp takes at most n_batch
    n_seq_max: int = 1     # sequences, each with its own KV stream of n_ctx / n_seq_max cells
    n_threads: int = 1
    type_k: str = "f16"
    type_v: str = "f16"
    flash_attn: str = "auto"
    pooling: str = "model"  # of pooled embeddings: "model" (as the GGUF says) or "mean" (over the tokens)

    def __post_init__(self) -> None:
        object.__setattr__(self, "type_k", check_kv_type(self.type_k, "K"))
        object.__setattr__(self, "type_v", check_kv_type(self.type_v, "V"))
        if not isinstance(self.flash_attn, str) or self.flash_attn not in FLASH_ATTN_MODES:
            raise InvalidArgumentError(f"flash_attn must be one of {', '.join(FLASH_ATTN_MODES)}, "
                                       f"got {self.flash_attn!r}")
        positive_int("n_ctx", self.n_ctx, MAX_N_CTX)
        positive_int("n_seq_max", self.n_seq_max)
        positive_int("n_batch", self.n_batch)  # an int32 in llama_batch_init
        positive_int("n_ubatch", self.n_ubatch)
        self._check_sequences()
        positive_int("n_threads", self.n_threads)
        if self.n_threads > max_threads():
            raise InvalidArgumentError(f"n_threads={self.n_threads} is more than this machine's {max_threads()} "
                                       f"logical CPUs; more threads only wait for each other")
        if self.pooling not in POOLING:
            raise InvalidArgumentError(f"pooling must be one of {', '.join(POOLING)}, got {self.pooling!r}")

    def _check_sequences(self) -> None:
        n_ctx, n_seq_max = self.n_ctx, self.n_seq_max
        if n_seq_max > LLAMA_MAX_SEQ:
            raise InvalidArgumentError(f"n_seq_max must be at most {LLAMA_MAX_SEQ} (llama.cpp's limit), "
                                       f"got {n_seq_max}")
        padded_n_ctx = -(-n_ctx // 256) * 256  # what llama.cpp divides among the sequences
        if n_seq_max > 1 and padded_n_ctx // n_seq_max < MIN_CELLS_PER_SEQUENCE:
            raise InvalidArgumentError(
                f"n_ctx={n_ctx} gives each of n_seq_max={n_seq_max} sequences {padded_n_ctx // n_seq_max} cells; "
                f"each needs at least {MIN_CELLS_PER_SEQUENCE} (llama.cpp pads a sequence's cells up to that), so "
                f"n_ctx must be at least {MIN_CELLS_PER_SEQUENCE * n_seq_max}")
        if n_seq_max > self.n_batch:  # llama.cpp keeps an output row per sequence in a batch of n_batch outputs
            raise InvalidArgumentError(f"n_batch={self.n_batch} must be at least n_seq_max={n_seq_max}")


def _llama_params(p: ContextParams) -> CData:  # a llama_context_params struct
    """The llama_context_params of `p`: the one place they are filled."""
    cparams = lib.llama_context_default_params()
    cparams.n_ctx = p.n_ctx
    cparams.n_batch = p.n_batch
    cparams.n_ubatch = p.n_ubatch
    cparams.n_seq_max = p.n_seq_max
    cparams.kv_unified = False  # a KV stream per sequence (BatchEngine's slots)
    cparams.n_threads = cparams.n_threads_batch = p.n_threads
    cparams.type_k = ggml_type(p.type_k)
    cparams.type_v = ggml_type(p.type_v)
    cparams.flash_attn_type = getattr(lib, FLASH_ATTN_MODES[p.flash_attn])
    cparams.no_perf = False
    cparams.pooling_type = getattr(lib, POOLING[p.pooling])
    return cparams


def _free_context(ptr: CData, model: ModelHandle) -> None:
    # `model` is an argument so that the finalizer holds it: the weights stay loaded until the context is freed
    lib.llama_free(ptr)


class ContextHandle:
    """A llama_context on `model`: its KV cache (n_seq_max sequences), decoding, logits and embeddings, state.

    It holds its ModelHandle until it is freed, so the weights outlive it. close() frees it and lets go of the
    model (later calls raise ClosedError); a finalizer frees one that is garbage collected. One thread at a time
    may use a context (llama.cpp's rule); the users above (Model, BatchEngine) make sure of it.
    """

    def __init__(self, model: ModelHandle, params: ContextParams, attention_paths: int | None = None) -> None:
        """attention_paths: the llama_pyl_attn_path bits (None: llama.cpp's defaults), set with the hybrid mode's
        bit in one re-reserve before anything is decoded."""
        self.params = params
        with NativeCall() as call:
            ptr = lib.llama_init_from_model(model.ptr, _llama_params(params))
        call.check(ptr != ffi.NULL, ContextError,
                   f"llama.cpp could not create a context (n_ctx={params.n_ctx}, K {params.type_k}, "
                   f"V {params.type_v}, flash_attn {params.flash_attn})")
        self._finalizer = weakref.finalize(self, _free_context, ptr, model)
        self._ptr: CData | None = ptr
        self._model: ModelHandle | None = model
        self._simulated = model.simulated
        self._n_vocab, self._n_embd = model.n_vocab, model.n_embd
        # rank pooling (a reranker's): a sequence's pooled output is its classifier head's n_cls_out scores
        self.rank_pooling: bool = lib.llama_pooling_type(ptr) == lib.LLAMA_POOLING_TYPE_RANK
        self._n_pooled = model.n_cls_out if self.rank_pooling else model.n_embd
        self._memory = lib.llama_get_memory(ptr)
        self.n_ctx: int = lib.llama_n_ctx(ptr)  # after llama.cpp's padding
        self.n_batch: int = lib.llama_n_batch(ptr)
        self.n_ubatch: int = lib.llama_n_ubatch(ptr)
        self.n_seq_max: int = lib.llama_n_seq_max(ptr)
        self.n_ctx_seq = self.n_ctx // self.n_seq_max  # the cells one sequence can use
        self._loras: tuple[LoraHandle, ...] = ()  # the adapters applied: referenced, so never freed under it
        # the attention-path bits that are this context's mode rather than a path choice: kept through every
        # set_attention_paths
        self._mode_bits = lib.LLAMA_PYL_ATTN_HYBRID if params.flash_attn == "hybrid" else 0
        default = int(lib.llama_pyl_attn_default_params().paths)
        bits = default if attention_paths is None else attention_paths
        # bytes of the compute buffers reserved for the worst-case graphs, kept so that reading them needs no
        # native call (allowed while another thread decodes); set_attention_paths re-reads them
        self.reserved_compute_bytes: int = 0
        if self._mode_bits or bits != default:  # a context starts with the default paths reserved for
            try:
                self.set_attention_paths(bits)
            except BaseException:
                self.close()
                raise
        else:
            self.reserved_compute_bytes = lib.llama_compute_buffer_bytes(ptr)

    # -- lifetime ----------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Free the context now and let go of its model (whose weights stay loaded while others use them). A
        second call does nothing."""
        self._ptr = self._model = None
        self._finalizer()

    @property
    def closed(self) -> bool:
        return self._ptr is None

    @property
    def model(self) -> ModelHandle:
        """The ModelHandle this context runs on; ClosedError once the context is freed."""
        model = self._model
        if model is None:
            raise ClosedError("this context is closed")
        return model

    @property
    def ptr(self) -> CData:
        """The llama_context*, for the binding's other classes (SamplerChain); ClosedError once freed."""
        return self._live()

    def _live(self) -> CData:
        ptr = self._ptr
        if ptr is None:
            raise ClosedError("this context is closed")
        return ptr

    # -- decoding ----------------------------------------------------------------------------------------------

    def decode_tokens(self, tokens: Sequence[int]) -> None:
        """Decode `tokens` on sequence 0 after its cached ones (positions continue); the last one's logits are
        kept. At most n_batch tokens; llama.cpp checks the ids."""
        ctx = self._live()
        self._check_batch_size(len(tokens))
        arr = ffi.new("llama_token[]", tokens)
        with NativeCall() as call:
            rc = lib.llama_decode(ctx, lib.llama_batch_get_one(arr, len(tokens)))
            self.model.check_workers(ctx, call)
        if rc != 0:
            cached = lib.llama_memory_seq_pos_max(self._memory, 0) + 1
            call.fail(DecodeError, f"llama_decode failed with code {rc} after {cached} cached tokens")

    def decode(self, batch: Batch) -> None:
        """Decode `batch` (its tokens, positions, sequences and which logits to keep)."""
        ctx = self._live()
        self._check_batch_size(batch.n_tokens)
        with NativeCall() as call:
            rc = lib.llama_decode(ctx, batch.native)
            self.model.check_workers(ctx, call)
        call.check(rc == 0, DecodeError, f"llama_decode failed with code {rc}")

    @property
    def causal_attn(self) -> bool:
        """Whether attention is causal (False for BERT-like encoders, or after set_causal_attn(False))."""
        return bool(lib.llama_get_causal_attn(self._live()))

    def set_causal_attn(self, on: bool) -> None:
        """Causal (True) or bidirectional (False) attention for the next decodes."""
        lib.llama_set_causal_attn(self._live(), flag("on", on))

    @property
    def max_decode_tokens(self) -> int:
        """The most tokens one decode takes: n_batch, or n_ubatch when attention is not causal (every token
        must then see every other, so the batch cannot be split into micro-batches)."""
        return self.n_batch if self.causal_attn else min(self.n_batch, self.n_ubatch)

    def _check_batch_size(self, n_tokens: int) -> None:
        if self._simulated:  # its buffers do not exist: llama.cpp would write through null pointers
            raise LlamaError("this context was made on a simulated model (plan_memory): it cannot decode")
        # llama.cpp asserts (aborting the process) on a batch over n_batch, or over n_ubatch with non-causal
        # attention; an empty one it refuses. A batch within both limits (every decode step) needs no native call.
        if 0 < n_tokens <= min(self.n_batch, self.n_ubatch):
            return
        limit = self.max_decode_tokens
        if not 0 < n_tokens <= limit:
            which = "n_batch" if limit == self.n_batch else "n_ubatch (attention is not causal)"
            raise InvalidArgumentError(f"a decode takes 1 to {limit} tokens ({which}), got {n_tokens}")

    def logits_row(self, index: int = -1) -> npt.NDArray[np.float32]:
        """A writable float32 view (no copy) of the logits of batch position `index` (-1: the last output),
        valid until the next decode."""
        ctx = self._live()
        with NativeCall() as call:
            row = lib.llama_get_logits_ith(ctx, index)
        call.check(row != ffi.NULL, LlamaError, f"llama.cpp has no logits for batch position {index}")
        # (numpy's stubs for Python < 3.12 take a buffer only as one of a list of types: a memoryview of it, no copy)
        return np.frombuffer(memoryview(ffi.buffer(row, 4 * self._n_vocab)), dtype=np.float32)

    def synchronize(self) -> None:
        """Wait until the backends finished the last decode."""
        lib.llama_synchronize(self._live())

    # -- embeddings --------------------------------------------------------------------------------------------

    def set_embeddings(self, on: bool) -> None:
        """Whether decodes compute pooled embeddings (instead of logits)."""
        lib.llama_set_embeddings(self._live(), flag("on", on))

    def pooled_embedding(self, seq: int = 0) -> npt.NDArray[np.float32]:
        """A copy of sequence `seq`'s pooled embedding after the last decode, shape (n_embd,); with rank pooling
        the classifier head's scores, shape (n_cls_out,)."""
        ctx = self._live()
        self._check_sequence(seq)
        with NativeCall() as call:
            vec = lib.llama_get_embeddings_seq(ctx, seq)
        call.check(vec != ffi.NULL, LlamaError, "llama.cpp returned no pooled embedding")
        return np.copy(np.frombuffer(memoryview(ffi.buffer(vec, 4 * self._n_pooled)), dtype=np.float32))

    # -- sequences ---------------------------------------------------------------------------------------------

    def trim_sequence(self, seq: int, keep: int) -> bool:
        """Drop sequence `seq`'s cells from position `keep` on. False when this memory cannot cut a sequence
        there (a recurrent one): the caller then clears the whole sequence."""
        self._live()
        self._check_sequence(seq)
        int_in_range("keep", keep, 0, INT32_MAX)  # a position (int32)
        return lib.llama_memory_seq_rm(self._memory, seq, keep, -1)

    def clear_sequence(self, seq: int) -> None:
        """Drop every cell of sequence `seq`."""
        self._live()
        self._check_sequence(seq)
        with NativeCall() as call:
            done = lib.llama_memory_seq_rm(self._memory, seq, -1, -1)
        call.check(done, LlamaError, f"llama.cpp could not clear sequence {seq}")

    @property
    def can_shift(self) -> bool:
        """Whether this context's memory can move cells to other positions (llama_memory_can_shift): false for
        a model with several positions per token (M-RoPE), a recurrent memory, or none."""
        self._live()
        return bool(lib.llama_memory_can_shift(self._memory))

    def drop_cells(self, seq: int, start: int, end: int) -> bool:
        """Drop sequence `seq`'s cells at positions [start, end). False when this memory cannot cut there."""
        self._live()
        self._check_sequence(seq)
        int_in_range("start", start, 0, INT32_MAX)
        int_in_range("end", end, start, INT32_MAX)
        return lib.llama_memory_seq_rm(self._memory, seq, start, end)

    def move_cells(self, seq: int, start: int, end: int, delta: int) -> None:
        """Add `delta` to the positions of sequence `seq`'s cells at [start, end) (llama_memory_seq_add): their
        K is rotated (RoPE) to the new positions at the next decode. Only where can_shift is true."""
        self._live()
        self._check_sequence(seq)
        int_in_range("start", start, 0, INT32_MAX)
        int_in_range("end", end, start, INT32_MAX)
        int_in_range("delta", delta, -start, INT32_MAX - end)  # (no position below 0 or past int32)
        if not self.can_shift:  # (llama.cpp asserts on a model whose tokens have several positions)
            raise LlamaError("this context's memory cannot move cells to other positions (llama_memory_can_shift)")
        lib.llama_memory_seq_add(self._memory, seq, start, end, delta)

    def clear(self) -> None:
        """Drop every cell of every sequence."""
        self._live()
        lib.llama_memory_clear(self._memory, True)

    def _check_sequence(self, seq: int) -> None:
        # llama.cpp asserts (aborting the process) on a sequence id outside [0, n_seq_max)
        int_in_range("seq", seq, 0, self.n_seq_max - 1)

    # -- LoRA adapters -------------------------------------------------------------------------------------------

    def set_loras(self, adapters: Sequence[LoraHandle], scales: Sequence[float]) -> None:
        """Apply `adapters` (loaded for this context's model) with `scales` to every later decode, for all
        sequences alike (llama.cpp's adapters are per context); a scale of 0 leaves an adapter out. The scales
        are checked by the caller (finite floats)."""
        ctx = self._live()
        if len(adapters) != len(scales) or any(a.closed or a.model is not self.model for a in adapters):
            raise InvalidArgumentError("set_loras takes open adapters of this context's model, one scale each")
        # (llama.cpp asserts, ending the process, on NULL arrays with a count: none is given as NULLs and 0)
        ptrs = ffi.new("struct llama_adapter_lora *[]", [a.ptr for a in adapters]) if adapters else ffi.NULL
        values = ffi.new("float[]", list(scales)) if adapters else ffi.NULL
        with NativeCall() as call:
            rc = lib.llama_set_adapters_lora(ctx, ptrs, len(adapters), values)
        call.check(rc == 0, LlamaError, f"llama.cpp could not apply {len(adapters)} LoRA adapters")
        self._loras = tuple(adapters)

    # -- state ---------------------------------------------------------------------------------------------------

    def state_bytes(self) -> memoryview:
        """llama.cpp's state of the whole context (its memory: the KV cells of every sequence)."""
        ctx = self._live()
        size = lib.llama_state_get_size(ctx)
        buf = ffi.new("uint8_t[]", size)
        with NativeCall() as call:
            copied = lib.llama_state_get_data(ctx, buf, size) if size else 0
        call.check(size > 0 and copied == size, LlamaError, "llama.cpp could not copy its state")
        return memoryview(ffi.buffer(buf))

    def set_state(self, data: bytes | memoryview) -> None:
        """Replace the context's state with `data` (from state_bytes() of a context like this one). LlamaError
        when llama.cpp refuses it; it may have changed the cache by then."""
        ctx = self._live()
        with NativeCall() as call:
            read = lib.llama_state_set_data(ctx, ffi.from_buffer(data), len(data))
        call.check(read == len(data), LlamaError, "llama.cpp refused the state")

    def sequence_state_bytes(self, seq: int) -> memoryview:
        """llama.cpp's state of sequence `seq` alone (its KV cells), for set_sequence_state."""
        ctx = self._live()
        self._check_sequence(seq)
        size = lib.llama_state_seq_get_size(ctx, seq)
        buf = ffi.new("uint8_t[]", size)
        with NativeCall() as call:
            copied = lib.llama_state_seq_get_data(ctx, buf, size, seq) if size else 0
        call.check(size > 0 and copied == size, LlamaError, f"llama.cpp could not copy sequence {seq}'s state")
        return memoryview(ffi.buffer(buf))

    def set_sequence_state(self, seq: int, data: bytes | memoryview) -> None:
        """Give sequence `seq` the cells of `data` (sequence_state_bytes of a context like this one, any
        sequence). LlamaError when llama.cpp refuses it (the sequence is then empty)."""
        ctx = self._live()
        self._check_sequence(seq)
        with NativeCall() as call:
            read = lib.llama_state_seq_set_data(ctx, ffi.from_buffer(data), len(data), seq)
        call.check(read == len(data), LlamaError, f"llama.cpp refused the state for sequence {seq}")

    # -- sizes -----------------------------------------------------------------------------------------------

    def kv_cache_bytes(self) -> tuple[int, int]:
        """Bytes of the K and V tensors (fixed when the context is made)."""
        k, v = ffi.new("size_t *"), ffi.new("size_t *")
        lib.llama_kv_cache_bytes(self._live(), k, v)
        return k[0], v[0]

    def set_attention_paths(self, bits: int) -> None:
        """Which of pyllama90a's attention kernels this context's graphs use (llama_pyl_attn_path bits); the
        compute buffers are re-reserved at once."""
        params = lib.llama_pyl_attn_default_params()
        params.paths = bits | self._mode_bits
        with NativeCall() as call:
            ok = lib.llama_pyl_set_attn_params(self._live(), params)
        call.check(bool(ok), ContextError, "llama.cpp could not reserve the compute buffers for these attention paths")
        self.reserved_compute_bytes = lib.llama_compute_buffer_bytes(self._live())

    def attention_paths(self) -> int:
        """The context's llama_pyl_attn_path bits (the per-phase bit of a hybrid context aside: it is the mode)."""
        return int(lib.llama_pyl_get_attn_params(self._live()).paths) & ~self._mode_bits

    def compute_buffer_bytes(self) -> int:
        """Bytes of the compute buffers llama.cpp reserved (all backends); a decode may reserve them again."""
        return lib.llama_compute_buffer_bytes(self._live())

    def __repr__(self) -> str:
        if self._model is None:
            return "ContextHandle(closed)"
        return f"ContextHandle({self._model!r}, n_ctx={self.n_ctx}, n_seq_max={self.n_seq_max})"
