"""How much memory a Model of given settings takes, before loading it: `plan_memory(path, n_ctx=..., ctk=...,
ctv=..., flash_attn=...)`.

llama.cpp loads the metadata only and simulates every allocation (llama_model_params.no_alloc): the KV cache and
the compute buffers that the context would reserve for the attention path the settings choose (flash_attn
"auto" resolved as Model resolves it), on the devices the layers would go to. So the compute buffer, which the
non-flash path sizes with n_ctx x n_ubatch scores per head, is counted as a real load would allocate it.
"""
from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import InvalidArgumentError
from ...native import ContextHandle
from ...native.context import MAX_N_CTX, MIN_CELLS_PER_SEQUENCE
from ...native.placement import Placement
from .attention_policy import AttentionChoice
from .file import check_header
from .open import checked_file, context_params, load_weights, model_path, open_context
from .settings import ContextSettings


@dataclass(frozen=True)
class KVCacheInfo:
    """A context's KV cache: its types, cells and the exact bytes of K and V, and the bytes of the compute
    buffers reserved beside it for the worst-case graphs (all backends), which depend on the attention path."""
    type_k: str
    type_v: str
    n_ctx: int
    k_bytes: int
    v_bytes: int
    compute_bytes: int

    @property
    def total_bytes(self) -> int:
        """K and V."""
        return self.k_bytes + self.v_bytes

    @property
    def memory_bytes(self) -> int:
        """K, V and the compute buffers: what a context takes beside the weights."""
        return self.k_bytes + self.v_bytes + self.compute_bytes


@dataclass(frozen=True)
class MemoryPlan:
    cache: KVCacheInfo
    weights_bytes: int           # the model's tensors, wherever they go
    attention: AttentionChoice   # the attention path the compute buffers were sized for

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.cache.memory_bytes


# the largest n_ctx a plan simulates: a simulated context still keeps llama.cpp's bookkeeping of its cells in host
# memory (about 50 bytes a cell: n_ctx 1e8 took 4.9 GiB, 2**45 bytes' worth of cells ended the process)
MAX_PLAN_N_CTX = 1 << 24


class MemoryPlanner:
    """Plans of one model file and placement at any n_ctx (Model's other arguments fixed): the file is checked and
    its metadata loaded once, then each plan makes and frees one simulated context."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, n_gpu_layers: int = -1, split_mode: str = "layer",
                 tensor_split: Sequence[float] | None = None, main_gpu: int = 0, rpc: Sequence[str] = (),
                 **settings: Any) -> None:
        if "n_ctx" in settings:
            raise InvalidArgumentError("a MemoryPlanner plans every n_ctx: give it to plan()", param="n_ctx")
        placement = Placement.checked(split_mode, tensor_split, main_gpu, rpc)
        raw_path = model_path(path)
        self._settings = settings
        # the settings checked before llama.cpp reads the file, at an n_ctx their sequences allow (each plan checks
        # its own): the default n_ctx alone refused n_seq_max over 16
        n_seq = settings.get("n_seq_max", 1)
        n_ctx = min(max(ContextSettings.n_ctx, MIN_CELLS_PER_SEQUENCE * n_seq), MAX_N_CTX) if type(n_seq) is int \
            else ContextSettings.n_ctx
        params = context_params(ContextSettings(n_ctx=n_ctx, **settings))
        with warnings.catch_warnings():  # (about the default n_ctx; each plan warns about its own)
            warnings.simplefilter("ignore")
            self._file = checked_file(raw_path, n_gpu_layers, params)
        self._handle = load_weights(raw_path, n_gpu_layers, placement, simulate=True)

    def plan(self, n_ctx: int) -> MemoryPlan:
        """The memory of a Model with this n_ctx (at most MAX_PLAN_N_CTX, 16,777,216)."""
        if isinstance(n_ctx, int) and n_ctx > MAX_PLAN_N_CTX:
            raise InvalidArgumentError(f"a memory plan simulates n_ctx up to {MAX_PLAN_N_CTX} (its cells' bookkeeping "
                                       f"takes host memory), got {n_ctx}", param="n_ctx")
        settings = ContextSettings(n_ctx=n_ctx, **self._settings)
        params = context_params(settings)
        check_header(self._file, params)
        context, attention, _ = open_context(self._file, self._handle, params, settings.embedding,
                                             settings.attention_paths)
        try:
            return MemoryPlan(kv_cache_info(context), self._handle.weights_bytes, attention)
        finally:
            context.close()


def plan_memory(path: str | os.PathLike[str] | None = None, *, n_ctx: int = ContextSettings.n_ctx,
                **arguments: Any) -> MemoryPlan:
    """The memory `Model(path, ...)` with the same arguments would take, checked and chosen as Model does, with
    nothing allocated but llama.cpp's bookkeeping of the cells (a fraction of a second; n_ctx at most
    MAX_PLAN_N_CTX, 16,777,216)."""
    return MemoryPlanner(path, **arguments).plan(n_ctx)


def kv_cache_info(context: ContextHandle) -> KVCacheInfo:
    """What `context` reserved when it was made or its attention paths were last set (simulated or real)."""
    k, v = context.kv_cache_bytes()
    return KVCacheInfo(context.params.type_k, context.params.type_v, context.n_ctx, k, v,
                       context.reserved_compute_bytes)
