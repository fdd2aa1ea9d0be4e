"""A CPU reference of CK's fmha_fwd (batch mode, fp16) that reads nothing but its arguments and traits.

It interprets fmha_fwd_args the way CK's kernel does (fmha_fwd_kernel.hpp, block_fmha_pipeline_qr_ks_vs.hpp,
block_masking.hpp of the fetched CK): element (b, h, i, d) of q at q_ptr + b*batch_stride_q +
h*nhead_stride_q + i*stride_q + d; K/V head h / (nhead_q / nhead_k); S = scale_s * Q K^T (fp32
accumulation) + elementwise bias; CK's mask from the (left, right) window; softmax with a fully masked
row's maximum taken as 0 (its output 0 under CK's mask); P rounded to fp16 before the second GEMM
(PDataType = half), fp32 accumulation, O written as fp16. Memory is read through the raw pointers, as the GPU would.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import as_strided

MASK_NO_MASK, MASK_TOP_LEFT, MASK_BOTTOM_RIGHT = 0, 1, 2
BIAS_NO_BIAS, BIAS_ELEMENTWISE = 0, 1


def strided_view(ffi, pointer, shape: tuple[int, ...], strides: tuple[int, ...], *,
                 writable: bool = False) -> np.ndarray:
    """fp16 elements at pointer + sum(index * stride), strides in elements, as CK addresses them."""
    extent = 1 + sum((n - 1) * s for n, s in zip(shape, strides, strict=True))
    raw = np.frombuffer(ffi.buffer(ffi.cast("char *", pointer), 2 * extent), dtype=np.float16)
    return as_strided(raw, shape=shape, strides=tuple(2 * s for s in strides), writeable=writable)


def mask_window(left: int, right: int, seqlen_q: int, seqlen_k: int, top_left: bool) -> tuple[int, int]:
    """(y, x) of make_generic_attention_mask_coordinates_from_lr_window: a negative side is unbounded."""
    left = (seqlen_q - 1 if top_left else seqlen_k - 1) if left < 0 else left
    right = (seqlen_k - 1 if top_left else seqlen_q - 1) if right < 0 else right
    x = 1 + right + (0 if top_left else seqlen_k - seqlen_q)
    y = 1 + left + (0 if top_left else seqlen_q - seqlen_k)
    return y, x


def visible(mask_type: int, left: int, right: int, seqlen_q: int, seqlen_k: int) -> np.ndarray:
    """[seqlen_q, seqlen_k] booleans: SimplifiedGenericAttentionMask::IsOutOfBound negated."""
    if mask_type == MASK_NO_MASK:
        return np.ones((seqlen_q, seqlen_k), dtype=bool)
    y, x = mask_window(left, right, seqlen_q, seqlen_k, mask_type == MASK_TOP_LEFT)
    i = np.arange(seqlen_q)[:, None]
    j = np.arange(seqlen_k)[None, :]
    return (j >= -y + i + 1) & (j < np.minimum(i + x, seqlen_k))


def fmha_fwd(ffi, args, traits) -> np.ndarray:
    """Compute CK's forward into args.o_ptr; also returns O as float32 [batch, nhead_q, seqlen_q, hdim_v]."""
    assert not traits.is_group_mode and traits.is_v_rowmajor and not traits.has_logits_soft_cap
    assert not traits.has_lse and not traits.has_dropout and ffi.string(traits.data_type) == b"fp16"
    assert traits.mask_type == args.mask_type and args.nhead_q % args.nhead_k == 0
    b, hq, hk, sq, sk = args.batch, args.nhead_q, args.nhead_k, args.seqlen_q, args.seqlen_k
    q = strided_view(ffi, args.q_ptr, (b, hq, sq, args.hdim_q),
                     (args.batch_stride_q, args.nhead_stride_q, args.stride_q, 1)).astype(np.float32)
    k = strided_view(ffi, args.k_ptr, (b, hk, sk, args.hdim_q),
                     (args.batch_stride_k, args.nhead_stride_k, args.stride_k, 1)).astype(np.float32)
    v = strided_view(ffi, args.v_ptr, (b, hk, sk, args.hdim_v),
                     (args.batch_stride_v, args.nhead_stride_v, args.stride_v, 1)).astype(np.float32)
    kv_head = np.arange(hq) // (hq // hk)
    s = args.scale_s * np.einsum("bhid,bhjd->bhij", q, k[:, kv_head])
    if traits.bias_type == BIAS_ELEMENTWISE:
        s += strided_view(ffi, args.bias_ptr, (b, hq, sq, sk),
                          (args.batch_stride_bias, args.nhead_stride_bias, args.stride_bias, 1)).astype(np.float32)
    else:
        assert traits.bias_type == BIAS_NO_BIAS
    s = np.where(visible(args.mask_type, args.window_size_left, args.window_size_right, sq, sk), s, -np.inf)
    row_max = s.max(axis=-1, keepdims=True)
    row_max = np.where(row_max == -np.inf, 0.0, row_max)
    p = np.exp(s - row_max)
    row_sum = p.sum(axis=-1, keepdims=True)
    o = np.einsum("bhij,bhjd->bhid", p.astype(np.float16).astype(np.float32), v[:, kv_head])
    with np.errstate(divide="ignore", invalid="ignore"):
        # a row no key reaches: 0 under CK's mask, 0/0 without one (the pipeline guards only masking kernels)
        o = np.where(row_sum == 0, 0.0, o / row_sum) if args.mask_type != MASK_NO_MASK else o / row_sum
    out = strided_view(ffi, args.o_ptr, (b, hq, sq, args.hdim_v),
                       (args.batch_stride_o, args.nhead_stride_o, args.stride_o, 1), writable=True)
    out[...] = o.astype(np.float16)
    return o.astype(np.float16).astype(np.float32)
