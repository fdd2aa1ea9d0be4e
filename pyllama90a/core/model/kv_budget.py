"""KV cache sizes from the GGUF header alone, before loading anything big.

`kv_bytes(path, n_ctx, ctk, ctv)` equals the K and V bytes that a loaded `Model(path, n_ctx=..., ctk=..., ctv=...)
.kv_cache` reports for models with one full-attention KV cache (llama and its relatives). `max_n_ctx` answers
"how much context fits in N bytes" with the compute buffers counted too (plan_memory). Models with sliding-window
or recurrent layers are refused rather than guessed.
"""
from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any

from ...errors import InvalidArgumentError, ModelFormatError, positive_int
from ...native.kv_types import check_kv_type
from ..gguf.header import GGUFHeader, read_header
from .shape import attention_shape

KV_CELL_PADDING = 256  # llama.cpp rounds the number of KV cells up to a multiple of this


@dataclass(frozen=True)
class KVBytes:
    n_ctx: int  # KV cells after llama.cpp's rounding
    k_bytes: int
    v_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.k_bytes + self.v_bytes


def _per_cell_bytes(path: str | os.PathLike[str], ctk: str, ctv: str,
                    header: GGUFHeader | None = None) -> tuple[int, int]:
    from ...native.ggml import row_size

    header = header or read_header(path)
    arch = header.architecture
    if header.get(f"{arch}.attention.sliding_window") is not None or header.get(f"{arch}.ssm.state_size") is not None:
        raise ModelFormatError(f"{path}: {arch} has sliding-window or recurrent layers; load it and read "
                               f"Model.kv_cache instead")
    shape = attention_shape(header, path)
    k = shape.n_layer * row_size(ctk, shape.head_k * shape.n_head_kv)
    v = shape.n_layer * row_size(ctv, shape.head_v * shape.n_head_kv)
    return k, v


def kv_bytes(path: str | os.PathLike[str], n_ctx: int, ctk: str = "f16", ctv: str = "f16", *,
             header: GGUFHeader | None = None) -> KVBytes:
    """Bytes of K and V for `n_ctx` tokens, as llama.cpp will allocate them (`header`: path's, already read)."""
    ctk, ctv = check_kv_type(ctk, "K"), check_kv_type(ctv, "V")
    positive_int("n_ctx", n_ctx)
    k, v = _per_cell_bytes(path, ctk, ctv, header)
    cells = -(-n_ctx // KV_CELL_PADDING) * KV_CELL_PADDING
    return KVBytes(cells, k * cells, v * cells)


def max_n_ctx(path: str | os.PathLike[str], budget_bytes: int, ctk: str = "f16", ctv: str = "f16",
              **settings: Any) -> int:
    """The largest n_ctx (a multiple of 256) whose K, V and compute buffers fit in `budget_bytes`: the compute
    buffers of the attention path that `settings` (Model's other arguments: flash_attn, n_ubatch, n_gpu_layers,
    ...) choose, from plan_memory's simulated loads. 0 if none fits; at most MAX_PLAN_N_CTX (16,777,216)."""
    from ...native.context import MIN_CELLS_PER_SEQUENCE
    from .memory_plan import MAX_PLAN_N_CTX, MemoryPlanner

    ctk, ctv = check_kv_type(ctk, "K"), check_kv_type(ctv, "V")
    if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes < 0:
        raise InvalidArgumentError(f"budget_bytes must be a non-negative integer, got {budget_bytes!r}")
    if "n_ctx" in settings:
        raise InvalidArgumentError("max_n_ctx finds n_ctx: give the other settings only", param="n_ctx")
    if budget_bytes == 0:
        return 0
    k, v = _per_cell_bytes(path, ctk, ctv)
    planner = MemoryPlanner(path, ctk=ctk, ctv=ctv, **settings)

    def fits(units: int) -> bool:  # n_ctx = units * KV_CELL_PADDING
        with warnings.catch_warnings():  # (a trial past the trained context is no choice of the caller's)
            warnings.simplefilter("ignore")
            return planner.plan(units * KV_CELL_PADDING).cache.memory_bytes <= budget_bytes

    # K and V alone bound it from above (and the largest n_ctx a plan simulates); the memory grows with n_ctx, so
    # the largest fitting one is bisected from the smallest n_ctx these settings take (256 cells a sequence)
    smallest = -(-int(settings.get("n_seq_max", 1)) * MIN_CELLS_PER_SEQUENCE // KV_CELL_PADDING)  # (checked: planner)
    hi = min(budget_bytes // (k + v), MAX_PLAN_N_CTX) // KV_CELL_PADDING
    if hi < smallest or not fits(smallest):
        return 0
    lo = smallest
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo * KV_CELL_PADDING
