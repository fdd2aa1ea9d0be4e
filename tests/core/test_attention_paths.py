"""Attention paths are context parameters (patch 0001's llama_pyl_attn_params), not environment switches: set
per Model, read by llama.cpp once per graph build, with the compute buffers re-reserved at once. And the one
list of quantized KV types in C (ggml-pyllama90a.h) is the list Python offers."""
from __future__ import annotations

import pytest

import pyllama90a as pl
from pyllama90a.core.model.attention_paths import AttentionPaths
from pyllama90a.native._ffi import lib
from pyllama90a.native.ggml import ggml_type
from pyllama90a.native.kv_types import KV_TYPES, QUANTIZED_KV_TYPES


def test_paths_are_bits_of_the_native_enum() -> None:
    assert AttentionPaths().bits == lib.llama_pyl_attn_default_params().paths
    assert AttentionPaths(vquant_direct=False).bits == AttentionPaths().bits & ~lib.LLAMA_PYL_ATTN_VQUANT_DIRECT
    assert AttentionPaths(kq_grouped=False).bits == AttentionPaths().bits & ~lib.LLAMA_PYL_ATTN_KQ_GROUPED
    assert AttentionPaths(kv_cublas=False).bits == AttentionPaths().bits & ~lib.LLAMA_PYL_ATTN_KV_CUBLAS
    assert AttentionPaths(ck_fa=False).bits == AttentionPaths().bits & ~lib.LLAMA_PYL_ATTN_CK_FA
    assert AttentionPaths(fused_decode=True).bits == AttentionPaths().bits | lib.LLAMA_PYL_ATTN_FUSED_DECODE
    assert AttentionPaths(fold_rotations=False).bits == AttentionPaths().bits & ~lib.LLAMA_PYL_ATTN_FOLD_ROTATIONS
    for paths in (AttentionPaths(), AttentionPaths(False, False, False, False), AttentionPaths(kq_grouped=False)):
        assert AttentionPaths.from_bits(paths.bits) == paths
    with pytest.raises(pl.InvalidArgumentError, match="kq_grouped"):
        AttentionPaths(kq_grouped=0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="lane_quant"):  # the serial K/V store's switch, removed by patch 0030
        AttentionPaths(lane_quant=False)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="fused_q8"):  # the F32-q kernel's switch, removed by patch 0036
        AttentionPaths(fused_q8=False)  # type: ignore[call-arg]


def test_one_check_of_a_paths_argument(model_path) -> None:
    paths = AttentionPaths(kq_grouped=False)
    assert AttentionPaths.checked(paths) is paths
    assert AttentionPaths.checked(None, none_ok=True) == AttentionPaths()
    with pytest.raises(pl.InvalidArgumentError, match="must be an AttentionPaths, got NoneType"):
        AttentionPaths.checked(None)  # the setter's case: None is no set of paths
    # every entry point refuses what is not an AttentionPaths before llama.cpp sees it: bits, a dict
    with pytest.raises(pl.InvalidArgumentError, match="must be an AttentionPaths, got int"):
        pl.Model(model_path, n_ctx=256, n_threads=2, attention_paths=paths.bits)  # type: ignore[arg-type]
    with pytest.raises(pl.InvalidArgumentError, match="must be an AttentionPaths, got dict"):
        pl.BatchEngine(model_path, n_ctx=256, parallel=1, n_threads=2,
                       attention_paths={"kq_grouped": False})  # type: ignore[arg-type]
    with pl.Model(model_path, n_ctx=256, n_threads=2) as m:
        with pytest.raises(pl.InvalidArgumentError, match="must be an AttentionPaths, got int"):
            m.with_context(n_ctx=256, attention_paths=paths.bits)  # type: ignore[arg-type]
        with pytest.raises(pl.InvalidArgumentError, match="must be an AttentionPaths, got NoneType"):
            m.attention_paths = None  # type: ignore[assignment]
        assert m.attention_paths == AttentionPaths()


def test_a_model_sets_its_context_paths(model_path) -> None:
    with pl.Model(model_path, n_ctx=512, n_threads=2, attention_paths=AttentionPaths(kq_grouped=False)) as m:
        assert m.attention_paths == AttentionPaths(kq_grouped=False)
        with m.hold_context("a test") as context:  # what llama.cpp holds, read back through its API
            assert context.attention_paths() == m.attention_paths.bits
        m.attention_paths = AttentionPaths()
        with m.hold_context("a test") as context:
            assert context.attention_paths() == AttentionPaths().bits
        with pytest.raises(pl.InvalidArgumentError, match="AttentionPaths"):
            m.attention_paths = {"kq_grouped": False}  # type: ignore[assignment]
        other = m.with_context(n_ctx=256, attention_paths=AttentionPaths(vquant_direct=False))
        with other:  # a second context on the same weights has paths of its own
            assert other.attention_paths == AttentionPaths(vquant_direct=False)
            assert m.attention_paths == AttentionPaths()


def test_a_change_re_reserves_the_compute_buffers_at_once(model_path) -> None:
    # decode-sized graphs only (n_ubatch 8): the in-place V product needs no F32 copy of V, the dequantize
    # path needs an F32 copy of a layer's V (n_ctx cells) at least (its transposed copy may reuse memory)
    with pl.Model(model_path, ctk="q8_0", ctv="q8_0", flash_attn="off", n_ctx=2048, n_batch=8, n_ubatch=8,
                  n_threads=2) as m:
        in_place = m.compute_buffer_bytes
        m.attention_paths = AttentionPaths(vquant_direct=False)
        dequantize = m.compute_buffer_bytes
        m.attention_paths = AttentionPaths()
        assert m.compute_buffer_bytes == in_place
    head_dim_v, n_head_kv = 64, 3  # SmolLM2-135M
    assert dequantize - in_place >= 2048 * head_dim_v * n_head_kv * 4


def test_an_engines_model_refuses_a_change_while_it_runs(model_path) -> None:
    with pl.BatchEngine(model_path, n_ctx=1024, parallel=2, n_threads=2,
                        attention_paths=AttentionPaths(vquant_direct=False)) as engine:
        assert engine.model.attention_paths == AttentionPaths(vquant_direct=False)
        with pytest.raises(pl.BusyError):
            engine.model.attention_paths = AttentionPaths()


def test_one_list_of_quantized_kv_types() -> None:
    quantized = {ggml_type(name) for name in QUANTIZED_KV_TYPES}
    assert quantized < {ggml_type(name) for name in KV_TYPES}
    for t in range(lib.GGML_TYPE_COUNT):  # every ggml type, the weight-only ones (Q4_K, ...) included
        assert bool(lib.ggml_pyl_kv_quant_type(t)) == (t in quantized), t
