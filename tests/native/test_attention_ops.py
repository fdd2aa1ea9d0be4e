"""Op level: the non-FA attention branch of patch 0002 for a quantized, untransposed V cache.

llama.cpp builds, per layer, kqv = mul_mat(cont(transpose(cast(V, F32))), softmax(kq)) where V is a
strided view of the cache (head_dim x n_head_kv x n_kv, blocks along head_dim). Here the same ggml ops
run on the CPU backend and are compared with numpy on V dequantized by ggml's own row converter, for
all six quantized types, several GQA ratios, odd n_kv and more than one query token.
"""
from __future__ import annotations

import numpy as np
import pytest

from pyllama90a.native._ffi import ffi, lib
from pyllama90a.native.ggml import compute_on_cpu, ggml_type
from pyllama90a.native.kv_types import QUANTIZED_KV_TYPES

HEAD_DIM = 64


def _tensor_array(t, shape: tuple[int, ...]) -> np.ndarray:
    """A contiguous F32 ggml tensor as numpy, shape in numpy order (outermost first)."""
    n = int(np.prod(shape))
    return np.frombuffer(ffi.buffer(t.data, 4 * n), dtype=np.float32).reshape(shape).copy()


def _dequantize(qtype: int, raw: bytes, n: int) -> np.ndarray:
    out = np.empty(n, dtype=np.float32)
    lib.ggml_get_type_traits(qtype).to_float(ffi.from_buffer(raw), ffi.cast("float *", out.ctypes.data), n)
    return out


@pytest.fixture
def ctx():
    """A ggml context with its own memory, for building and computing a small graph on the CPU."""
    ctx = lib.ggml_init({"mem_size": 64 << 20, "mem_buffer": ffi.NULL, "no_alloc": False})
    assert ctx != ffi.NULL
    yield ctx
    lib.ggml_free(ctx)


def _compute(ctx, tensor) -> None:
    graph = lib.ggml_new_graph(ctx)
    lib.ggml_build_forward_expand(graph, tensor)
    compute_on_cpu(graph, 2)


def _head_view_of_cache(ctx, qtype: int, values: np.ndarray, n_head_kv: int):
    """A quantized cache of one row per KV cell (values: n_kv x n_embd_gqa), and the view llama_kv_cache
    returns for an untransposed K or V after build_attn_mha's permute: [head_dim, n_kv, n_head_kv, 1].
    Also returns the cache dequantized by ggml's own row converter, shape (n_kv, n_head_kv, head_dim)."""
    n_kv, n_embd_gqa = values.shape
    cache = lib.ggml_new_tensor_4d(ctx, qtype, n_embd_gqa, n_kv, 1, 1)
    written = lib.ggml_quantize_chunk(qtype, ffi.cast("float *", values.ctypes.data), cache.data,
                                      0, n_kv, n_embd_gqa, ffi.NULL)
    assert written == lib.ggml_nbytes(cache)
    ref = _dequantize(qtype, ffi.buffer(cache.data, written)[:], n_kv * n_embd_gqa)
    # quantization really happened (the reference is not the float input)
    assert not np.array_equal(ref.reshape(n_kv, -1), values)
    view = lib.ggml_view_4d(ctx, cache, HEAD_DIM, n_head_kv, n_kv, 1,
                            lib.ggml_row_size(qtype, HEAD_DIM), lib.ggml_row_size(qtype, n_embd_gqa),
                            lib.ggml_row_size(qtype, n_embd_gqa * n_kv), 0)
    return lib.ggml_permute(ctx, view, 0, 2, 1, 3), ref.reshape(n_kv, n_head_kv, HEAD_DIM)


@pytest.mark.parametrize("kv_type", QUANTIZED_KV_TYPES)
@pytest.mark.parametrize("n_head,n_head_kv,n_kv,n_tokens", [
    (6, 2, 37, 1),     # GQA 3, decode, odd n_kv
    (8, 2, 301, 3),    # GQA 4, small prefill
    (4, 4, 259, 1),    # no GQA, n_kv not a multiple of 256
    (8, 1, 64, 2),     # MQA
])
def test_dequantized_v_branch_matches_reference(ctx, kv_type: str, n_head: int, n_head_kv: int, n_kv: int,
                                                n_tokens: int) -> None:
    rng = np.random.default_rng(n_kv * 31 + n_head)
    qtype = ggml_type(kv_type)
    n_embd_v_gqa = HEAD_DIM * n_head_kv
    # the V cache: one row of n_embd_v_gqa values per KV cell, quantized along the row
    v_f32 = rng.standard_normal((n_kv, n_embd_v_gqa), dtype=np.float32)
    v, v_ref = _head_view_of_cache(ctx, qtype, v_f32, n_head_kv)
    # patch 0002's branch
    v = lib.ggml_cont(ctx, lib.ggml_transpose(ctx, lib.ggml_cast(ctx, v, lib.GGML_TYPE_F32)))

    # softmax output: probabilities over KV cells per (head, token)
    p = rng.random((n_head, n_tokens, n_kv), dtype=np.float32)
    p /= p.sum(axis=-1, keepdims=True)
    kq = lib.ggml_new_tensor_4d(ctx, lib.GGML_TYPE_F32, n_kv, n_tokens, n_head, 1)
    ffi.memmove(kq.data, p.tobytes(), p.nbytes)

    kqv = lib.ggml_mul_mat(ctx, v, kq)
    _compute(ctx, kqv)

    assert tuple(kqv.ne) == (HEAD_DIM, n_tokens, n_head, 1)
    got = _tensor_array(kqv, (n_head, n_tokens, HEAD_DIM))
    group = n_head // n_head_kv
    want = np.einsum("htk,khd->htd", p, v_ref[:, np.arange(n_head) // group, :].astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kv_type", QUANTIZED_KV_TYPES)
@pytest.mark.parametrize("grouped", [True, False], ids=["grouped", "broadcast"])
@pytest.mark.parametrize("n_head,n_head_kv,n_kv", [(9, 3, 300), (8, 2, 259), (8, 1, 64), (4, 4, 37)])
def test_decode_kq_matches_reference(ctx, kv_type: str, grouped: bool, n_head: int, n_head_kv: int, n_kv: int) -> None:
    """K^T q for one decoded token over a quantized, strided K view: broadcast over query heads as upstream
    builds it, and grouped (patch 0005: the query heads of a KV head as columns of one product)."""
    rng = np.random.default_rng(n_kv + n_head)
    qtype = ggml_type(kv_type)
    n_embd_k_gqa = HEAD_DIM * n_head_kv
    k_f32 = rng.standard_normal((n_kv, n_embd_k_gqa), dtype=np.float32)
    k, k_ref = _head_view_of_cache(ctx, qtype, k_f32, n_head_kv)
    q_np = rng.standard_normal((n_head, HEAD_DIM), dtype=np.float32)
    q = lib.ggml_new_tensor_4d(ctx, lib.GGML_TYPE_F32, HEAD_DIM, n_head, 1, 1)
    ffi.memmove(q.data, q_np.tobytes(), q_np.nbytes)
    q = lib.ggml_permute(ctx, q, 0, 2, 1, 3)  # [head_dim, 1 token, n_head, 1], as build_attn_mha has it
    r = n_head // n_head_kv
    if grouped:
        q = lib.ggml_view_4d(ctx, q, HEAD_DIM, r, n_head_kv, 1, q.nb[2], r * q.nb[2], q.nb[3], 0)
    kq = lib.ggml_mul_mat(ctx, k, q)
    _compute(ctx, kq)
    got = _tensor_array(kq, (n_head, n_kv))
    want = np.einsum("hd,khd->hk", q_np.astype(np.float64), k_ref[:, np.arange(n_head) // r, :])
    # q is quantized to 8 bits for the integer dot products: relative error well under 1%
    assert np.abs(got - want).max() <= 0.01 * np.abs(want).max()


@pytest.mark.parametrize("kv_type", QUANTIZED_KV_TYPES)
@pytest.mark.parametrize("n_head,n_head_kv,n_kv,n_tokens", [
    (6, 2, 37, 1),     # GQA 3, decode, odd n_kv
    (9, 3, 300, 4),    # SmolLM2's GQA, a few tokens (still in place)
    (8, 1, 256, 8),    # MQA, the last in-place size
    (8, 2, 512, 9),    # the first GEMM size (k a multiple of 16: llamafile's sgemm)
    (4, 4, 259, 40),   # a prefill with n_kv no sgemm takes (the vec_dot fallback)
])
@pytest.mark.parametrize("n_threads", [1, 2, 5])
def test_out_prod_of_quantized_v_matches_reference(ctx, kv_type: str, n_head: int, n_head_kv: int, n_kv: int,
                                                   n_tokens: int, n_threads: int) -> None:
    """Patch 0003: kqv = OUT_PROD(V, kq^T) with the quantized V view itself, as pyllama90a's attention builds it
    on every backend; ggml-cpu reads V in place for up to 8 query tokens (threads over KV cells, then a
    reduction of their partial sums) and through one KV head's transposed F32 copy and a GEMM for more. Some
    cells are masked (p == 0 for every head and token), as causal and padded cells are."""
    rng = np.random.default_rng(n_kv * 7 + n_tokens)
    qtype = ggml_type(kv_type)
    v_f32 = rng.standard_normal((n_kv, HEAD_DIM * n_head_kv), dtype=np.float32)
    v, v_ref = _head_view_of_cache(ctx, qtype, v_f32, n_head_kv)
    p = rng.random((n_head, n_tokens, n_kv), dtype=np.float32)
    p[:, :, rng.random(n_kv) < 0.2] = 0.0
    p /= p.sum(axis=-1, keepdims=True)
    kq = lib.ggml_new_tensor_4d(ctx, lib.GGML_TYPE_F32, n_kv, n_tokens, n_head, 1)
    ffi.memmove(kq.data, p.tobytes(), p.nbytes)

    kqv = lib.ggml_out_prod(ctx, v, lib.ggml_transpose(ctx, kq))
    graph = lib.ggml_new_graph(ctx)
    lib.ggml_build_forward_expand(graph, kqv)
    compute_on_cpu(graph, n_threads)

    assert tuple(kqv.ne) == (HEAD_DIM, n_tokens, n_head, 1)
    got = _tensor_array(kqv, (n_head, n_tokens, HEAD_DIM))
    group = n_head // n_head_kv
    want = np.einsum("htk,khd->htd", p, v_ref[:, np.arange(n_head) // group, :].astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)  # F32 throughout, in place and in the GEMM
