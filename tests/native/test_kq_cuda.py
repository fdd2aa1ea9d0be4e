"""Patch 0006: on CUDA (or HIP), K^T q over a quantized K cache runs MMVQ's short-rows kernel during decode.

A K row is one head: head_dim values, 2 (hd 64) or 4 (hd 128) quant blocks. The short-rows kernel gives each row
a few lanes of a warp instead of whole warps (the test knob mmvq_short_rows_off switches it off). Both kernels compute
the same integer dot products and differ only in the order of the float sums, so decode logits must agree to
rounding, for all six quantized K types (V f16, flash attention off), GQA 1, 3, 4 and 8, head dims 64 and 128,
and a cache (300+ cells) that is not a multiple of 256. Covered products: patch 0005's grouped product
(ncols = r query heads, one channel per KV head), the broadcast product (kq_grouped path off: one column,
channels broadcast from the KV heads) and a 3-token step (3 columns, broadcast).

Skipped unless the package was built with a CUDA/HIP backend and a device is present.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import pyllama90a as pl
from pyllama90a.tools.synthetic import synthetic_model
from support.cuda_knobs import cuda_test_knobs
from support.decode_paths import paths, step_logits
from support.gpu import requires_gpu
from support.gqa_shapes import gqa_shapes

pytestmark = requires_gpu

SHAPES = gqa_shapes("gqa1-hd64", "gqa1-hd128", "gqa3-hd64", "gqa4-hd64", "gqa4-hd128", "gqa8-hd64", "gqa8-hd128")
# the broadcast product (patch 0005's path off) on two shapes: channel_ratio > 1, with one and with two KV heads
BROADCAST_SHAPES = ("gqa4-hd64", "gqa8-hd128")
N_PREFIX, N_DECODE, N_LAST = 300, 6, 3


def _cases() -> list[tuple[str, str, bool]]:
    cases = [(shape, ctk, True) for shape in SHAPES for ctk in pl.QUANTIZED_KV_TYPES]
    cases += [(shape, ctk, False) for shape in BROADCAST_SHAPES for ctk in pl.QUANTIZED_KV_TYPES]
    return cases


def _key(shape: str, ctk: str, grouped: bool) -> str:
    return f"{shape}__{ctk}__{'grouped' if grouped else 'broadcast'}"


def _tokens(n_vocab: int) -> list[int]:
    return np.random.default_rng(7).integers(10, n_vocab, size=N_PREFIX + N_DECODE + N_LAST).tolist()


def _decode(path: Path, ctk: str, grouped: bool, tokens: list[int]) -> np.ndarray:
    """Logits of N_DECODE one-token steps after a 300-token prefix, then of one N_LAST-token step."""
    with pl.Model(path, ctk=ctk, ctv="f16", flash_attn="off", n_ctx=512,
                  attention_paths=paths(kq_grouped=grouped)) as m:
        m.eval(tokens[:N_PREFIX])
        rows = list(step_logits(m, tokens[N_PREFIX:N_PREFIX + N_DECODE]))
        m.eval(tokens[N_PREFIX + N_DECODE:])
        rows.append(m.last_logits())
    return np.array(rows)


def _all_cases(short_rows: bool) -> dict[str, np.ndarray]:
    """Every case's logits with the short-rows kernel (or MMVQ: the test knob); read at each launch."""
    results = {}
    with cuda_test_knobs(mmvq_short_rows_off=not short_rows):
        for shape, ctk, grouped in _cases():
            # f16 weights: the projections take MMVF, so the K^T q product is the only MMVQ user
            path = synthetic_model(SHAPES[shape], weight_type="f16")
            results[_key(shape, ctk, grouped)] = _decode(path, ctk, grouped, _tokens(SHAPES[shape].n_vocab))
    return results


@pytest.fixture(scope="module")
def runs() -> dict[str, dict[str, np.ndarray]]:
    return {"on": _all_cases(True), "off": _all_cases(False)}


@pytest.mark.parametrize(("shape", "ctk", "grouped"), _cases(), ids=lambda v: v if isinstance(v, str) else
                         ("grouped" if v else "broadcast"))
def test_short_rows_decode_matches_mmvq(runs, shape: str, ctk: str, grouped: bool) -> None:
    key = _key(shape, ctk, grouped)
    got, ref = runs["on"][key], runs["off"][key]
    assert got.shape == ref.shape == (N_DECODE + 1, SHAPES[shape].n_vocab)
    assert np.isfinite(got).all() and np.isfinite(ref).all()
    spread = float(np.abs(ref - ref.mean(axis=-1, keepdims=True)).max())
    assert spread > 0
    # the same integer dot products, summed in another order: rounding only (a wrong K read moves the
    # attention weights, and the logits by a fair fraction of their spread)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-3 * spread)
