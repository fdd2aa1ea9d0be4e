"""Our CUDA/HIP kernels (patches 0004, 0006, 0007) and the CK glue compile for AMD MI210 (gfx90a, wave 64).

Runs benchmarks/hip/compile_gfx90a.py per translation unit with Debian's hipcc 5.2.3 (plus the
compile-only shims of benchmarks/hip/shims/) and, where installed, with a newer clang++ (17+, e.g.
Debian's clang++-19) driving HIP over the same HIP headers and device libraries. Skips, saying why,
when hipcc is not installed (`apt-get install -y hipcc libamdhip64-dev rocm-device-libs`) or the
patched llama.cpp source cannot be prepared. Slow (mmvq.cu takes about a minute on 2 cores per
toolchain): the units run one at a time.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from support.repo_scripts import script_module

NO_HIPCC = ("hipcc not installed (apt-get install -y hipcc libamdhip64-dev rocm-device-libs): "
            "the gfx90a compile of our HIP kernels cannot run here")

pytestmark = [pytest.mark.hip, pytest.mark.skipif(shutil.which("hipcc") is None, reason=NO_HIPCC)]


cg = script_module("compile_gfx90a", Path("benchmarks") / "hip")

NEW_CLANG = next((c for c in ("clang++-21", "clang++-20", "clang++-19", "clang++-18", "clang++-17")
                  if shutil.which(c)), None)
TOOLCHAINS = ["hipcc", pytest.param("clang", marks=pytest.mark.skipif(
    NEW_CLANG is None, reason="no clang++ >= 17 installed (e.g. apt-get install -y clang-19): "
                              "only hipcc 5.2.3's clang 15 is tried"))]


@pytest.fixture(scope="module")
def tree():
    try:
        return cg.prepared_tree()
    except RuntimeError as e:
        pytest.skip(f"patched llama.cpp source not available: {e}")


@pytest.fixture(scope="module", params=TOOLCHAINS)
def env(request, tree, tmp_path_factory):
    tc = cg.toolchain(cg.find_hipcc()) if request.param == "hipcc" else cg.clang_toolchain(NEW_CLANG)
    return {"tree": tree, "tc": tc, "out": tmp_path_factory.mktemp(f"gfx90a-{request.param}")}


def _unit(name: str):
    return next(u for u in cg.UNITS if u.name == name)


def test_plain_hip_kernel_is_gfx90a_wave64(env) -> None:
    res = cg.plain_kernel_check(env["tc"], env["out"])
    assert res["rc"] == 0, res
    assert res["target"].endswith("gfx90a")
    assert res["all_kernels"]["count"] == 1 and res["all_kernels"]["wavefront_sizes"] == [64]


@pytest.mark.parametrize("name", [
    "out-prod.cu",
    "cpy.cu",
    "mmvq.cu",
    "convert.cu",
    "getrows.cu",
    "ggml-cuda.cu",
])
def test_unit_compiles_for_gfx90a(env, name: str) -> None:
    res = cg.run_unit(_unit(name), env["tc"], env["tree"], env["out"])
    assert res["compiled"], res.get("errors")
    assert res["problems"] == [], res["problems"]
    assert res["target"].endswith("gfx90a")
    assert res["all_kernels"]["count"] >= 1 and res["all_kernels"]["wavefront_sizes"] == [64]
    # every kernel the patch adds is in the code object (the unit lists them as regexes)
    assert all(n >= 1 for n in res["expected"].values()), res["expected"]
    if name == "mmvq.cu":
        # 6 KV types x ncols_dst 1..8 x lanes 4/8/16
        assert res["our_kernels_by_name"].get("mul_mat_vec_q_short_rows") == 6 * 8 * 3, res["our_kernels_by_name"]
    if name == "out-prod.cu":
        # 6 KV types x ncols 1/2/4/8 + 6 dequantize_rows + 1 reduce
        assert res["our_kernels_by_name"] == {"k_out_prod_q_small": 24, "k_out_prod_dequantize_rows": 6,
                                              "k_out_prod_q_reduce": 1}, res["our_kernels_by_name"]
        assert res["our_kernels"]["spills"] == 0
    if name == "convert.cu":
        # patch 0007's dequantize_iq4_nl_f2 in the F16, BF16 and F32 non-contiguous converters
        assert res["expected"][_unit(name).kernels[0]] == 3, res["expected"]


def test_ck_glue_compiles_as_hip(env) -> None:
    res = cg.run_unit(_unit("fmha_mapping.cpp"), env["tc"], env["tree"], env["out"])
    if res.get("absent"):
        pytest.skip(res["errors"][0])
    assert res["compiled"], res.get("errors")
    assert res["problems"] == [], res["problems"]


# fattn.cu (patch 0009) and the CK glue need clang >= 17: clang 15 rejects upstream's non-dependent
# static_assert(warp_size == 32) in a discarded `if constexpr` branch (fattn-mma-f16.cuh) and lacks
# builtins ck_tile uses (__builtin_amdgcn_exp2f); hipcc 5.2.3 must fail on exactly those
CLANG15_FAILURES = {
    "fattn.cu": ("static assertion failed due to requirement 'warp_size == 32'",),
    "ck_fa_hip.cpp": ("__builtin_amdgcn_exp2f", "static assertion failed"),
}


@pytest.mark.parametrize("name", sorted(CLANG15_FAILURES))
def test_ck_dispatch_units(env, name: str) -> None:
    res = cg.run_unit(_unit(name), env["tc"], env["tree"], env["out"])
    if res.get("absent"):
        pytest.skip(res["errors"][0])
    if env["tc"]["clang_major"] < 17:
        assert not res["compiled"], f"{name} compiles with clang {env['tc']['clang_version']}: update this test"
        assert res["errors"] and all(any(k in e for k in CLANG15_FAILURES[name]) or " generated when compiling" in e
                                     for e in res["errors"]), res["errors"]
    else:
        assert res["compiled"], res.get("errors")
        assert res["problems"] == [], res["problems"]  # includes: the object references pyllama90a_ck_fa_try
