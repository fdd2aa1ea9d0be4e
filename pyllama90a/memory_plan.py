"""How much memory a Model of given settings takes, before loading it: `plan_memory(path, n_ctx=..., ctk=...,
ctv=..., flash_attn=...)`.

llama.cpp loads the metadata only and simulates every allocation (llama_model_params.no_alloc): the KV cache and
the compute buffers that the context would reserve for the attention path the settings choose (flash_attn
"auto" resolved as Model resolves it), on the devices the layers would go to. So the compute buffer, which the
non-flash path sizes with n_ctx x n_ubatch scores per head, is counted as a real load would allocate it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Sequence

from .attention_policy import AttentionChoice
from .context_settings import ContextSettings
from .errors import fs_path
from .model_open import checked_file, context_params, load_weights, open_context
from .native import ContextHandle
from .placement import Placement


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


def plan_memory(path: str | os.PathLike | None = None, *, n_gpu_layers: int = -1, split_mode: str = "layer",
                tensor_split: Sequence[float] | None = None, main_gpu: int = 0, rpc: Sequence[str] = (),
                **settings: Any) -> MemoryPlan:
    """The memory `Model(path, ...)` with the same arguments would take, checked and chosen as Model does, with
    nothing allocated (a fraction of a second)."""
    context_settings = ContextSettings(**settings)
    placement = Placement.checked(split_mode, tensor_split, main_gpu, rpc)
    if path is None:
        from .default_model import default_model

        path = default_model()
    raw_path = fs_path("path", path)
    params = context_params(context_settings)
    file = checked_file(raw_path, n_gpu_layers, params)
    handle = load_weights(raw_path, n_gpu_layers, placement, simulate=True)
    context, attention, _ = open_context(file, handle, params, context_settings.embedding,
                                         context_settings.attention_paths)
    try:
        return MemoryPlan(kv_cache_info(context), handle.weights_bytes, attention)
    finally:
        context.close()


def kv_cache_info(context: ContextHandle) -> KVCacheInfo:
    """What `context` reserved when it was made or its attention paths were last set (simulated or real)."""
    k, v = context.kv_cache_bytes()
    return KVCacheInfo(context.params.type_k, context.params.type_v, context.n_ctx, k, v,
                       context.reserved_compute_bytes)
