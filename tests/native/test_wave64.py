"""Our HIP kernels executed with 64-wide wavefronts (gfx90a's), not only compiled for them.

benchmarks/hip/build_wave64.py compiles the patched ggml-cuda sources of the fused decode (patches 0013,
0015-0018: attention, split-KV reduce, the K/V stores) as HIP for gfx90a over our CPU runtime
benchmarks/hip/wave64/include/wave64.h, whose wavefronts are 64 lanes wide, and the harness runs every
fused-kernel case of tests/core/test_hybrid_attention.py (its head dims, GQA groups, cache types, kernel versions,
the K/V store) against a double-precision reference over ggml's CPU decoding of the cache. Skipped, with the
command that installs it, where no clang++ is installed. Builds are cached in build/wave64 until the sources
change: the harness at -O1 and the CUDA tile loop's at -O0, compiled at once (a compiler process each), their
cases run in a process a CPU (build_wave64.run_cases); then one -O0 harness with every mutation the lane test needs
(each mutates its own kernel, so one build serves them all), and one for each control: the tile loop's stage,
its MMAs' halves, the outputs of the sequences past one wave (patch 0055).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from support.repo_scripts import script_module

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "hip" / "build_wave64.py"

pytestmark = pytest.mark.hip


bw = script_module("build_wave64", Path("benchmarks") / "hip")


def _start_build(*extra: str) -> subprocess.Popen:
    """build_wave64.py compiling a harness in the background (one compiler process: the other CPU stays free). Its
    output, a few lines (12 KB of compiler errors at most), waits in the pipes until _finish_build reads it."""
    if bw.find_clang(None) is None:
        pytest.skip(bw.NO_CLANG)
    return subprocess.Popen([sys.executable, str(SCRIPT), *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _finish_build(proc: subprocess.Popen) -> Path:
    stdout, stderr = proc.communicate(timeout=3600)
    if proc.returncode == bw.SKIP:
        pytest.skip(stderr.strip().splitlines()[-1])
    assert proc.returncode == 0, stderr[-4000:]
    return Path(stdout.strip().splitlines()[-1])


def _build(*extra: str) -> Path:
    return _finish_build(_start_build(*extra))


def _run_cases(binary: Path, *args: str) -> dict[str, dict]:
    """The harness's cases (those --filter names in args, else all) by name, in a process a CPU."""
    _, rows, output = bw.run_cases(binary, *args)
    assert rows, output[-4000:]
    return {r["case"]: r for r in rows}


def _failed(rows: dict[str, dict]) -> list[str]:
    """The names of the cases that failed, sorted."""
    return sorted(name for name, r in rows.items() if not r["ok"])


def _failures(rows: list[dict]) -> list[str]:
    return [f"{r['case']}: {r['error']:.3e} > {r['bound']:.1e} {r['detail']}" for r in rows if not r["ok"]]


@pytest.fixture(scope="module")
def builds() -> dict[str, subprocess.Popen]:
    """The two harnesses the cases run on, the HIP path at -O1 and the CUDA tile loop at -O0 (-O0: a faster compile;
    its 150 cases run in a minute or two), compiled at once: one compiler process each."""
    return {"hip": _start_build(), "async": _start_build("--async-copies", "--opt", "0")}


@pytest.fixture(scope="module")
def results(builds: dict[str, subprocess.Popen]) -> dict[str, dict]:
    return _run_cases(_finish_build(builds["hip"]))


def test_every_fused_kernel_case_runs_under_wave64_within_its_bound(results: dict[str, dict]) -> None:
    attn = [r for name, r in results.items() if name.startswith("attn/")]
    stores = [r for name, r in results.items() if name.startswith(("store/", "store-rope/"))]
    # 6 kernel cases (q8 with 0024's tiles and 0026's V^T p in half2 on an MI210, on 4 CUs and on 1: several tiles
    # per block; a 256-cell cache, 151 used; an unrotated cache; 9 sequences on 4 CUs, past one wave) x 5 shapes x
    # 5 cache types; the K/V stores x 5 shapes x 5 types x 1 and 5 tokens, and with K's RoPE in the launch (0043) x
    # 5 shapes x 2 types x 2 RoPE kinds; 5 shapes x 6 types for OUT_PROD (0030 removed the serial-store cases, 0036
    # the F32-q ones)
    outprod = [r for name, r in results.items() if name.startswith("outprod/")]
    assert len(attn) == 150 and len(stores) == 50 + 20 and len(outprod) == 30
    failed = _failures(attn + stores + outprod)
    assert not failed, "\n".join(failed)


def test_the_harness_fails_kernels_that_assume_32_lanes(results: dict[str, dict]) -> None:
    """Small kernels, right on a 32-wide warp and wrong on a 64-wide wavefront (partial sums published by
    threadIdx.x % warpSize == 0; a broadcast with the default width), and one that reads lanes of a half-wave
    that returned (the runtime records the read), fail; their right twins pass."""
    assert results["selftest/group-sum"]["kernel_pass"] and results["selftest/broadcast"]["kernel_pass"]
    assert results["selftest/shuffle"]["kernel_pass"] and results["selftest/reconverge"]["kernel_pass"]
    for wrong in ("selftest/group-sum-lane-of-wavefront", "selftest/broadcast-default-width",
                  "selftest/shuffle-reads-returned-lanes"):
        assert not results[wrong]["kernel_pass"] and results[wrong]["error"] > 0.1, results[wrong]


# each mutation and the one case that runs its kernel (no other mutated kernel runs in that case)
MUTATED_CASES = {"softmax-lane": "attn/q8/hd128-kv8/q4_0", "store-lane": "store/hd128-kv8/q4_0/1"}


@pytest.fixture(scope="session")
def mutated_binary() -> Path:
    """One build of the harness with every mutation applied, for the session: one compile, not one per mutation."""
    mutations = [arg for m in MUTATED_CASES for arg in ("--mutate", m)]
    return _build(*mutations, "--opt", "0")  # -O0: a faster compile, and one case runs per mutation


@pytest.mark.slow
@pytest.mark.parametrize("mutation", sorted(MUTATED_CASES))
def test_a_fused_kernel_mutated_to_assume_32_lanes_fails(mutated_binary: Path, mutation: str) -> None:
    """The real kernels with one group-of-32 lane index made a wavefront lane index (the same on NVIDIA's 32-wide
    warps) must fail under wave64."""
    run = subprocess.run([str(mutated_binary), "--filter", MUTATED_CASES[mutation]], capture_output=True,
                         text=True, timeout=1800)
    # a FAIL line, or the guard page after the source rows stops the run (the store then reads past them)
    assert run.returncode != 0 and ", 0 failed" not in run.stdout, run.stdout[-3000:]


@pytest.fixture(scope="module")
def async_results(builds: dict[str, subprocess.Popen]) -> dict[str, dict]:
    """The attention cases through the CUDA path's tile loop (cp.async into two stages, what an H100 or H200 runs),
    its copies done when issued."""
    return _run_cases(_finish_build(builds["async"]), "--filter", "attn/")


def test_the_cuda_tile_loop_runs_every_attention_case_within_its_bound(async_results: dict[str, dict]) -> None:
    """The stages' indexing and the barriers of the async path (patches 0031, 0032), which no HIP build runs: the
    multi-tile cases (q8-4cu, q8-1cu) walk several tiles through both stages, run in both lane orders. Its V^T p
    for q4_0 and q8_0 at head dim 128 is patch 0053's MMAs, each emulated as PTX's fragment layouts say
    (wave64_mma.h)."""
    assert len(async_results) == 150
    failed = _failures(list(async_results.values()))
    assert not failed, "\n".join(failed)


@pytest.mark.slow
def test_the_cuda_tile_loop_copying_into_the_stage_it_reads_fails() -> None:
    """The control of the test above: the next tile copied into the stage this tile is read from must fail."""
    binary = _build("--async-copies", "--mutate", "async-stage", "--opt", "0")
    run = subprocess.run([str(binary), "--filter", "attn/q8-1cu/hd128-kv8/q4_0"], capture_output=True, text=True,
                         timeout=1800)
    assert run.returncode != 0 and "1 cases, 1 failed" in run.stdout, run.stdout[-3000:]


@pytest.mark.slow
def test_the_cuda_tile_loop_with_the_mma_halves_swapped_fails() -> None:
    """The control of the MMAs' emulation: V^T p's sums of a block's two halves written to each other's places
    must fail the q4_0 and q8_0 cases, which run the MMAs, and no other type's."""
    rows = _run_cases(_build("--async-copies", "--mutate", "mma-halves", "--opt", "0"), "--filter",
                      "attn/q8-1cu/hd128-kv8/")
    assert _failed(rows) == ["attn/q8-1cu/hd128-kv8/q4_0", "attn/q8-1cu/hd128-kv8/q8_0"], _failures(list(rows.values()))


@pytest.mark.slow
def test_the_sequences_past_one_wave_with_the_split_outputs_misplaced_fail() -> None:
    """The control of the 9-sequence case (patch 0055: 8 sequences whole in one launch, the 9th split in a second
    and its reduce): the reduce writing the split sequence's output at the first whole one's place must fail the
    shapes that take that layout (hd128-gqa4, every type) and not one whose chunks cover every sequence alike
    (hd64-gqa2 q4_0: 18 blocks, one chunk a head group, no reduce)."""
    binary = _build("--mutate", "split-dst", "--opt", "0")
    mixed = _run_cases(binary, "--filter", "attn/q8-9seq-4cu/hd128-gqa4/")
    assert _failed(mixed) == [f"attn/q8-9seq-4cu/hd128-gqa4/{t}" for t in ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0")], \
        _failures(list(mixed.values()))
    uniform = _run_cases(binary, "--filter", "attn/q8-9seq-4cu/hd64-gqa2/q4_0")["attn/q8-9seq-4cu/hd64-gqa2/q4_0"]
    assert uniform["ok"] and "one chunk per head group" in uniform["detail"], uniform
