"""Patch 0004: on CUDA (or HIP) the attention reads a quantized V cache on the device (GGML_OP_OUT_PROD).

Skipped unless the package was built with a CUDA/HIP backend and a device is present; the models are fully
offloaded (Model's default n_gpu_layers=-1). Each comparison runs the same tokens twice: with the device path
and with it switched off (AttentionPaths(vquant_direct=False): patch 0002's cast to F32 + transpose + mul_mat,
also on the device). Decode reads the quantized rows in place and accumulates in F32, so its logits agree with the
fallback's to rounding, for all six quantized types, GQA 1, 3, 4 and 8, head dims 64 and 128 and a cache
length (300+) that is not a multiple of 256. Prefill dequantizes chunks of rows for cuBLAS; it is checked
against the fallback with the chunking forced small (the test knob out_prod_chunk_rows), so that the chunks'
accumulation runs too. That the device path was taken is checked from llama.cpp's own report at context
creation: its compute buffers lose the F32 copies of V, and the graph has no more backend splits than an
f16-V graph (an op that fell back to the CPU would add splits).
"""
from __future__ import annotations

import contextlib
import logging
import re

import numpy as np
import pytest

import pyllama90a as pl
from pyllama90a.native.ggml import ggml_type
from pyllama90a.tools.synthetic import synthetic_model
from support.cuda_knobs import cuda_test_knobs
from support.decode_paths import paths, step_logits
from support.gpu import requires_gpu
from support.gqa_shapes import gqa_shapes
from support.graph_probe import decode_nodes

pytestmark = requires_gpu

SHAPES = gqa_shapes("gqa1-hd64", "gqa3-hd64", "gqa4-hd128", "gqa8-hd128", "gqa8-hd64")
N_PREFIX, N_DECODE = 300, 6


def _random_tokens(n_vocab: int, n: int = N_PREFIX + N_DECODE) -> list[int]:
    return np.random.default_rng(1).integers(10, n_vocab, size=n).tolist()


def _spread(x: np.ndarray) -> float:
    return float(np.abs(x - x.mean(axis=-1, keepdims=True)).max())


def _decode(path, kv_type: str, device_path: bool, tokens: list[int]) -> np.ndarray:
    """Prefill with the fallback path in both runs (the same cache contents, bit for bit), then decode one
    token at a time with the path under test: the decode graphs are built after the switch changes."""
    with pl.Model(path, ctk=kv_type, ctv=kv_type, flash_attn="off", n_ctx=512,
                  attention_paths=paths(vquant_direct=False)) as m:
        m.eval(tokens[:N_PREFIX])
        m.attention_paths = paths(vquant_direct=device_path)
        return step_logits(m, tokens[N_PREFIX:])


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kv_type", pl.QUANTIZED_KV_TYPES)
def test_device_decode_matches_fallback(shape: str, kv_type: str) -> None:
    path = synthetic_model(SHAPES[shape], weight_type="f16")
    tokens = _random_tokens(512)
    got = _decode(path, kv_type, True, tokens)
    ref = _decode(path, kv_type, False, tokens)
    assert np.isfinite(got).all()
    # same cache, F32 accumulation in both: rounding only (a wrong V read is of the order of the spread)
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-3 * _spread(ref))


def _prefill(path, kv_type: str, device_path: bool, chunk: int) -> np.ndarray:
    with (cuda_test_knobs(out_prod_chunk_rows=chunk),
          pl.Model(path, ctk=kv_type, ctv=kv_type, flash_attn="off", n_ctx=512, n_batch=128,
                   n_ubatch=128, attention_paths=paths(vquant_direct=device_path)) as m):
        return m.logits(_random_tokens(512, 301))


@pytest.mark.parametrize("shape", ["gqa3-hd64", "gqa8-hd128"])
@pytest.mark.parametrize("kv_type", pl.QUANTIZED_KV_TYPES)
@pytest.mark.parametrize("chunk", [0, 100])
def test_device_prefill_matches_fallback(shape: str, kv_type: str, chunk: int) -> None:
    path = synthetic_model(SHAPES[shape], weight_type="f16")
    got = _prefill(path, kv_type, True, chunk)
    ref = _prefill(path, kv_type, False, 0)
    assert np.isfinite(got).all()
    # both are cuBLAS GEMMs in TF32 with different blockings, and layer 1's K and V are quantized from
    # layer 0's slightly different output: more than rounding, far less than a wrong read
    spread = _spread(ref)
    assert np.abs(got - ref).max() <= 0.05 * spread
    assert (got.argmax(axis=-1) == ref.argmax(axis=-1)).mean() >= 0.95


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def _native_log():
    logger = logging.getLogger("pyllama90a.native")
    handler, level = _Lines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _reserve(path, ctk: str, ctv: str, device_path: bool) -> tuple[int, int]:
    """(compute buffer bytes, graph splits) of a context whose every graph is decode-sized (n_ubatch 8):
    patch 0004's op then handles all of them, and the fallback's two F32 copies of V (n_ctx cells each)
    dominate its compute buffer."""
    with (_native_log() as lines,
          pl.Model(path, ctk=ctk, ctv=ctv, flash_attn="off", n_ctx=4096, n_batch=8, n_ubatch=8,
                   attention_paths=paths(vquant_direct=device_path)) as m):
        compute = m.compute_buffer_bytes
    splits = [re.search(r"splits = (\d+)(?: / (\d+))?", line) for line in lines]
    found = [s for s in splits if s]
    assert found, "llama.cpp did not log its graph splits"
    return compute, max(int(found[-1][1]), int(found[-1][2] or 0))


@pytest.mark.parametrize("kv_type", pl.QUANTIZED_KV_TYPES)
def test_device_path_is_taken(kv_type: str) -> None:
    path = synthetic_model(SHAPES["gqa4-hd128"], weight_type="f16")
    compute, splits = _reserve(path, kv_type, kv_type, True)
    compute_fallback, _ = _reserve(path, kv_type, kv_type, False)
    _, splits_f16 = _reserve(path, "f16", "f16", True)
    # V of one layer as F32: 4096 cells x 128 values x 4 bytes = 2 MiB; the fallback holds two such copies
    assert compute_fallback - compute >= 2 << 20
    # every attention op on the device, as with an f16 V (a CPU fallback would add splits per layer)
    assert splits == splits_f16
    # and the graph multiplies by V with OUT_PROD on the quantized cache, one per layer, only when switched on
    tokens = list(range(10, 310))
    on = [n for n in decode_nodes(path, tokens, ctk=kv_type, ctv=kv_type, n_gpu_layers=-1) if n.op == "OUT_PROD"]
    off = [n for n in decode_nodes(path, tokens, ctk=kv_type, ctv=kv_type, n_gpu_layers=-1,
                                   paths=paths(vquant_direct=False)) if n.op == "OUT_PROD"]
    assert len(on) == SHAPES["gqa4-hd128"].n_layer and not off
    assert all(n.src_types[0] == ggml_type(kv_type) for n in on)
