"""flash_attn="hybrid" (patch 0012): one context takes FLASH_ATTN_EXT for prefill and the quantized non-flash
path (grouped K^T q, softmax, OUT_PROD over the quantized V) for decode.

Random-weight models (pyllama90a.tools.synthetic) with GQA, so the same file runs on the CPU in CI and on the GPU
machine. The exact claims: hybrid's prefill is FA-on's (the same graph, the same logits), its decode on a cache
that FA wrote is FA-off's on that cache (a state file carries it across), and its compute buffer is FA's.
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

import pyllama90a as pl
from pyllama90a.core.model.attention_paths import AttentionPaths
from pyllama90a.native._ffi import lib
from pyllama90a.native.ggml import ggml_type
from pyllama90a.tools.synthetic import Rope, Shape, synthetic_model
from support.decode_paths import step_logits
from support.gpu import on_gpu
from support.graph_probe import phase_nodes
from support.stream_probe import decode_streams

SHAPES = {
    "hd64-gqa2": Shape("test-hd64", n_embd=256, n_layer=4, n_head=4, n_head_kv=2, n_ff=512, n_vocab=512),
    "hd128-gqa4": Shape("test-hd128", n_embd=512, n_layer=3, n_head=4, n_head_kv=1, n_ff=768, n_vocab=512),
}
# the fused decode kernel's head dims and GQA group sizes (CUDA/HIP)
FUSED_SHAPES = {**SHAPES,
    "hd64-gqa8": Shape("test-hd64-g8", n_embd=512, n_layer=2, n_head=8, n_head_kv=1, n_ff=512, n_vocab=512),
    "hd256-mha": Shape("test-hd256", n_embd=512, n_layer=2, n_head=2, n_head_kv=2, n_ff=512, n_vocab=512),
    # 8 KV heads, as the 8B shape: a block takes several heads, whose rows it loads 16 bytes at a time
    "hd128-kv8": Shape("test-hd128-kv8", n_embd=2048, n_layer=1, n_head=16, n_head_kv=8, n_ff=512, n_vocab=512),
}
N_PROMPT, N_DECODE = 301, 6


@functools.cache
def _tokens() -> list[int]:
    rng = np.random.default_rng(7)
    return [1, *rng.integers(259, 512, size=N_PROMPT + N_DECODE - 1).tolist()]


def _model(shape: str, kv: str, flash_attn: str, n_ctx: int = 512, paths: AttentionPaths | None = None,
           n_gpu_layers: int = -1, rope: Rope | None = None) -> pl.Model:
    return pl.Model(synthetic_model(FUSED_SHAPES[shape], weight_type="f16", rope=rope), ctk=kv, ctv=kv,
                    flash_attn=flash_attn, n_ctx=n_ctx, n_batch=128, n_ubatch=128, attention_paths=paths,
                    n_gpu_layers=n_gpu_layers)


def _ops(nodes) -> set[str]:
    return {n.op for n in nodes}


@pytest.mark.parametrize("shape", SHAPES)
def test_prefill_takes_flash_attention_and_decode_the_quantized_path(shape: str) -> None:
    path = synthetic_model(SHAPES[shape], weight_type="f16")
    prefill, decode = phase_nodes(path, _tokens()[:40], ctk="q4_0", ctv="q4_0", flash_attn="hybrid", n_ctx=512)
    assert "FLASH_ATTN_EXT" in _ops(prefill) and "OUT_PROD" not in _ops(prefill)
    assert "FLASH_ATTN_EXT" not in _ops(decode)
    products = [n for n in decode if n.op == "OUT_PROD"]
    assert len(products) == SHAPES[shape].n_layer  # V read quantized, in place, once per layer
    assert all(n.src_types[0] == ggml_type("q4_0") for n in products)


def test_without_the_mode_flash_attention_decodes_too() -> None:
    """The control of the test above: the same probe with FA on and no per-phase bit sees FA at decode."""
    path = synthetic_model(SHAPES["hd64-gqa2"], weight_type="f16")
    _, decode = phase_nodes(path, _tokens()[:40], ctk="q4_0", ctv="q4_0", flash_attn="on", n_ctx=512)
    assert "FLASH_ATTN_EXT" in _ops(decode) and "OUT_PROD" not in _ops(decode)


def test_an_unquantized_v_keeps_flash_attention_for_decode() -> None:
    """FA's vector kernels read an f16 V well; the non-flash path would transpose all of it at every step."""
    path = synthetic_model(SHAPES["hd64-gqa2"], weight_type="f16")
    _, decode = phase_nodes(path, _tokens()[:40], ctk="f16", ctv="f16", flash_attn="hybrid", n_ctx=512)
    assert "FLASH_ATTN_EXT" in _ops(decode)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kv", ["q4_0", "q8_0"])
def test_prefill_is_fa_on_and_decode_is_fa_off(shape: str, kv: str, tmp_path: Path) -> None:
    prompt, rest = _tokens()[:N_PROMPT], _tokens()[N_PROMPT:]
    with _model(shape, kv, "hybrid") as hybrid, _model(shape, kv, "on") as on, _model(shape, kv, "off") as off:
        hybrid.eval(prompt)
        on.eval(prompt)
        # the same FLASH_ATTN_EXT graph over the same weights and tokens
        np.testing.assert_array_equal(hybrid.last_logits(), on.last_logits())
        # decode from the cache FA wrote: FA-off's non-flash graph on the same cache, in both contexts
        hybrid.save_state(tmp_path / "after-prompt.state")
        off.load_state(tmp_path / "after-prompt.state")
        got, want = step_logits(hybrid, rest), step_logits(off, rest)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * float(np.abs(want).max()))
        # and it is not FA's decode (which would make the comparison above say nothing about the path)
        from_on = step_logits(on, rest)
        assert np.abs(from_on - want).max() > 0


@pytest.mark.parametrize("kv", ["q4_0"])
def test_state_files_cross_every_mode(kv: str, tmp_path: Path) -> None:
    """A quantized V has one layout in all three modes: a state saved in any loads in any other."""
    prompt = _tokens()[:64]
    modes = ("hybrid", "on", "off")
    for source in modes:
        with _model("hd64-gqa2", kv, source) as m:
            m.eval(prompt)
            m.save_state(tmp_path / f"{source}.state")
            want = m.logits(_tokens()[64:66])
        for target in modes:
            with _model("hd64-gqa2", kv, target) as m:
                m.load_state(tmp_path / f"{source}.state")
                assert m.n_cached == len(prompt)
                got = m.logits(_tokens()[64:66])
                cos = float((got * want).sum() / np.linalg.norm(got) / np.linalg.norm(want))
                assert cos > 0.99, (source, target, cos)


def test_compute_buffer_is_flash_attentions() -> None:
    """The scheduler reserves FA's prefill graph and the small non-flash decode graph: hybrid's compute buffer
    is within 10 % of FA-on's, and far below FA-off's, whose prefill scores grow with the context."""
    n_ctx = 8192
    sizes = {}
    for mode in ("hybrid", "on", "off"):
        with _model("hd128-gqa4", "q4_0", mode, n_ctx=n_ctx) as m:
            sizes[mode] = m.compute_buffer_bytes
    assert sizes["hybrid"] <= 1.1 * sizes["on"], sizes
    assert sizes["hybrid"] < 0.5 * sizes["off"], sizes


def test_the_mode_is_reported_and_kept_across_path_changes() -> None:
    with _model("hd64-gqa2", "q4_0", "hybrid") as m:
        assert m.attention.flash_attn == "hybrid"
        m.attention_paths = AttentionPaths(kq_grouped=False)
        assert m.attention_paths == AttentionPaths(kq_grouped=False)
        with m.hold_context("read the native paths") as context:
            assert context.attention_paths() == AttentionPaths(kq_grouped=False).bits
            assert int(lib.llama_pyl_get_attn_params(context._live()).paths) & lib.LLAMA_PYL_ATTN_HYBRID


# -- the fused decode kernel (patch 0013: AttentionPaths(fused_decode=True); auto's choice on CUDA), on a GPU only

@on_gpu
def test_the_gpu_decodes_through_the_fused_kernel_and_not_without_it() -> None:
    path = synthetic_model(SHAPES["hd128-gqa4"], weight_type="f16")
    for fused in (True, False):
        _, decode = phase_nodes(path, _tokens()[:40], ctk="q4_0", ctv="q4_0", flash_attn="hybrid", n_ctx=512,
                                n_gpu_layers=-1, paths=AttentionPaths(fused_decode=fused))
        attention = [n for n in decode if n.op == "FLASH_ATTN_EXT"]
        if fused:
            assert len(attention) == SHAPES["hd128-gqa4"].n_layer
            assert all(n.mark & lib.GGML_PYL_MARK_FUSED_DECODE for n in attention)
            assert "OUT_PROD" not in _ops(decode)
        else:
            assert not attention and "OUT_PROD" in _ops(decode)


def _rotations(nodes) -> list:
    """The Hadamard rotations of a rotated quantized cache: MUL_MATs by llama.cpp's rotation inputs (or by the
    scheduler's copies of them on the GPU, named "CUDA0#attn_inp_k_rot#0")."""
    return [n for n in nodes if n.op == "MUL_MAT" and any(name in src for src in n.src_names
                                                          for name in ("attn_inp_k_rot", "attn_inp_v_rot"))]


@on_gpu
def test_the_fused_decode_does_the_rotations_in_its_kernels() -> None:
    """Patch 0015: over a rotated cache (q4_0, head dim 128) the fused decode graph has none of the four rotation
    nodes per layer: its K and V stores rotate (ROTATE_ROWS, K's piece 128, V's 64, llama.cpp's sizes) and its
    attention rotates q and the output (ROTATED). Prefill keeps upstream's rotation nodes, and so does the fused
    decode with fold_rotations off."""
    shape = SHAPES["hd128-gqa4"]
    path = synthetic_model(shape, weight_type="f16")
    prefill, decode = phase_nodes(path, _tokens()[:40], ctk="q4_0", ctv="q4_0", flash_attn="hybrid", n_ctx=512,
                                  n_gpu_layers=-1, paths=AttentionPaths(fused_decode=True))
    assert len(_rotations(prefill)) == 4 * shape.n_layer
    assert not _rotations(decode)
    stores = [n for n in decode if n.op == "SET_ROWS"]
    assert len(stores) == 2 * shape.n_layer and all(n.mark & lib.GGML_PYL_MARK_ROTATE_ROWS for n in stores)
    attention = [n for n in decode if n.op == "FLASH_ATTN_EXT"]
    assert len(attention) == shape.n_layer
    assert all(n.mark & lib.GGML_PYL_MARK_ROTATED and n.mark & lib.GGML_PYL_MARK_FUSED_DECODE for n in attention)
    assert {((n.mark >> 8) & 15, (n.mark >> 12) & 15) for n in attention} == {(7, 6)}  # pieces of 128 and 64
    _, unfolded = phase_nodes(path, _tokens()[:40], ctk="q4_0", ctv="q4_0", flash_attn="hybrid", n_ctx=512,
                              n_gpu_layers=-1, paths=AttentionPaths(fused_decode=True, fold_rotations=False))
    assert len(_rotations(unfolded)) == 4 * shape.n_layer
    assert not any(n.mark & (lib.GGML_PYL_MARK_ROTATED | lib.GGML_PYL_MARK_ROTATE_ROWS) for n in unfolded)


@on_gpu
@pytest.mark.parametrize("shape", ["hd64-gqa2", "hd128-kv8", "hd256-mha"])
@pytest.mark.parametrize("kv", ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0"])
def test_cells_the_fused_decode_stores_are_read_as_the_caches_own(shape: str, kv: str, tmp_path: Path) -> None:
    """With the rotations folded the fused decode stores its K and V rows itself. A store that skipped the rotation
    would still decode consistently in the fused context (an unrotated q against an unrotated K gives the same
    scores), so only a reader of the other kind can tell: the CPU's FA-off decode loads the cache after 40
    fused steps over a 16-token prompt (most cells the fused path's) and must give the fused context's next
    logits (the bound of the test above). Each KV type's quantizer (32 lanes per block, 0017) is read back."""
    _assert_the_cpu_reads_the_fused_stores(shape, kv, tmp_path)


def _assert_the_cpu_reads_the_fused_stores(shape: str, kv: str, tmp_path: Path, rope: Rope | None = None) -> None:
    tokens = _tokens()
    prompt, steps, last = tokens[:16], tokens[16:56], tokens[56:57]
    with _model(shape, kv, "hybrid", n_ctx=512, paths=AttentionPaths(fused_decode=True), rope=rope) as fused:
        fused.eval(prompt)
        step_logits(fused, steps)
        fused.save_state(tmp_path / "fused.state")
        got = step_logits(fused, last)
    with _model(shape, kv, "off", n_ctx=512, n_gpu_layers=0, rope=rope) as cpu:
        cpu.load_state(tmp_path / "fused.state")
        want = step_logits(cpu, last)
    spread = float(np.abs(want - want.mean(axis=-1, keepdims=True)).max())
    assert np.isfinite(got).all() and np.abs(got - want).max() <= 8e-3 * spread


# RoPE kinds other than the synthetic llama's plain one: an EXAONE model's NEOX pairs (k, k + head_dim/2) with
# Llama 3.1's frequency factors and YaRN scaling, and the factors alone
ROPES = {"neox-ff-yarn": Rope(neox=True, freq_factors=True, yarn_factor=4.0), "ff": Rope(freq_factors=True)}


@on_gpu
@pytest.mark.parametrize("rope", ROPES)
@pytest.mark.parametrize("kv", ["q4_0", "q8_0"])
def test_the_fused_decode_stores_are_read_back_under_other_rope_kinds(rope: str, kv: str, tmp_path: Path) -> None:
    """The fused decode's stores and the CPU's reader agree on models with other RoPE kinds too (the CPU's FA-off
    decode reads the cells back as in the test above). Patch 0043 applies RoPE in the K store in place of the ROPE
    node, with the model's pairs, factors and YaRN; a K row stored without its RoPE, or with another kind's pairs
    or angles, is off by far more: on the CPU, after 57 tokens, the factors move the same weights' logits by 0.72
    of their spread, all three by 0.85 (AMD EPYC, 2026-12-06)."""
    _assert_the_cpu_reads_the_fused_stores("hd128-kv8", kv, tmp_path, ROPES[rope])


@on_gpu
def test_auto_takes_hybrid_with_the_fused_kernel_on_cuda_and_given_paths_win() -> None:
    path = synthetic_model(SHAPES["hd128-gqa4"], weight_type="f16")
    with pl.Model(path, ctk="q4_0", ctv="q4_0", flash_attn="auto", n_ctx=512, n_gpu_layers=-1) as m:
        if not m.attention.backend.startswith("CUDA"):
            pytest.skip("the policy's hybrid row is CUDA's")
        assert m.attention.flash_attn == "hybrid" and m.attention_paths.fused_decode
    with pl.Model(path, ctk="q4_0", ctv="q4_0", flash_attn="auto", n_ctx=512, n_gpu_layers=-1,
                  attention_paths=AttentionPaths()) as m:
        assert m.attention.flash_attn == "hybrid" and not m.attention_paths.fused_decode


# the fused kernel: q in 8 bits (0016) split over KV chunks with a reduce, in 0024's tiles (K and V in one round
# trip, K^T q over idle lanes) with V^T p in half2 (0026: summed in half over a tile, in F32 across tiles)
FUSED = AttentionPaths(fused_decode=True)


@on_gpu
@pytest.mark.parametrize("shape", FUSED_SHAPES)
@pytest.mark.parametrize("kv", ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0"])
@pytest.mark.parametrize("cache", ["chunks", "one-tile"])
def test_the_fused_kernel_decodes_as_the_non_flash_path(shape: str, kv: str, cache: str, tmp_path: Path) -> None:
    """The fused kernel, the GPU's non-flash decode and the CPU's FA-off decode, all from one cache (a state
    file): only the order of the sums and the rounding of q differ. The GPU's non-flash path rounds q to q8_1
    (MMVQ) and the CPU's to q8_0 or q8_1; the fused kernel rounds it to 8 bits per 32 values too (patch 0016).
    With 8 KV heads of 128 a rounding of q unlike the references' alone moved the logits by up to ~6e-3 of their
    spread (H200, 2026-12-01, the kernel's F32-q version, removed by patch 0036: fused~CPU 5.1e-3 for q4_1,
    5.9e-3 q5_1, 5.6e-3 q8_0 over 6 steps, where the two references, rounding alike, are 2.4-3.6e-3 apart), so
    the bound is 8e-3 of the spread, or no farther from the CPU than 1.25x the non-flash path; a wrong combine of
    chunks or heads, or a code of V or K read at the wrong place, is off by a large part of the spread. "chunks":
    600+ cells make several KV chunks, so the reduce runs; "one-tile": 151-156 cells, fewer than one tile of one
    KV head holds (a 256-cell cache view), the depth where a chat starts."""
    prompt, rest = _tokens()[:N_PROMPT], _tokens()[N_PROMPT:]
    with _model(shape, kv, "hybrid", n_ctx=1024, paths=FUSED) as fused:
        fused.eval(prompt + prompt if cache == "chunks" else prompt[:151])
        fused.save_state(tmp_path / "prompt.state")
        got = step_logits(fused, rest)
    decoded = {}
    for name, flash_attn, n_gpu_layers in (("non-flash", "hybrid", -1), ("cpu", "off", 0)):
        with _model(shape, kv, flash_attn, n_ctx=1024, n_gpu_layers=n_gpu_layers) as reference:
            reference.load_state(tmp_path / "prompt.state")
            decoded[name] = step_logits(reference, rest)
    want = decoded["cpu"]
    assert np.isfinite(got).all()
    spread = float(np.abs(want - want.mean(axis=-1, keepdims=True)).max())
    non_flash_error = float(np.abs(decoded["non-flash"] - want).max())
    assert np.abs(got - want).max() <= max(8e-3 * spread, 1.25 * non_flash_error)


# -- many sequences decoding together (one token of each per step, a KV stream each), as a GPU server batches them

N_STREAMS, STREAM_STEPS = 8, 3


def _stream_prompts(n_vocab: int) -> tuple[list[list[int]], list[list[int]]]:
    """Different prompts of different lengths (1200-1760 cells: the streams' caches end at different places, so
    the mask differs per stream), and per step one token of each sequence."""
    rng = np.random.default_rng(11)
    prompts = [[1, *rng.integers(259, n_vocab, size=1200 + 80 * s - 1).tolist()] for s in range(N_STREAMS)]
    steps = rng.integers(259, n_vocab, size=(STREAM_STEPS, N_STREAMS)).tolist()
    return prompts, steps


@on_gpu
@pytest.mark.parametrize("shape", ["hd128-kv8", "hd64-gqa2"])
@pytest.mark.parametrize("kv", ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0"])
def test_the_fused_kernel_decodes_many_sequences_as_the_non_flash_path(shape: str, kv: str) -> None:
    """N = 8 sequences, one token of each per step in one batch: every layer's attention of every step is one
    fused-kernel launch over the 8 KV streams (FLASH_ATTN_EXT marked FUSED_DECODE, grid z = the streams), and
    each sequence's logits are those of the same context's non-flash decode (hybrid without the fused kernel: no
    FLASH_ATTN_EXT in its decode steps; same prompts, same batches, so the same caches and the same weight
    kernels) as closely as the two paths agree on that sequence decoded alone, or within the single-sequence
    test's 8e-3 of the spread. A stream's cells read for another's, or a mask applied to the wrong stream, is off
    by a large part of the spread.
    Why not "together = alone": a batch of 8 rows takes other weight kernels than a batch of 1 (MMQ, not MMVQ),
    so the projections round otherwise (H200, 2026-12-05: 0.2-0.7 % of the spread together vs alone, in both
    kernel versions of then). Why a floor per sequence: over 1.2K-1.8K cells of 8 KV heads q4_0's fused vs
    non-flash difference came out at 8.8e-3 of the spread (both versions of then, bit-identical), above the 8e-3
    fitted on 301 cells. With 8 streams of 1.2K-1.8K cells the split makes chunks of 2 tiles or more (H200: 132
    multiprocessors), so 0024's later tiles run (their K and V loaded together; the first tile's before q is
    prepared), and so do 0026's half2 sums (several tiles a block, each flushed to F32). Every KV type: tiles of
    128-256 cells a block, one lane a (cell, head) in K^T q, over each type's block layout."""
    path = synthetic_model(FUSED_SHAPES[shape], weight_type="f16")
    prompts, steps = _stream_prompts(FUSED_SHAPES[shape].n_vocab)
    together, marks = decode_streams(path, prompts, steps, kv=kv, flash_attn="hybrid", paths=FUSED)
    assert len(marks) == FUSED_SHAPES[shape].n_layer * STREAM_STEPS
    assert all(m & lib.GGML_PYL_MARK_FUSED_DECODE for m in marks)
    reference, reference_marks = decode_streams(path, prompts, steps, kv=kv, flash_attn="hybrid",
                                                paths=AttentionPaths())
    assert reference_marks == []
    for seq, (got, want) in enumerate(zip(together, reference, strict=True)):
        assert np.isfinite(got).all() and got.shape == want.shape == (STREAM_STEPS, FUSED_SHAPES[shape].n_vocab)
        alone = [decode_streams(path, [prompts[seq]], [[step[seq]] for step in steps], kv=kv, flash_attn="hybrid",
                                paths=p)[0][0] for p in (FUSED, AttentionPaths())]
        spread = float(np.abs(want - want.mean(axis=-1, keepdims=True)).max())
        floor = float(np.abs(alone[0] - alone[1]).max())
        assert np.abs(got - want).max() <= max(8e-3 * spread, 2 * floor), f"sequence {seq}"
