#!/usr/bin/env python3
"""Compile our CUDA/HIP kernels (patches 0004, 0006, 0007, 0013/0027) for AMD MI210 (gfx90a, wavefront 64).

No AMD GPU is needed: each translation unit of the patched ggml-cuda that our patches touch is compiled
the way ggml-hip compiles it (the .cu file as HIP, GGML_USE_HIP, --offload-arch=gfx90a, the defines of
ggml/src/ggml-hip/CMakeLists.txt with its default options), one unit at a time. ggml-hip wants
ROCm/HIP >= 6.1: the real toolchain is ROCm 6.4 with clang 21 in the chroot of rocm_env.py
(`rocm_env.py run -- python3 benchmarks/hip/compile_gfx90a.py --cxx clang++-21`), where nothing is shimmed.
Debian 12's own hipcc 5.2.3 (clang 15) is kept as a second, older compiler: for HIP < 6.1 only, the
compile adds the small compile-only shims of benchmarks/hip/shims/ (see hip52_compat.h for what each one
stands in for). Each object's gfx90a code object is then unbundled and its AMDGPU metadata read: the target must
be gfx90a, every kernel must have wavefront size 64, and the kernels our patches add must be there
(register counts, spills and LDS are reported).

A unit that does not compile is reported with its first errors.

  python3 benchmarks/hip/compile_gfx90a.py [--cxx clang++-19] [--src TREE] [--out DIR] [--unit NAME ...]
                                           [--markdown FILE] [--json FILE]

Units that need clang >= 17 (fattn.cu with patch 0009, ck_fa_hip.cpp with CK's ck_tile headers) fail
with hipcc 5.2.3's clang 15; `--cxx clang++-19` (Debian's clang 19 over the same HIP 5.2.3 headers and
device libraries) compiles them.

The source tree is the patched one vendor/prepare_source.py prints (cached), unless --src is given.
Needs Debian's `hipcc libamdhip64-dev rocm-device-libs` (apt-get install -y ...); without hipcc it
exits 77 and says so. Exit code: 0 when every unit compiled and passed the checks (units listed in
--expect-fail aside), 1 otherwise, 2 on bad usage.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHIMS = Path(__file__).resolve().parent / "shims"
COMPAT = SHIMS / "hip52_compat.h"
SKIP = 77

# ggml-hip's compile of a ggml-cuda .cu file with its default options (ggml/src/ggml-hip/CMakeLists.txt,
# ggml/src/CMakeLists.txt): GGML_HIP_GRAPHS=ON, GGML_HIP_NO_VMM=ON, GGML_HIP_MMQ_MFMA=ON (so no
# GGML_HIP_NO_MMQ_MFMA), GGML_CUDA_FA=ON (so no GGML_CUDA_NO_FA), shared libraries, Release.
DEFINES = [
    "GGML_USE_HIP", "GGML_SCHED_MAX_COPIES=4", "_GNU_SOURCE", "_XOPEN_SOURCE=600",
    "GGML_BACKEND_BUILD", "GGML_BACKEND_SHARED", "GGML_SHARED", "GGML_BUILD",
    "GGML_HIP_GRAPHS", "GGML_HIP_NO_VMM", "NDEBUG",
]
# ggml/cmake/common.cmake's ggml_cuda_fattn_vec_instances (called by ggml-hip) defines these for every
# ggml-hip source: the default GGML_CUDA_FA_QUANTS and a 0/1 per K-V type combination
FA_TYPES = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "bf16", "f16"]
# the fused decode's cache types, one translation unit each since patch 0027 (pyl-attn-decode-<type>.cu)
DECODE_TYPES = ("q4_0", "q4_1", "q5_0", "q5_1", "q8_0")
FA_QUANTS = ["q4_0-q4_0", "q8_0-q8_0", "f16-f16", "bf16-bf16"]
DEFINES += [f'GGML_CUDA_FA_QUANTS="{",".join(FA_QUANTS)}"'] + [
    f"GGML_CUDA_FA_{k.upper()}_{v.upper()}={int(f'{k}-{v}' in FA_QUANTS)}" for v in FA_TYPES for k in FA_TYPES]
# what cmake/ck_fa.cmake gives the HIP glue (src/ck_fa/ck_fa_hip.cpp) and ggml-hip with -DPYLLAMA90A_CK_FA=ON
CK_DEFINES = ["CK_TILE_FMHA_FWD_FAST_EXP2=1", "CK_ENABLE_FP16", "CK_USE_XDL"]
ARCH = "gfx90a"


@dataclasses.dataclass
class Unit:
    name: str                 # file under ggml/src/ggml-cuda/
    patches: str              # which of our patches change it
    marker: str               # text that the patched file has (proves the tree is patched)
    kernels: tuple[str, ...]  # regexes over demangled kernel names: each must match >= 1 kernel
    host_strings: tuple[str, ...] = ()  # strings that must be in the host object (patched host code)
    what: str = ""
    repo_path: str | None = None  # a file of this repository instead of ggml-cuda's (skipped when absent)
    defines: tuple[str, ...] = ()   # on top of DEFINES
    ck: bool = False                # needs CK's headers (vendor/prepare_ck.py) and CK_DEFINES
    flags: tuple[str, ...] = ()


UNITS = [
    Unit("out-prod.cu", "0004", "k_out_prod_q_small",
         (r"^void k_out_prod_q_small<", r"^k_out_prod_q_reduce\(", r"^void k_out_prod_dequantize_rows<"),
         ("ggml_backend_cuda_pyl_set_test_knobs",),
         "OUT_PROD with a quantized src0: decode kernel, chunk reduction, dequantize for the cuBLAS path"),
    Unit("cpy.cu", "0004", "ggml_cpy_iq4_nl_f32_cuda",
         (r"dequantize_iq4_nl_pair",), (),
         "iq4_nl -> F32 copy"),
    Unit("mmvq.cu", "0006", "mul_mat_vec_q_short_rows",
         (r"^void mul_mat_vec_q_short_rows<",), ("ggml_cuda_pyl_test",),
         "MMVQ for rows of a few quant blocks (quantized K heads)"),
    Unit("convert.cu", "0007", "dequantize_iq4_nl_f2",
         (r"^void dequantize_block<32, 2, &\(?dequantize_iq4_nl_f2\b",), (),
         "iq4_nl in the non-contiguous F16/BF16/F32 converters (K cache -> F16 for cuBLAS)"),
    Unit("getrows.cu", "0007 (dequantize.cuh)", "dequantize_iq4_nl_f2",
         (), (),
         "unchanged, but includes dequantize.cuh, where patch 0007 adds dequantize_iq4_nl_f2"),
    Unit("ggml-cuda.cu", "0004, 0007", "ggml_cuda_mul_mat_kv_cublas",
         (), ("ggml_backend_cuda_pyl_set_test_knobs",),
         "host side: OUT_PROD/CPY supports_op and the test knobs (0004), marked quantized-K prefill through "
         "cuBLAS (0007)"),
    # the fused decode (0013; one unit per KV type since 0027, the kernels in pyl-attn-decode-impl.cuh)
    Unit("pyl-attn-decode.cu", "0013, 0027", "ggml_cuda_pyl_attn_decode_q8_0(ctx, dst)", (),
         ("ggml_cuda_pyl_attn_decode_supported",),
         "host side of the fused decode: which nodes it takes, the dispatch to the five per-type units"),
    *[Unit(f"pyl-attn-decode-{t}.cu", "0013, 0027", f"pyl_attn_decode_dim<GGML_TYPE_{t.upper()}>",
           (r"^void k_pyl_attn_decode<", r"^void k_pyl_attn_decode_reduce<"), (),
           f"fused decode attention over a {t} K and V (split-KV chunks and their reduce)")
      for t in DECODE_TYPES],
    # (not "^void ...<": a function as template argument leaves the name mangled in the code object report)
    Unit("pyl-set-rows-rot.cu", "0015", "k_pyl_set_rows_rot", (r"k_pyl_set_rows_rot",), (),
         "SET_ROWS into a quantized cache that rotates each piece of a row first (the fused decode's K/V stores)"),
    Unit("fmha_mapping.cpp", "CK FA glue (src/ck_fa)", "fmha_fwd", (), (),
         "the ggml -> CK fmha_fwd argument mapping, host code, compiled as HIP with GGML_USE_HIP",
         repo_path="src/ck_fa/fmha_mapping.cpp"),
    Unit("fattn.cu", "0009", "pyllama90a_ck_fa_try", (), ("pyllama90a_ck_fa_try",),
         "FLASH_ATTN_EXT asks CK first (patch 0009), compiled as with -DPYLLAMA90A_CK_FA=ON",
         defines=("PYLLAMA90A_CK_FA",)),
    Unit("ck_fa_hip.cpp", "0009 glue (src/ck_fa)", "fmha_fwd", (), ("pyllama90a_ck_fa_try",),
         "the HIP glue: stages F16 operands, calls CK's fmha_fwd (needs CK's ck_tile headers)",
         repo_path="src/ck_fa/ck_fa_hip.cpp", defines=("PYLLAMA90A_CK_FA",), ck=True,
         # ck_tile's pk_fp4.hpp subscripts ext_vector types in constexpr functions, which clang < 20
         # rejects as -Winvalid-constexpr (an error by default); they are never constant-evaluated here
         flags=("-Wno-invalid-constexpr",)),
]


def ck_dir() -> Path:
    """CK's source as cmake/ck_fa.cmake gets it (vendor/prepare_ck.py prints its path)."""
    out = subprocess.run([sys.executable, str(ROOT / "vendor" / "prepare_ck.py")],
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0 or not out.stdout.strip():
        raise RuntimeError("vendor/prepare_ck.py failed:\n" + out.stderr[-2000:])
    return Path(out.stdout.strip().splitlines()[-1])

# ---------------------------------------------------------------------------------------------------------

def log(msg: str) -> None:
    print(f"compile_gfx90a: {msg}", file=sys.stderr, flush=True)


def find_hipcc() -> str | None:
    return os.environ.get("HIPCC") or shutil.which("hipcc")


def hip_env() -> dict:
    # Debian's hipcc picks nvcc when it finds CUDA; the AMD platform is what we want
    return {**os.environ, "HIP_PLATFORM": "amd", "HIP_COMPILER": "clang"}


def _versions(text: str) -> dict:
    clang = re.search(r"clang version (\d+)\.(\S+)", text)
    inst = re.search(r"InstalledDir: (\S+)", text)
    return {
        "clang_version": f"{clang.group(1)}.{clang.group(2)}" if clang else "?",
        "clang_major": int(clang.group(1)) if clang else None,
        "clang_dir": inst.group(1) if inst else None,
    }


def toolchain(hipcc: str) -> dict:
    """hipcc (Debian's HIP 5.2.3 driver over its clang), on the AMD platform."""
    out = subprocess.run([hipcc, "--version"], capture_output=True, text=True, env=hip_env(), timeout=120)
    text = out.stdout + out.stderr
    hip = re.search(r"HIP version: (\S+)", text)
    return {"kind": "hipcc", "driver": [hipcc], "name": f"hipcc {hipcc}",
            "hip_version": hip.group(1) if hip else "?", **_versions(text)}


def rocm_root() -> Path:
    return Path(os.environ.get("ROCM_PATH") or ("/opt/rocm" if Path("/opt/rocm").is_dir() else "/usr"))


def clang_toolchain(cxx: str) -> dict:
    """A clang++ driving HIP itself (--offload-arch) over the installed HIP headers and device libraries:
    e.g. Debian's clang++-19 with Debian's HIP 5.2.3 headers, a newer compiler front end than hipcc's."""
    path = shutil.which(cxx) or cxx
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=120)
    root = rocm_root()
    ver_h = root / "include" / "hip" / "hip_version.h"
    vals = dict(re.findall(r"#define HIP_VERSION_(MAJOR|MINOR|PATCH)\s+(\d+)", ver_h.read_text())) \
        if ver_h.is_file() else {}
    hip_version = f"{vals.get('MAJOR', '?')}.{vals.get('MINOR', '?')}.{vals.get('PATCH', '?')}"
    bitcode = [Path(p).parent for pat in ("lib/*/amdgcn/bitcode", "lib/amdgcn/bitcode", "amdgcn/bitcode",
                                         "lib/llvm-*/lib/clang/*/amdgcn/bitcode")  # Debian sid: rocm-device-libs-21
               for p in map(str, root.glob(pat + f"/oclc_isa_version_{ARCH[3:]}.bc"))]
    if not bitcode:
        raise RuntimeError(f"no {ARCH} device libraries (oclc_isa_version_{ARCH[3:]}.bc) under {root}")
    driver = [path, f"--rocm-path={root}", f"--hip-device-lib-path={bitcode[0]}", f"--hip-version={hip_version}"]
    return {"kind": "clang", "driver": driver, "name": f"{Path(path).name} (HIP {hip_version} headers)",
            "hip_version": hip_version, **_versions(out.stdout + out.stderr)}


def find_tool(name: str, tc: dict) -> str:
    cands = []
    if tc.get("clang_major"):
        cands += [f"/usr/lib/llvm-{tc['clang_major']}/bin/{name}", f"{name}-{tc['clang_major']}"]
    if tc.get("clang_dir"):
        cands.append(str(Path(tc["clang_dir"]) / name))
    cands.append(name)
    for c in cands:
        p = shutil.which(c) if "/" not in c else (c if Path(c).is_file() else None)
        if p:
            return p
    raise RuntimeError(f"{name} not found (tried {', '.join(cands)})")


def prepared_tree() -> Path:
    out = subprocess.run([sys.executable, str(ROOT / "vendor" / "prepare_source.py")],
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError("vendor/prepare_source.py failed:\n" + out.stderr[-2000:])
    return Path(out.stdout.strip().splitlines()[-1])


def compile_cmd(tc: dict, src: Path, obj: Path, tree: Path, cuda_dir: Path, unit: Unit | None = None,
                ck: Path | None = None) -> list[str]:
    ggml = tree / "ggml"
    extra: list[str] = []
    if unit is not None:
        extra += [f"-D{d}" for d in unit.defines] + list(unit.flags)
        if unit.ck:
            extra += [f"-D{d}" for d in CK_DEFINES]
            extra += [f"-I{ck / 'include'}", f"-I{ck / 'example' / 'ck_tile' / '01_fmha'}"]
    return [*tc["driver"], "-x", "hip", f"--offload-arch={ARCH}", "-std=gnu++17", "-O3", "-fPIC",
            *[f"-D{d}" for d in DEFINES], *extra,
            *shim_flags(tc),
            f"-I{ggml / 'include'}", f"-I{ggml / 'src'}", f"-I{cuda_dir}",
            "-c", str(src), "-o", str(obj)]


def shim_flags(tc: dict) -> list[str]:
    """The compile-only shims for HIP < 6.1 (Debian 12's 5.2.3); none for a real ROCm >= 6.1 toolchain."""
    version = tuple(int(x) for x in re.findall(r"\d+", tc.get("hip_version", ""))[:2]) or (0, 0)
    return [f"-I{SHIMS}", "-include", str(COMPAT)] if version < (6, 1) else []


def first_errors(text: str, n: int = 6) -> list[str]:
    errs = [line.strip() for line in text.splitlines() if re.search(r"\berror\b", line)]
    return errs[:n]


def kernel_metadata(obj: Path, work: Path, tc: dict) -> dict:
    """Unbundle the gfx90a code object of a hipcc object file and read its AMDGPU metadata."""
    objcopy = find_tool("llvm-objcopy", tc)
    bundler = find_tool("clang-offload-bundler", tc)
    readelf = find_tool("llvm-readelf", tc)
    fatbin = work / (obj.stem + ".hip_fatbin")
    code = work / (obj.stem + f".{ARCH}.co")
    sections = subprocess.run([readelf, "-S", "-W", str(obj)], check=True, capture_output=True, text=True,
                              timeout=300).stdout
    if ".hip_fatbin" not in sections:   # host code only: no device code object in this unit
        return {"bundle_targets": [], "target": None, "kernels": []}
    subprocess.run([objcopy, f"--dump-section=.hip_fatbin={fatbin}", str(obj), str(work / (obj.stem + ".discard.o"))],
                   check=True, capture_output=True, timeout=300)
    listed = subprocess.run([bundler, "--list", "--type=o", f"--input={fatbin}"],
                            check=True, capture_output=True, text=True, timeout=300).stdout.split()
    target = next((t for t in listed if t.endswith(f"--{ARCH}")), None)
    if target is None:
        return {"bundle_targets": listed, "target": None, "kernels": []}
    subprocess.run([bundler, "--unbundle", "--type=o", f"--input={fatbin}", f"--targets={target}",
                    f"--output={code}"], check=True, capture_output=True, timeout=300)
    notes = subprocess.run([readelf, "--notes", str(code)], check=True, capture_output=True, text=True,
                           timeout=300).stdout
    hsa_target = re.search(r"amdhsa\.target:\s*(\S+)", notes)
    kernels: list[dict] = []
    cur: dict | None = None
    for line in notes.splitlines():
        if re.match(r"^  - \.", line):            # a new entry of amdhsa.kernels
            cur = {}
            kernels.append(cur)
            line = "    " + line[4:]
        m = re.match(r"^    \.([a-z_]+):\s*(\S+)\s*$", line)   # kernel-level keys (args are deeper)
        if cur is not None and m:
            cur[m.group(1)] = m.group(2)
        if line.startswith("amdhsa.target"):
            cur = None
    names = [k.get("name", "") for k in kernels]
    demangled = demangle(names)
    for k, d in zip(kernels, demangled, strict=True):
        k["demangled"] = d
    return {"bundle_targets": listed, "target": hsa_target.group(1) if hsa_target else None,
            "kernels": kernels}


def demangle(names: list[str]) -> list[str]:
    filt = shutil.which("c++filt") or shutil.which("llvm-cxxfilt")
    if not filt or not names:
        return names
    out = subprocess.run([filt], input="\n".join(names) + "\n", capture_output=True, text=True, timeout=120)
    lines = out.stdout.splitlines()
    return lines if len(lines) == len(names) else names


def short_name(demangled: str) -> str:
    """A demangled kernel name without its parameter list and template arguments' details."""
    depth, cut = 0, len(demangled)
    for i in range(len(demangled) - 1, -1, -1):   # the parameter list is the last balanced (...)
        c = demangled[i]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
            if depth == 0:
                cut = i
                break
    name = demangled[:cut]
    return re.sub(r"^void ", "", name)


def summarize(kernels: list[dict]) -> dict:
    def ints(key):
        return [int(k.get(key, 0)) for k in kernels]
    if not kernels:
        return {"count": 0}
    return {
        "count": len(kernels),
        "wavefront_sizes": sorted({int(k.get("wavefront_size", 0)) for k in kernels}),
        "max_vgpr": max(ints("vgpr_count")), "max_agpr": max(ints("agpr_count")),
        "max_sgpr": max(ints("sgpr_count")),
        "spills": sum(ints("vgpr_spill_count")) + sum(ints("sgpr_spill_count")),
        "vgpr_spills": sum(ints("vgpr_spill_count")), "sgpr_spills": sum(ints("sgpr_spill_count")),
        "max_scratch_bytes": max(ints("private_segment_fixed_size")),
        "max_lds_bytes": max(ints("group_segment_fixed_size")),
    }


def run_unit(unit: Unit, tc: dict, tree: Path, out: Path) -> dict:
    cuda_dir = tree / "ggml" / "src" / "ggml-cuda"
    src = ROOT / unit.repo_path if unit.repo_path else cuda_dir / unit.name
    res: dict = {"unit": unit.name, "patches": unit.patches, "what": unit.what, "problems": []}
    if unit.repo_path and not src.is_file():
        res.update(compiled=None, absent=True, errors=[f"{unit.repo_path} does not exist in this checkout"])
        log(f"{unit.name}: absent, skipped")
        return res
    text = src.read_text(errors="replace")
    if not unit.repo_path:
        text += (cuda_dir / "dequantize.cuh").read_text(errors="replace")
    if unit.marker not in text:
        res["problems"].append(f"{unit.name} is not patched (no '{unit.marker}'): wrong tree?")
    obj = out / (unit.name + ".o")
    ck = None
    if unit.ck:
        try:
            ck = ck_dir()
        except RuntimeError as e:
            res.update(compiled=None, absent=True, errors=[f"CK source not available: {e}"])
            log(f"{unit.name}: CK source not available, skipped")
            return res
    cmd = compile_cmd(tc, src, obj, tree, cuda_dir, unit, ck)
    res["command"] = " ".join(["HIP_PLATFORM=amd", *cmd])
    log(f"compiling {unit.name} ...")
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=hip_env(), timeout=3600)
    res["seconds"] = round(time.monotonic() - t0, 1)
    res["rc"] = proc.returncode
    (out / (obj.stem + ".log")).write_text(proc.stdout + proc.stderr)
    res["warnings"] = len(re.findall(r"\bwarning:", proc.stderr))
    if proc.returncode != 0 or not obj.is_file():
        res["compiled"] = False
        errs = first_errors(proc.stderr) or proc.stderr.strip().splitlines()[-6:]
        res["errors"] = [e.replace(str(cuda_dir) + "/", "").replace(str(tree) + "/", "")
                         .replace(str(ck) + "/" if ck else "\0", "CK/").replace(str(ROOT) + "/", "") for e in errs]
        res["problems"].append("did not compile")
        log(f"{unit.name}: FAILED ({res['seconds']} s): {res['errors'][:1]}")
        return res
    res["compiled"] = True
    meta = kernel_metadata(obj, out, tc)
    res["bundle_targets"] = meta["bundle_targets"]
    res["target"] = meta["target"]
    host_only = not meta["bundle_targets"] and not unit.kernels
    if host_only:
        res["target"] = "(host code only)"
    elif not (meta["target"] or "").endswith(ARCH):
        res["problems"].append(f"code object target is {meta['target']}, not {ARCH}")
    kernels = meta["kernels"]
    res["all_kernels"] = summarize(kernels)
    if kernels and res["all_kernels"]["wavefront_sizes"] != [64]:
        res["problems"].append(f"wavefront sizes {res['all_kernels']['wavefront_sizes']}, expected [64]")
    ours: list[dict] = []
    res["expected"] = {}
    for pat in unit.kernels:
        hits = [k for k in kernels if re.search(pat, k["demangled"])]
        res["expected"][pat] = len(hits)
        if not hits:
            res["problems"].append(f"no kernel matches {pat!r}")
        ours += [k for k in hits if k not in ours]
    res["our_kernels"] = summarize(ours)
    bases: dict[str, int] = {}
    for k in ours:   # kernel -> number of template instances
        base = re.sub(r"<.*>$", "", short_name(k["demangled"]))
        bases[base] = bases.get(base, 0) + 1
    res["our_kernels_by_name"] = bases
    if unit.host_strings:
        data = obj.read_bytes()
        for s in unit.host_strings:
            if s.encode() not in data:
                res["problems"].append(f"host object lacks {s!r}")
    problems = "; PROBLEMS: " + "; ".join(res["problems"]) if res["problems"] else ""
    log(f"{unit.name}: compiled in {res['seconds']} s, {res['all_kernels'].get('count', 0)} kernels "
        f"({res['our_kernels'].get('count', 0)} ours){problems}")
    return res


def plain_kernel_check(tc: dict, out: Path) -> dict:
    """The toolchain itself: a plain HIP kernel with a width-64 shuffle compiled for gfx90a."""
    src = out / "plain.hip"
    src.write_text(
        "#include <hip/hip_runtime.h>\n"
        "__global__ void plain(float * x) {\n"
        "    const float v = x[threadIdx.x];\n"
        "    x[threadIdx.x] = v + __shfl_xor(v, 32, 64) + (float) warpSize;\n"
        "}\n")
    obj = out / "plain.o"
    cmd = [*tc["driver"], "-x", "hip", f"--offload-arch={ARCH}", "-O3", "-c", str(src), "-o", str(obj)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=hip_env(), timeout=600)
    res = {"unit": "plain HIP kernel", "rc": proc.returncode, "command": " ".join(["HIP_PLATFORM=amd", *cmd]),
           "problems": []}
    if proc.returncode != 0:
        res["problems"].append("plain HIP kernel did not compile: " + "; ".join(first_errors(proc.stderr)))
        return res
    meta = kernel_metadata(obj, out, tc)
    res["target"] = meta["target"]
    res["all_kernels"] = summarize(meta["kernels"])
    if not (meta["target"] or "").endswith(ARCH) or res["all_kernels"].get("wavefront_sizes") != [64]:
        res["problems"].append(f"unexpected code object: target {meta['target']}, {res['all_kernels']}")
    return res


def markdown(report: dict) -> str:
    tc = report["toolchain"]
    lines = [
        f"Toolchain: {tc['name']} (HIP {tc['hip_version']}, clang {tc['clang_version']}), `--offload-arch={ARCH}`; "
        f"tree `{report['tree']}`.",
        "",
        "| unit | patches | compiled | s | kernels (ours) | wavefront | ours: max VGPR/AGPR/SGPR | ours: spills "
        "| ours: static LDS B | problems |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["units"]:
        if r.get("absent"):
            lines.append(f"| {r['unit']} | {r['patches']} | absent | - | - | - | - | - | - | - |")
            continue
        if r.get("compiled"):
            a, o = r["all_kernels"], r["our_kernels"]
            ours = f"{a.get('count', 0)} ({o.get('count', 0)})"
            wave = ",".join(map(str, a.get("wavefront_sizes", []))) or "-"
            regs = (f"{o['max_vgpr']}/{o['max_agpr']}/{o['max_sgpr']}" if o.get("count") else "-")
            spills = str(o.get("spills", "-")) if o.get("count") else "-"
            lds = str(o.get("max_lds_bytes", "-")) if o.get("count") else "-"
            comp = "yes"
        else:
            ours = wave = regs = spills = lds = "-"
            comp = "**no**: " + (r.get("errors") or ["?"])[0].replace("|", "\\|")
        probs = "; ".join(r["problems"]).replace("|", "\\|") or "none"
        lines.append(f"| {r['unit']} | {r['patches']} | {comp} | {r.get('seconds', '-')} | {ours} | {wave} | "
                     f"{regs} | {spills} | {lds} | {probs} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cxx", help="compile with this clang++ in HIP mode (e.g. clang++-19) over the installed "
                                  "HIP headers/device libraries instead of hipcc")
    ap.add_argument("--src", type=Path, help="patched llama.cpp tree (default: vendor/prepare_source.py's)")
    ap.add_argument("--out", type=Path, help="work directory for objects and logs (default: a temp dir)")
    ap.add_argument("--unit", action="append", default=[],
                    help="compile only these units (file names under ggml/src/ggml-cuda/); repeatable")
    ap.add_argument("--expect-fail", action="append", default=[],
                    help="units whose failure does not fail the exit code (known, reported defects)")
    ap.add_argument("--markdown", type=Path, help="write the results table here")
    ap.add_argument("--json", type=Path, help="write the full results here")
    ap.add_argument("--jobs", type=int, default=len(os.sched_getaffinity(0)),
                    help="units compiled at once (default: this process's CPUs; each compile is one process)")
    args = ap.parse_args(argv)

    if args.cxx:
        if not shutil.which(args.cxx):
            log(f"SKIP: {args.cxx} not found")
            return SKIP
        try:
            tc = clang_toolchain(args.cxx)
        except RuntimeError as e:
            log(f"SKIP: {e}. Install Debian's HIP toolchain: apt-get install -y hipcc libamdhip64-dev rocm-device-libs")
            return SKIP
    else:
        hipcc = find_hipcc()
        if not hipcc:
            log("SKIP: hipcc not found. Install Debian's HIP toolchain: "
                "apt-get install -y hipcc libamdhip64-dev rocm-device-libs")
            return SKIP
        tc = toolchain(hipcc)
    log(f"{tc['name']}: HIP {tc['hip_version']}, clang {tc['clang_version']}")

    names = {u.name for u in UNITS}
    bad = [u for u in args.unit + args.expect_fail if u not in names]
    if bad:
        log(f"unknown unit(s) {bad}; known: {sorted(names)}")
        return 2
    units = [u for u in UNITS if not args.unit or u.name in args.unit]

    tree = (args.src or prepared_tree()).resolve()
    out = args.out or Path(tempfile.mkdtemp(prefix="pyllama90a-gfx90a-"))
    out.mkdir(parents=True, exist_ok=True)
    log(f"tree {tree}, work dir {out}")

    report: dict = {"toolchain": tc, "tree": str(tree), "arch": ARCH, "units": []}
    plain = plain_kernel_check(tc, out)
    report["plain"] = plain
    if plain["problems"]:
        log("toolchain check failed: " + "; ".join(plain["problems"]))
        report["units"].append({**plain, "patches": "-", "compiled": False, "errors": plain["problems"]})
    else:
        log(f"plain HIP kernel: {plain['target']}, wavefront {plain['all_kernels']['wavefront_sizes']}")

    failed = bool(plain["problems"])
    # each unit is one single-threaded compiler process: as many at once as there are CPUs (2 on CI: the units'
    # 156 s ran one after the other, 2026-12-07, AMD EPYC, 2 vCPUs); the report keeps the units' order
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda unit: run_unit(unit, tc, tree, out), units))
    for unit, res in zip(units, results, strict=True):
        report["units"].append(res)
        if res["problems"] and unit.name not in args.expect_fail:
            failed = True

    md = markdown(report)
    print(md)
    if args.markdown:
        args.markdown.write_text(md)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
