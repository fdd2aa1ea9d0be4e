"""FLASH_ATTN_EXT nodes shaped the way llama.cpp builds them, with random data, for the CK mapping tests.

Q is the permuted F32 projection [D, n_q, n_head, n_seq]; K and V are strided views into a KV cache of
capacity > n_kv per stream, rows of n_head_kv * D (F16 or quantized); the mask is F16
[n_kv, n_q padded to 64, 1 or n_head, 1 or n_seq], contiguous.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pyllama90a.native._ffi import ffi, lib
from pyllama90a.native.ggml import compute_on_cpu, ggml_type

MASK_ROW_PAD = 64  # GGML_KQ_MASK_PAD: llama.cpp pads the mask's query rows


@dataclass(frozen=True)
class Shape:
    n_head: int
    n_head_kv: int
    head_dim: int
    n_q: int
    n_kv: int
    n_seq: int = 1
    mask: str = "causal"       # "causal", "arbitrary", "per_head" (arbitrary, one per head) or "none"
    kv_type: str = "f16"
    head_dim_v: int | None = None

    @property
    def dv(self) -> int:
        return self.head_dim_v or self.head_dim


@dataclass
class FaGraph:
    node: object            # the FLASH_ATTN_EXT tensor
    q: np.ndarray           # [n_seq, n_head, n_q, D] float32, the values of the node's Q
    k: np.ndarray           # [n_seq, n_head_kv, n_kv, D] float32, K as the node reads it (dequantized)
    v: np.ndarray           # [n_seq, n_head_kv, n_kv, Dv] float32
    n_past: int             # the first query's position (causal masks)
    scale: float


def _fill_cache(ctx, kv_type: str, values: np.ndarray):
    """A cache tensor [row, capacity, n_seq] holding values (n_seq, capacity, row), and what it reads back as."""
    n_seq, capacity, row = values.shape
    qtype = ggml_type(kv_type)
    cache = lib.ggml_new_tensor_4d(ctx, qtype, row, capacity, n_seq, 1)
    flat = np.ascontiguousarray(values.reshape(-1, row), dtype=np.float32)
    if kv_type == "f16":
        ffi.memmove(cache.data, flat.astype(np.float16).tobytes(), lib.ggml_nbytes(cache))
        return cache, flat.astype(np.float16).astype(np.float32).reshape(values.shape)
    written = lib.ggml_quantize_chunk(qtype, ffi.cast("float *", flat.ctypes.data), cache.data, 0,
                                      flat.shape[0], row, ffi.NULL)
    assert written == lib.ggml_nbytes(cache)
    back = np.empty(flat.size, dtype=np.float32)
    lib.ggml_get_type_traits(qtype).to_float(cache.data, ffi.cast("float *", back.ctypes.data), flat.size)
    return cache, back.reshape(values.shape)


def _head_view(ctx, cache, kv_type: str, head_dim: int, n_head_kv: int, n_kv: int, n_seq: int):
    """llama_kv_cache's view [D, n_head_kv, n_kv, n_seq] permuted as build_attn_mha does:
    [D, n_kv, n_head_kv, n_seq]."""
    qtype = ggml_type(kv_type)
    row = lib.ggml_row_size(qtype, head_dim * n_head_kv)
    view = lib.ggml_view_4d(ctx, cache, head_dim, n_head_kv, n_kv, n_seq, lib.ggml_row_size(qtype, head_dim),
                            row, row * cache.ne[1], 0)
    return lib.ggml_permute(ctx, view, 0, 2, 1, 3)


def _mask_values(shape: Shape, rng: np.random.Generator, n_past: int) -> np.ndarray:
    """[mask ne3, mask ne2, n_q padded, n_kv] float32 with -inf where a key is hidden."""
    n_rows = -(-shape.n_q // MASK_ROW_PAD) * MASK_ROW_PAD
    heads = shape.n_head if shape.mask == "per_head" else 1
    n_seq = shape.n_seq if shape.mask != "causal" else 1
    values = np.full((n_seq, heads, n_rows, shape.n_kv), -np.inf, dtype=np.float32)
    if shape.mask == "causal":
        pos = n_past + np.arange(shape.n_q)[:, None]
        values[:, :, :shape.n_q] = np.where(np.arange(shape.n_kv)[None, :] <= pos, 0.0, -np.inf)
    else:
        # arbitrary finite biases and holes; every query keeps at least one key
        finite = rng.uniform(-3.0, 1.0, size=(n_seq, heads, shape.n_q, shape.n_kv)).astype(np.float32)
        hidden = rng.random(finite.shape) < 0.4
        keep = rng.integers(0, shape.n_kv, size=finite.shape[:3])
        np.put_along_axis(hidden, keep[..., None], False, axis=-1)
        values[:, :, :shape.n_q] = np.where(hidden, -np.inf, finite)
    return values



def build(ctx, shape: Shape, rng: np.random.Generator, *, max_bias: float = 0.0, softcap: float = 0.0) -> FaGraph:
    d, dv = shape.head_dim, shape.dv
    capacity = shape.n_kv + int(rng.integers(1, 40))  # the cache holds more cells than the graph reads
    n_past = int(rng.integers(0, shape.n_kv - shape.n_q + 1))

    q_values = rng.standard_normal((shape.n_seq, shape.n_q, shape.n_head, d)).astype(np.float32)
    q_full = lib.ggml_new_tensor_4d(ctx, lib.GGML_TYPE_F32, d, shape.n_head, shape.n_q, shape.n_seq)
    ffi.memmove(q_full.data, q_values.tobytes(), q_values.nbytes)
    q = lib.ggml_permute(ctx, q_full, 0, 2, 1, 3)

    def cache(dim: int):
        values = rng.standard_normal((shape.n_seq, capacity, shape.n_head_kv * dim)).astype(np.float32)
        tensor, read_back = _fill_cache(ctx, shape.kv_type, values)
        view = _head_view(ctx, tensor, shape.kv_type, dim, shape.n_head_kv, shape.n_kv, shape.n_seq)
        per_head = read_back[:, :shape.n_kv].reshape(shape.n_seq, shape.n_kv, shape.n_head_kv, dim)
        return view, per_head.transpose(0, 2, 1, 3)

    k, k_values = cache(d)
    v, v_values = cache(dv)

    mask = ffi.NULL
    if shape.mask != "none":
        values = _mask_values(shape, rng, n_past)
        n_seq_m, heads_m, rows, _ = values.shape
        mask = lib.ggml_new_tensor_4d(ctx, lib.GGML_TYPE_F16, shape.n_kv, rows, heads_m, n_seq_m)
        ffi.memmove(mask.data, values.astype(np.float16).tobytes(), lib.ggml_nbytes(mask))

    scale = float(1.0 / np.sqrt(d) * rng.uniform(0.7, 1.3))
    node = lib.ggml_flash_attn_ext(ctx, q, k, v, mask, scale, max_bias, softcap)
    lib.ggml_pyl_set_mark(node, lib.GGML_PYL_MARK_CK_FA)  # as llama_attn_mark_fa marks it when CK is allowed
    return FaGraph(node, q_values.transpose(0, 2, 1, 3), k_values, v_values, n_past, scale)


def compute(ctx, node) -> np.ndarray:
    """ggml's CPU FLASH_ATTN_EXT; returns dst as [n_seq, n_q, n_head, Dv] float32."""
    graph = lib.ggml_new_graph(ctx)
    lib.ggml_build_forward_expand(graph, node)
    compute_on_cpu(graph, 2)
    shape = (node.ne[3], node.ne[2], node.ne[1], node.ne[0])
    return np.frombuffer(ffi.buffer(node.data, 4 * int(np.prod(shape))), dtype=np.float32).reshape(shape).copy()
