"""The mapping's fmha_fwd arguments, executed by a CPU reference of CK's documented semantics, reproduce
ggml's CPU FLASH_ATTN_EXT on the same tensors: GQA 1/4/8, head dims 64/128, causal and arbitrary masks
(also one per head, several streams), n_kv not a multiple of 256, F16 and quantized caches.

This is what can be proven without an AMD GPU: if the strides, head mapping, scale and bias are right
here, CK on an MI210 computes the same function (its kernels are CK's own, tested by AMD)."""
from __future__ import annotations

import itertools
import zlib

import numpy as np
import pytest

import support.ck_fmha_reference as reference
from pyllama90a.native._ffi import ffi as native_ffi
from support.ck_fa_graph import FaGraph, Shape, build, compute
from support.ck_mapping import Mapping, ck_mapping, ggml_ctx  # noqa: F401  (fixtures)

# ggml's CPU path rounds Q to fp16 and accumulates V in fp16, CK rounds P to fp16: over 8 seeds of these
# shapes the outputs (values up to ~2) differed by at most 0.0073. Against a quantized K, ggml's CPU path
# also quantizes Q to q8_0 for the dot product (CK gets an fp16 Q): at most 0.017. A wrong stride, head
# or scale is off by O(0.1..1) (test_the_comparison_catches_a_wrong_argument).
TOLERANCE = {"atol": 1.2e-2, "rtol": 0}
TOLERANCE_QUANTIZED_K = {"atol": 3e-2, "rtol": 0}


def random_shapes() -> list[Shape]:
    rng = np.random.default_rng(20261130)
    shapes = []
    for (gqa, head_dim, mask), kv_type in zip(itertools.product((1, 4, 8), (64, 128), ("causal", "arbitrary")),
                                              itertools.cycle(("f16", "f16", "q8_0", "f16", "q4_0", "f16"))):
        n_head_kv = int(rng.choice((1, 2))) if gqa > 1 else int(rng.integers(2, 5))
        n_q = int(rng.integers(16, 80))
        n_kv = int(rng.integers(n_q, 700))
        n_kv += n_kv % 256 == 0  # never a multiple of 256
        mask = "per_head" if mask == "arbitrary" and rng.random() < 0.3 else mask
        shapes.append(Shape(n_head_kv * gqa, n_head_kv, head_dim, n_q, n_kv, int(rng.integers(1, 3)), mask, kv_type))
    return shapes


def staged(mapping: Mapping, graph: FaGraph) -> dict[str, np.ndarray | int]:
    """F16 operands as the HIP glue provides them: in place when F16, else a contiguous F16 copy."""
    node = graph.node
    keep: dict[str, np.ndarray | int] = {}
    for name, src, values in (("q", node.src[0], graph.q), ("k", node.src[1], graph.k), ("v", node.src[2], graph.v)):
        if mapping.needs_f16_copy(src):
            copy = np.ascontiguousarray(values.astype(np.float16))  # numpy order of ggml's [ne0, ne1, ne2, ne3]
            keep[name + "_copy"] = copy
            keep[name] = copy.ctypes.data
        else:
            keep[name] = int(native_ffi.cast("uintptr_t", src.data))
    keep["o_staging"] = np.zeros((node.ne[3], node.ne[2], node.ne[1], node.ne[0]), dtype=np.float16)
    keep["o"] = keep["o_staging"].ctypes.data
    return keep


def run_reference(mapping: Mapping, graph: FaGraph, **options) -> np.ndarray:
    buffers = staged(mapping, graph)
    args, traits = mapping.map(graph.node, buffers["q"], buffers["k"], buffers["v"], buffers["o"], **options)
    reference.fmha_fwd(mapping.ffi, args, traits)
    return buffers["o_staging"].astype(np.float32)


@pytest.mark.parametrize("shape", random_shapes(), ids=lambda s: (
    f"h{s.n_head}-kv{s.n_head_kv}-d{s.head_dim}-q{s.n_q}-n{s.n_kv}-s{s.n_seq}-{s.mask}-{s.kv_type}"))
def test_reference_of_mapped_args_matches_ggml(ck_mapping: Mapping, ggml_ctx, shape: Shape):
    graph = build(ggml_ctx, shape, np.random.default_rng(zlib.crc32(repr(shape).encode())))
    expected = compute(ggml_ctx, graph.node)
    assert np.isfinite(expected).all()
    tolerance = TOLERANCE if shape.kv_type == "f16" else TOLERANCE_QUANTIZED_K
    np.testing.assert_allclose(run_reference(ck_mapping, graph), expected, **tolerance)
    if shape.mask == "causal":
        # CK's own causal mask (top-left window, right = first query's position) on top of the KQ mask
        np.testing.assert_allclose(run_reference(ck_mapping, graph, causal_offset=graph.n_past), expected,
                                   **tolerance)


def test_attention_without_a_mask(ck_mapping: Mapping, ggml_ctx):
    graph = build(ggml_ctx, Shape(8, 2, 128, 33, 95, 1, "none"), np.random.default_rng(7))
    np.testing.assert_allclose(run_reference(ck_mapping, graph), compute(ggml_ctx, graph.node), **TOLERANCE)


@pytest.mark.parametrize("corrupt", ["nhead_stride_k", "stride_bias", "scale_s", "nhead_k"])
def test_the_comparison_catches_a_wrong_argument(ck_mapping: Mapping, ggml_ctx, corrupt: str):
    """The check has teeth: one wrong field of the mapping's output breaks the agreement."""
    graph = build(ggml_ctx, Shape(8, 2, 64, 24, 150, 1, "arbitrary"), np.random.default_rng(3))
    expected = compute(ggml_ctx, graph.node)
    buffers = staged(ck_mapping, graph)
    args, traits = ck_mapping.map(graph.node, buffers["q"], buffers["k"], buffers["v"], buffers["o"])
    if corrupt == "nhead_k":
        args.nhead_k = args.nhead_q  # as if GQA were ignored: query head h reads KV head h
        args.nhead_stride_k = args.nhead_stride_v = 0
    elif corrupt == "scale_s":
        args.scale_s *= 1.25
    else:
        setattr(args, corrupt, getattr(args, corrupt) + 1)
    with np.errstate(all="ignore"):
        reference.fmha_fwd(ck_mapping.ffi, args, traits)
    error = np.nan_to_num(np.abs(buffers["o_staging"].astype(np.float32) - expected), nan=np.inf).max()
    assert error > 10 * TOLERANCE["atol"], error
