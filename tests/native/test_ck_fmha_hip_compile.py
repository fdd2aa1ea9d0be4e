"""CK's generated fmha instances compile for gfx90a here, with the flags cmake/ck_fa.cmake uses, and yield
wave64 kernels on the matrix cores (MFMA) without register spills; the HIP glue compiles against ggml-cuda's
and CK's headers and needs nothing from CK but what the compiled dispatcher defines.

ggml-hip itself needs ROCm >= 6.1, which is not reachable here; CK's header-only ck_tile is not tied to it.
A clang with HIP support (Debian's clang++-19) over Debian's HIP 5.2.3 headers and ROCm device libraries
(`apt-get install hipcc libamdhip64-dev rocm-device-libs clang-19`) compiles the instances: two of the
16 here (one per pipeline, both head dims) plus CK's dispatcher, to keep the test to about a minute.
Skipped, with the reason, where no such toolchain is installed.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from support.ck_tree import ck_root  # noqa: F401  (fixture)
from support.repo_scripts import script_module

pytestmark = pytest.mark.hip  # (the test tier: tests/conftest.py)

REPO = Path(__file__).resolve().parents[2]
ARCH = "gfx90a"
HIP_CLANGS = ("clang++-19", "clang++-20", "clang++-18", "clang++")


def cmake_list(name: str) -> list[str]:
    """The flags of set(name ...) in cmake/ck_fa.cmake, as compiler arguments (SHELL: groups split)."""
    text = (REPO / "cmake" / "ck_fa.cmake").read_text()
    body = re.search(rf"set\({name}\s+(.*?)\)\n", text, re.S).group(1)
    body = re.sub(r"#[^\n]*", "", body)
    args = []
    for token in shlex.split(body):
        args += token[len("SHELL:"):].split() if token.startswith("SHELL:") else [token]
    return args


def toolchain() -> tuple[list[str], Path]:
    """(compiler driver with HIP paths, llvm bin dir), or skip saying what is missing."""
    root = Path(os.environ.get("ROCM_PATH", "/usr"))
    if not (root / "include" / "hip" / "hip_runtime.h").is_file():
        pytest.skip(f"no HIP headers under {root} (apt-get install libamdhip64-dev)")
    bitcode = sorted(root.glob(f"lib/*/amdgcn/bitcode/oclc_isa_version_{ARCH[3:]}.bc")) + \
        sorted(root.glob(f"lib/amdgcn/bitcode/oclc_isa_version_{ARCH[3:]}.bc"))
    if not bitcode:
        pytest.skip(f"no {ARCH} device libraries under {root} (apt-get install rocm-device-libs)")
    for name in ([os.environ["PYLLAMA90A_HIP_CLANG"]] if os.environ.get("PYLLAMA90A_HIP_CLANG") else HIP_CLANGS):
        path = shutil.which(name)
        if not path:
            continue
        version = re.search(r"clang version (\d+)", subprocess.run([path, "--version"], capture_output=True,
                                                                    text=True).stdout)
        if version and int(version.group(1)) >= 18:  # ck_tile needs a recent clang (hipcc 5.2's clang 15 fails)
            llvm_bin = Path(os.path.realpath(path)).parent
            hip_version = re.findall(r"#define HIP_VERSION_(?:MAJOR|MINOR|PATCH)\s+(\d+)",
                                     (root / "include" / "hip" / "hip_version.h").read_text())
            return [path, f"--rocm-path={root}", f"--hip-device-lib-path={bitcode[0].parent}",
                    f"--hip-version={'.'.join(hip_version)}"], llvm_bin
    pytest.skip("no clang >= 18 with HIP support (apt-get install clang-19)")


@pytest.fixture(scope="module")
def generated(ck_root: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    codegen = script_module("ck_fmha_codegen")
    return codegen.generate(ck_root, tmp_path_factory.mktemp("ck_gen"))


def compile_for_gfx90a(driver: list[str], ck_root: Path, source: Path, out: Path, device_only: bool) -> Path:
    includes = [f"-I{ck_root / 'include'}", f"-I{ck_root / 'example' / 'ck_tile' / '01_fmha'}"]
    command = [*driver, "-x", "hip", f"--offload-arch={ARCH}", "-std=c++17", "-O3", "-fPIC",
               *(["--cuda-device-only"] if device_only else []),
               *[f"-D{d}" for d in cmake_list("PYLLAMA90A_CK_DEFINITIONS")], *cmake_list("PYLLAMA90A_CK_OPTIONS"),
               *includes, "-c", str(source), "-o", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{source.name} does not compile for {ARCH}:\n{done.stderr[-3000:]}"
    return out


def gfx90a_code_object(llvm_bin: Path, bundle: Path) -> Path:
    code = bundle.with_suffix(f".{ARCH}.elf")
    subprocess.run([str(llvm_bin / "clang-offload-bundler"), "--unbundle", "--type=o", f"--input={bundle}",
                    f"--targets=hipv4-amdgcn-amd-amdhsa--{ARCH}", f"--output={code}"], check=True, timeout=300)
    return code


@pytest.mark.parametrize("pattern", ["fmha_fwd_d64_*_qr_async_vr_psskddv_nlogits_nbias_nmask_*.cpp",
                                     "fmha_fwd_d128_*_qr_vr_psskddv_nlogits_bias_mask_*.cpp"])
def test_an_instance_compiles_to_a_wave64_mfma_kernel(generated: list[Path], ck_root: Path, tmp_path: Path,
                                                      pattern: str):
    driver, llvm_bin = toolchain()
    [source] = [p for p in generated if p.match(pattern)]
    code = gfx90a_code_object(llvm_bin, compile_for_gfx90a(driver, ck_root, source, tmp_path / "k.o", True))
    notes = subprocess.run([str(llvm_bin / "llvm-readelf"), "--notes", str(code)], capture_output=True,
                           text=True, check=True).stdout
    assert re.search(r"amdhsa\.target:\s*amdgcn-amd-amdhsa--gfx90a", notes)
    kernels = re.findall(r"\.name:\s+(_ZN7ck_tile6kentry\S*FmhaFwdKernel\S*)", notes)
    assert len(kernels) == 1
    assert re.findall(r"\.wavefront_size:\s+(\d+)", notes) == ["64"]
    assert set(re.findall(r"\.[sv]gpr_spill_count:\s+(\d+)", notes)) == {"0"}
    disassembly = subprocess.run([str(llvm_bin / "llvm-objdump"), "-d", f"--mcpu={ARCH}", str(code)],
                                 capture_output=True, text=True, check=True).stdout
    assert "v_mfma_f32_32x32x8f16" in disassembly or "v_mfma_f32_32x32x8_f16" in disassembly


@pytest.fixture(scope="module")
def dispatcher_object(generated: list[Path], ck_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    driver, _ = toolchain()
    [api] = [p for p in generated if p.name == "fmha_fwd_api.cpp"]
    return compile_for_gfx90a(driver, ck_root, api, tmp_path_factory.mktemp("ck_api") / "api.o", False)


def symbols(llvm_bin: Path, obj: Path, kind: str) -> set[str]:
    """Mangled names an object defines (kind "defined") or needs ("undefined")."""
    flag = "--defined-only" if kind == "defined" else "--undefined-only"
    out = subprocess.run([str(llvm_bin / "llvm-nm"), flag, "--format=just-symbols", str(obj)],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_the_dispatcher_compiles(dispatcher_object: Path):
    _, llvm_bin = toolchain()
    assert any("fmha_fwd" in s for s in symbols(llvm_bin, dispatcher_object, "defined"))


def test_the_glue_compiles_against_ggml_cuda_and_ck_and_links_to_the_dispatcher(
        ck_root: Path, dispatcher_object: Path, tmp_path: Path):
    """src/ck_fa/ck_fa_hip.cpp against the patched ggml-cuda headers (with the compile-only shims of
    benchmarks/hip/shims standing in for what HIP 5.2 lacks) and CK's fmha_fwd.hpp: every CK function it
    calls is one the compiled dispatcher defines, under the same mangled name."""
    driver, llvm_bin = toolchain()
    shims = REPO / "benchmarks" / "hip" / "shims"
    if not (shims / "hip52_compat.h").is_file():
        pytest.skip("benchmarks/hip/shims/hip52_compat.h (the HIP 5.2 compile shims) is not in this tree")
    from support.ck_mapping import llama_cpp_source
    ggml = llama_cpp_source() / "ggml"
    ggml_hip_defines = ["GGML_USE_HIP", "GGML_BACKEND_BUILD", "GGML_BACKEND_SHARED", "GGML_SHARED", "GGML_BUILD",
                        "GGML_HIP_NO_VMM", "NDEBUG"]
    glue = tmp_path / "glue.o"
    command = [*driver, "-x", "hip", f"--offload-arch={ARCH}", "-std=gnu++17", "-O3", "-fPIC",
               *[f"-D{d}" for d in ggml_hip_defines + cmake_list("PYLLAMA90A_CK_DEFINITIONS")],
               *cmake_list("PYLLAMA90A_CK_OPTIONS"), f"-I{shims}", "-include", str(shims / "hip52_compat.h"),
               f"-I{ggml / 'include'}", f"-I{ggml / 'src'}", f"-I{ggml / 'src' / 'ggml-cuda'}",
               f"-I{ck_root / 'include'}", f"-I{ck_root / 'example' / 'ck_tile' / '01_fmha'}",
               f"-I{REPO / 'src' / 'ck_fa'}", "-c", str(REPO / "src" / "ck_fa" / "ck_fa_hip.cpp"), "-o", str(glue)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    defined = symbols(llvm_bin, glue, "defined")
    assert "_Z20pyllama90a_ck_fa_tryR25ggml_backend_cuda_contextP11ggml_tensor" in defined  # what patch 0009 calls
    needed = symbols(llvm_bin, glue, "undefined")
    ck_calls = {s for s in needed if "fmha_fwd" in s}
    assert ck_calls and ck_calls <= symbols(llvm_bin, dispatcher_object, "defined")
    assert {"pyllama90a_ck_fa_map", "pyllama90a_ck_fa_check"} <= needed  # the tested mapping decides
