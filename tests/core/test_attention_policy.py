"""flash_attn="auto" per backend (pyllama90a/core/model/attention_policy.py's table): every row, the GPU ones included,
through decide() with the device kind as input, so that no GPU is needed; and the kind read from a device's
ggml name and description."""
from __future__ import annotations

import itertools

import pytest

import pyllama90a as pl
from pyllama90a.core.model.attention_policy import CUDA_FA_PAIRS, CUDA_HYBRID_PAIRS, decide, device_kind

PAIRS = list(itertools.product(pl.KV_TYPES, repeat=2))
KINDS = ("cpu", "cuda", "gfx90a", "hip", "gpu")


def test_every_pair_in_the_cuda_fa_table_is_a_kv_type() -> None:
    assert set(PAIRS) >= CUDA_FA_PAIRS


def test_cuda_row_fa_on_or_hybrid_only_for_the_pairs_its_fa_kernels_have() -> None:
    got = {(ctk, ctv): decide("auto", ctk, ctv, "cuda", "CUDA0 (NVIDIA H200)") for ctk, ctv in PAIRS}
    # every quantized type with a CUDA FA kernel, K = V: the fused decode won there (H100 calibrate, 0026)
    assert {(t, t) for t in ("q8_0", "q4_0", "q4_1", "q5_0", "q5_1")} == CUDA_HYBRID_PAIRS
    assert CUDA_HYBRID_PAIRS <= CUDA_FA_PAIRS
    assert {pair for pair, choice in got.items() if choice.flash_attn == "hybrid"} == CUDA_HYBRID_PAIRS
    assert {pair for pair, choice in got.items() if choice.flash_attn == "on"} == CUDA_FA_PAIRS - CUDA_HYBRID_PAIRS
    assert {choice.flash_attn for pair, choice in got.items() if pair not in CUDA_FA_PAIRS} == {"off"}
    assert {choice.backend for choice in got.values()} == {"CUDA0 (NVIDIA H200)"}
    # the fused decode kernel comes with hybrid (measured there, benchmarks/results/h200-8b-hd128-fused-v3), and
    # nowhere else: a requested mode or another backend keeps the default paths
    assert {pair for pair, choice in got.items() if choice.fused_decode} == CUDA_HYBRID_PAIRS
    assert not decide("hybrid", "q4_0", "q4_0", "cuda", "CUDA0").fused_decode
    assert not any(decide("auto", "q4_0", "q4_0", kind, "x").fused_decode for kind in ("cpu", "gfx90a", "hip", "gpu"))


def test_cuda_row_names_the_pair_it_turns_fa_off_for_and_why() -> None:
    choice = decide("auto", "q4_0", "q8_0", "cuda", "CUDA0")
    assert choice.flash_attn == "off" and "K q4_0 / V q8_0 not measured" in choice.reason
    choice = decide("auto", "iq4_nl", "iq4_nl", "cuda", "CUDA0")
    assert choice.flash_attn == "off" and "no FA kernel for K iq4_nl / V iq4_nl" in choice.reason


@pytest.mark.parametrize("kind, expected", [("gfx90a", "off"), ("hip", "auto"), ("gpu", "auto")])
def test_hip_rows_fa_off_on_gfx90a_and_left_to_llama_cpp_elsewhere(kind: str, expected: str) -> None:
    assert {decide("auto", ctk, ctv, kind, "dev").flash_attn for ctk, ctv in PAIRS} == {expected}


def test_cpu_rows_fa_off_for_quantized_v_and_left_to_llama_cpp_otherwise() -> None:
    for ctk, ctv in PAIRS:
        expected = "off" if ctv in pl.QUANTIZED_KV_TYPES else "auto"
        assert decide("auto", ctk, ctv, "cpu", "CPU").flash_attn == expected, (ctk, ctv)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("requested", ["on", "off", "hybrid"])
def test_an_explicit_request_is_kept_on_every_backend(kind: str, requested: str) -> None:
    for ctk, ctv in (("f16", "f16"), ("q4_0", "q4_0"), ("q4_0", "q8_0")):
        choice = decide(requested, ctk, ctv, kind, "dev")
        assert (choice.flash_attn, choice.reason) == (requested, "requested")


@pytest.mark.parametrize("name, description, kind", [
    ("CUDA0", "NVIDIA H200", "cuda"),
    ("ROCm0", "AMD Instinct MI210", "gfx90a"),
    ("ROCm1", "gfx90a:sramecc+:xnack-", "gfx90a"),
    ("HIP0", "AMD Instinct MI300X", "hip"),
    ("ROCm0", "AMD Radeon RX 7900 XTX", "hip"),
    ("Vulkan0", "AMD Instinct MI210", "gpu"),  # the policy's gfx90a row measured ROCm, not Vulkan
    ("Metal", "Apple M2", "gpu"),
])
def test_device_kind_from_ggml_name_and_description(name: str, description: str, kind: str) -> None:
    assert device_kind(name, description) == kind


@pytest.mark.parametrize("ctk, ctv", [("f16", "f16"), ("q4_0", "q4_0")])
def test_a_cpu_model_reports_the_cpu_row(model_path, ctk: str, ctv: str) -> None:
    with pl.Model(model_path, ctk=ctk, ctv=ctv, flash_attn="auto", n_ctx=128, n_threads=2, n_gpu_layers=0) as m:
        assert m.attention == decide("auto", ctk, ctv, "cpu", "CPU")
