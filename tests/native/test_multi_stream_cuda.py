"""Two sequences with a KV stream each in one ubatch on CUDA (or HIP): the quantized-cache paths see n_stream = 2.

Prefill (40 tokens per sequence) takes patch 0007's cuBLAS K^T Q, once with all KV heads in one call and once one
KV head per call (the test knob kv_cublas_heads=1, the per-stream loop), and patch 0004's chunked V product when V
is quantized; decode steps take patches 0005/0006 (K) and 0004's in-place kernel (V). Each sequence must decode as it
does alone, for the six quantized K types with an f16 V and with V of the same type.

Skipped unless the package was built with a CUDA/HIP backend and a device is present.
"""
from __future__ import annotations

import numpy as np
import pytest

import pyllama90a as pl
from pyllama90a.tools.synthetic import synthetic_model
from support.cuda_knobs import cuda_test_knobs
from support.gpu import requires_gpu
from support.gqa_shapes import GQA_SHAPES
from support.two_streams import decode_alone, decode_together

pytestmark = requires_gpu

SHAPE = GQA_SHAPES["gqa4-hd64"]
N_PROMPT, N_STEPS = 40, 3


@pytest.mark.parametrize("heads_per_call", [0, 1], ids=["all-heads", "one-head"])
@pytest.mark.parametrize("same_v", [False, True], ids=["v-f16", "v-same"])
@pytest.mark.parametrize("ctk", pl.QUANTIZED_KV_TYPES)
def test_two_streams_decode_like_one_on_gpu(ctk: str, same_v: bool, heads_per_call: int) -> None:
    with cuda_test_knobs(kv_cublas_heads=heads_per_call):
        _two_streams_decode_like_one(ctk, same_v)


def _two_streams_decode_like_one(ctk: str, same_v: bool) -> None:
    ctv = ctk if same_v else "f16"
    path = synthetic_model(SHAPE, weight_type="f16")
    rng = np.random.default_rng(5)
    prompts = [rng.integers(10, SHAPE.n_vocab, size=N_PROMPT).tolist() for _ in range(2)]
    alone = [decode_alone(path, p, N_STEPS, ctk=ctk, ctv=ctv) for p in prompts]
    together = decode_together(path, prompts, [tokens for _, tokens in alone], ctk=ctk, ctv=ctv)
    for (ref, _), got in zip(alone, together, strict=True):
        assert got.shape == ref.shape == (N_STEPS + 1, SHAPE.n_vocab)
        assert np.isfinite(got).all()
        spread = float(np.abs(ref - ref.mean(axis=1, keepdims=True)).max())
        assert spread > 0
        # other GEMM batchings round differently; reading the other stream's cache moves logits by a fair
        # fraction of their spread (the prompts differ)
        err = float(np.abs(got - ref).max())
        assert err <= 2e-2 * spread, f"max |together - alone| = {err:.4g}, spread {spread:.4g}"
