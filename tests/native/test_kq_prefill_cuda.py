"""Patch 0007: on CUDA (or HIP), prefill's K^T Q over a quantized K cache goes to cuBLAS instead of MMQ.

The K cache view is converted to F16 a group of KV heads at a time (at most 64 MiB) and multiplied as an F16 cache
would be. The kv_cublas path off keeps it on MMQ; the test knob kv_cublas_heads=1 forces one group per KV head, so that
the grouping is exercised at test sizes. Every prefill logit (300 tokens in one step, a cache that is not a
multiple of 256) of six quantized K types (V f16, flash attention off), GQA 1, 3, 4 and 8, head dims 64 and 128 is
checked against MMQ and against the CPU backend (the whole model on the CPU): three independent computations.

Skipped unless the package was built with a CUDA/HIP backend and a device is present.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import pyllama90a as pl
from pyllama90a.tools.synthetic import synthetic_model
from support.cuda_knobs import cuda_test_knobs
from support.decode_paths import paths
from support.gpu import requires_gpu
from support.gqa_shapes import gqa_shapes

pytestmark = requires_gpu

SHAPES = gqa_shapes("gqa1-hd64", "gqa3-hd64", "gqa4-hd128-2kv", "gqa8-hd64")
N_PROMPT = 300
RUNS = {  # run name -> (kv_cublas path, test knob kv_cublas_heads, n_gpu_layers)
    "cublas": (True, 0, -1),
    "cublas-per-head": (True, 1, -1),
    "mmq": (False, 0, -1),
    "cpu": (True, 0, 0),
}


def _cases() -> list[tuple[str, str]]:
    return [(shape, ctk) for shape in SHAPES for ctk in pl.QUANTIZED_KV_TYPES]


def _prefill_logits(path: Path, ctk: str, tokens: list[int], kv_cublas: bool, heads: int,
                    n_gpu_layers: int) -> np.ndarray:
    with cuda_test_knobs(kv_cublas_heads=heads), pl.Model(path, ctk=ctk, ctv="f16", flash_attn="off", n_ctx=512,
                                                          n_gpu_layers=n_gpu_layers,
                                                          attention_paths=paths(kv_cublas=kv_cublas)) as m:
        return m.logits(tokens)


@pytest.fixture(scope="module")
def runs() -> dict[tuple[str, str], dict[str, np.ndarray]]:
    results = {}
    for shape, ctk in _cases():
        # f16 weights: the projections do not depend on MMQ either
        path = synthetic_model(SHAPES[shape], weight_type="f16")
        tokens = np.random.default_rng(11).integers(10, SHAPES[shape].n_vocab, size=N_PROMPT).tolist()
        results[shape, ctk] = {name: _prefill_logits(path, ctk, tokens, *run) for name, run in RUNS.items()}
    return results


@pytest.mark.parametrize(("shape", "ctk"), _cases())
def test_prefill_k_cublas_matches_mmq_and_cpu(runs, shape: str, ctk: str) -> None:
    got = runs[shape, ctk]
    ref = got["cpu"]
    assert ref.shape == (N_PROMPT, SHAPES[shape].n_vocab) and np.isfinite(ref).all()
    spread = float(np.abs(ref - ref.mean(axis=-1, keepdims=True)).max())
    assert spread > 0
    for name in ("cublas", "cublas-per-head", "mmq"):
        assert got[name].shape == ref.shape and np.isfinite(got[name]).all()
        # each path rounds differently (F16 products, Q as q8_1, Q as q8_0 on the CPU); a wrong K read moves the
        # attention weights, and the logits by a fair fraction of their spread
        err = float(np.abs(got[name] - ref).max())
        assert err < 2e-2 * spread, f"{name}: max |logit - cpu| = {err:.4g}, spread {spread:.4g}"
    # the switch changes the kernel: cuBLAS's F16 products are not MMQ's integer ones
    assert not np.array_equal(got["cublas"], got["mmq"])
    # grouping KV heads changes which GEMMs are batched together, not what each computes
    np.testing.assert_allclose(got["cublas-per-head"], got["cublas"], rtol=0, atol=1e-4 * spread)
