#!/usr/bin/env python3
"""Where the fused decode's instructions go, without a GPU: NVIDIA SASS of one instance of k_pyl_attn_decode,
counted by phase of its tile loop (a sibling of compile_gfx90a.py: the patched kernels compiled off-device).

    python3 benchmarks/hip/sass_phases.py --nvdisasm PATH [--src TREE] [--type q4_0] [--dim 128] [--ncols 4]

The type's translation unit of the patched tree (vendor/prepare_source.py's, or --src), pyl-attn-decode-<type>.cu
(patch 0027), is copied with the header it includes, pyl-attn-decode-impl.cuh (the kernel, its launch and dispatch),
whose dispatch is narrowed to one (head dim, query heads per KV head), so that only that shape's instances are
compiled (nvcc -cubin -arch=sm_90a -lineinfo with the build's -use_fast_math, a few seconds); nvdisasm -gi maps
every instruction to its outermost source line in the kernel (inlined helpers count where they are called), and each
phase is the run of kernel lines between two markers of the header. For every instance: registers and spills
(ptxas), the static instruction count of each phase, and each loop inside a tile (a backward branch): the line and
phase of its branch, its body. Executed counts follow from the trip counts of the launch shape (see the results
README that quotes them).
With --stalls, ncu's source page of one launch of an instance (gpu_decode.sh's ncu_source stage: every SASS
instruction with its PC samples by stall reason) is summed by the same phases: which phase a tile's warps wait in, and
on what. Its instructions are matched to this compile's by offset and opcode, so the two must be the same code (same
nvcc, same source, same flags; -lineinfo leaves the code as it is).
nvdisasm is not in nvcc 13.0's install here: the pip package nvidia-cuda-nvdisasm ships it. cuBLAS's header,
which ggml-cuda's common header includes and the kernels never use, is replaced by a stub of the few names.
"""
from __future__ import annotations

import argparse
import csv
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compile_gfx90a  # a sibling script: the prepared source tree

CUDA_DIR = "ggml/src/ggml-cuda"
HEADER = "pyl-attn-decode-impl.cuh"  # the kernel and its dispatch by head dim and query heads (patch 0027)
UNIT = "pyl-attn-decode-{type}.cu"    # one KV type's instances, through the header
TYPES = {t: f"GGML_TYPE_{t.upper()}" for t in compile_gfx90a.DECODE_TYPES}
# the phases of a tile, each from the first source line holding one of its markers to the next phase's (K^T q: the
# tensor cores' branch, candidate 0037, comes first where it exists)
PHASES = (("before the tiles", "static __global__ void k_pyl_attn_decode("),
          ("K/V copies", "for (int kv0 = c_begin; kv0 < c_end; kv0 += T"),
          ("K^T q", "// K^T q on the tensor cores:|// K^T q: a thread per (cell, KV head)"),
          ("softmax", "__syncthreads();  // scores written"),
          ("V^T p", "// V^T p on the tensor cores:|const float alpha = alpha_s[vh*ncols + g];"),
          ("epilogue", "// the R cell subsets' sums into q_s"))
TILE_PHASES = ("K/V copies", "K^T q", "softmax", "V^T p")
CUBLAS_STUB = """#pragma once
#include <cuda_runtime.h>
typedef struct cublasContext * cublasHandle_t;
typedef enum { CUBLAS_STATUS_SUCCESS = 0 } cublasStatus_t;
typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 } cublasOperation_t;
typedef enum { CUBLAS_COMPUTE_16F = 64, CUBLAS_COMPUTE_32F = 68,
               CUBLAS_COMPUTE_32F_FAST_TF32 = 77 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1, CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99 } cublasGemmAlgo_t;
typedef enum { CUBLAS_DEFAULT_MATH = 0, CUBLAS_TENSOR_OP_MATH = 1, CUBLAS_TF32_TENSOR_OP_MATH = 3 } cublasMath_t;
static inline const char * cublasGetStatusString(cublasStatus_t) { return ""; }
static inline cublasStatus_t cublasCreate(cublasHandle_t *) { return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasSetStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
static inline cublasStatus_t cublasDestroy(cublasHandle_t) { return CUBLAS_STATUS_SUCCESS; }
"""


def narrowed(source: str, dim: int, ncols: int) -> str:
    """The header with each dispatch switch reduced to the one case asked for (the type is its unit's)."""
    cases = ((r"(switch \(pyl_dec_ncols\([^)]*\)[^{]*\{)(.*?)(\n    \})",
              f"default: pyl_attn_decode_launch<type, D, {ncols}>(ctx, dst); break;"),
             (r"(switch \(dst->src\[1\]->ne\[0\]\) \{)(.*?)(\n        default:)",
              f"case {dim}: pyl_attn_decode_cols<type, {dim}>(ctx, dst); break;"))
    for pattern, case in cases:
        source, n = re.subn(pattern, lambda m, case=case: f"{m[1]}\n        {case}{m[3]}", source, count=1, flags=re.S)
        if n != 1:
            raise SystemExit(f"sass_phases: a dispatch switch of {HEADER} was not found: {pattern}")
    return source


def phase_starts(source: str) -> list[tuple[int, str]]:
    lines = source.splitlines()
    starts = []
    for name, marker in PHASES:
        hits = [i + 1 for i, line in enumerate(lines) if any(m in line for m in marker.split("|"))]
        if not hits:
            raise SystemExit(f"sass_phases: marker of {name!r} not found: {marker}")
        starts.append((hits[0], name))
    return starts


def phase_of(line: int, starts: list[tuple[int, str]]) -> str:
    name = "helpers"
    for first, phase in starts:
        if line >= first:
            name = phase
    return name


def instructions(sass: str, function: str) -> list[tuple[str, str, int]]:
    """(label or "", instruction, outermost source line) of one function of nvdisasm -gi's listing, in order."""
    out: list[tuple[str, str, int]] = []
    inside, line, label = False, 0, ""
    for text in sass.splitlines():
        if text.startswith(".text."):
            inside = text[len(".text."):].rstrip(":") == function
            continue
        if not inside:
            continue
        if text.strip().startswith("//##"):
            line = int(re.findall(r"line (\d+)", text)[-1])
        elif m := re.match(r"^(\.L_x_\d+):", text.strip()):
            label = m[1]
        elif m := re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;", text):
            out.append((label, m[1], line))
            label = ""
    return out


def mangled_of(csv_function: str) -> str:
    """The mangled name's prefix of the instance ncu's source page names, e.g.
    "void k_pyl_attn_decode<(ggml_type)2, (int)128, (int)4, (bool)0>(...)"."""
    m = re.search(r"k_pyl_attn_decode<\(ggml_type\)(\d+), \(int\)(\d+), \(int\)(\d+), \(bool\)(\d)>", csv_function)
    if not m:
        raise SystemExit(f"sass_phases: not an instance of k_pyl_attn_decode: {csv_function[:120]}")
    return f"_Z17k_pyl_attn_decodeIL9ggml_type{m[1]}ELi{m[2]}ELi{m[3]}ELb{m[4]}E"


def opcode(text: str) -> str:
    return re.sub(r"^@!?U?P\w+\s+", "", text.strip()).split()[0]


def stall_table(page: Path, sass: str, starts: list[tuple[int, str]]) -> str:
    """ncu's source page (CSV) of one instance, summed by phase: samples, their share, the instructions the warps
    executed, and the three stall reasons with the most samples."""
    rows = list(csv.reader(page.open(newline="")))
    function = next(r[1] for r in rows if r[:1] == ["Function Name"])
    header = next(r for r in rows if r[:3] == ["Line No", "Source", "Address"])
    col = {name: i for i, name in enumerate(header)}
    reasons = [n for n in header if n.startswith("stall_") and not n.endswith("(Not Issued)")]
    by_address = {int(r[2], 16): r for r in rows if len(r) > 3 and r[2].startswith("0x")}  # inlined lines repeat
    prefix = mangled_of(function)
    names = [f for f in re.findall(r"^\.text\.(\w+):", sass, flags=re.M) if f.startswith(prefix)]
    if len(names) != 1:
        raise SystemExit(f"sass_phases: {len(names)} compiled functions match {prefix}: narrow --dim/--ncols/--type")
    code = instructions(sass, names[0])
    base = min(by_address)
    if len(by_address) != len(code):
        raise SystemExit(f"sass_phases: the page has {len(by_address)} instructions, this compile {len(code)}: "
                         "not the same code")
    totals: dict[str, Counter] = {}
    for address, row in by_address.items():
        i = (address - base) // 16
        if opcode(row[3]) != opcode(code[i][1]):
            raise SystemExit(f"sass_phases: instruction {i} is {row[3].strip()} on the page, {code[i][1]} here")
        t = totals.setdefault(phase_of(code[i][2], starts), Counter())
        t["samples"] += int(row[col["Warp Stall Sampling (All Samples)"]] or 0)
        t["executed"] += int(row[col["Instructions Executed"]] or 0)
        for reason in reasons:
            t[reason] += int(row[col[reason]] or 0)
    everything = sum(t["samples"] for t in totals.values()) or 1
    out = [f"{function.split('>(')[0]}>: {everything} samples",
           "| phase | samples | share | warp instructions executed | top stall reasons (share of the phase) |",
           "|---|---:|---:|---:|---|"]
    for name in ["helpers", *(p for _, p in starts)]:
        if name not in totals:
            continue
        t = totals[name]
        top = sorted(reasons, key=lambda r: -t[r])[:3]
        out.append(f"| {name} | {t['samples']} | {100 * t['samples'] / everything:.1f} % | {t['executed']} | "
                   + ", ".join(f"{r[len('stall_'):]} {100 * t[r] / max(t['samples'], 1):.0f} %" for r in top) + " |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nvdisasm", required=True, help="nvdisasm (the pip package nvidia-cuda-nvdisasm ships it)")
    ap.add_argument("--src", help="patched llama.cpp tree (default: vendor/prepare_source.py's)")
    ap.add_argument("--nvcc", default="nvcc")
    ap.add_argument("--type", default="q4_0", choices=sorted(TYPES))
    ap.add_argument("--dim", type=int, default=128, choices=(64, 128, 256))
    ap.add_argument("--ncols", type=int, default=4, choices=(1, 2, 4, 8))
    ap.add_argument("--stalls", type=Path, help="ncu's source page (CSV) of a launch of this instance: summed by phase")
    args = ap.parse_args()
    tree = Path(args.src) if args.src else compile_gfx90a.prepared_tree()
    cuda = tree / CUDA_DIR
    unit_name = UNIT.format(type=args.type)
    source = narrowed((cuda / HEADER).read_text(), args.dim, args.ncols)
    unit_text = (cuda / unit_name).read_text()
    if f'#include "{HEADER}"' not in unit_text or TYPES[args.type] not in unit_text:
        raise SystemExit(f"sass_phases: {unit_name} does not instantiate {TYPES[args.type]} through {HEADER}")
    starts = phase_starts(source)
    with tempfile.TemporaryDirectory() as tmp:
        # beside the originals, so that their relative includes resolve
        header = cuda / f"pyl-sass-phases-{Path(tmp).name}.cuh"
        unit = header.with_suffix(".cu")
        (Path(tmp) / "cublas_v2.h").write_text(CUBLAS_STUB)
        header.write_text(source)
        unit.write_text(unit_text.replace(f'#include "{HEADER}"', f'#include "{header.name}"'))
        try:
            cubin = Path(tmp) / "k.cubin"
            # ggml-cuda's CMakeLists.txt compiles with -use_fast_math: without it expf alone is ~11 instructions
            # where the build has 2, and the softmax a quarter more (2026-12-06)
            ptxas = subprocess.run([args.nvcc, "-arch=sm_90a", "-cubin", "-O3", "-use_fast_math", "-lineinfo",
                                    "-std=c++17",
                                    f"-I{tmp}", f"-I{tree / 'ggml/include'}", f"-I{tree / 'ggml/src'}",
                                    f"-I{cuda}", "-Xptxas", "-v", "-o", str(cubin),
                                    str(unit)], check=True, capture_output=True, text=True).stderr
        finally:
            unit.unlink()
            header.unlink()
        sass = subprocess.run([args.nvdisasm, "-c", "-gi", str(cubin)], check=True, capture_output=True,
                              text=True).stdout
    if args.stalls:
        print(stall_table(args.stalls, sass, starts))
        return 0
    regs = {m[0]: f"{m[2]} registers, {m[1]}" for m in
            re.findall(r"Compiling entry function '(\w+)'.*?(\d+ bytes spill stores), \d+ bytes spill loads"
                       r"\nptxas info\s+: Used (\d+) registers", ptxas, flags=re.S)}
    for function in sorted(set(re.findall(r"^\.text\.(_Z17k_pyl_attn_decode\w+):", sass, flags=re.M))):
        code = instructions(sass, function)
        counts = Counter(phase_of(line, starts) for _, _, line in code)
        print(f"{function}: {regs.get(function, '?')}, {len(code)} instructions")
        print("  static, by phase: " + ", ".join(f"{name} {counts[name]}" for name in
                                                 ["helpers", *(p for _, p in starts)] if counts[name]))
        at = {label: i for i, (label, _, _) in enumerate(code) if label}
        for i, (_, text, line) in enumerate(code):
            target = re.search(r"\bBRA\b.*?(\.L_x_\d+)", text)
            if target and target[1] in at and at[target[1]] < i:  # a backward branch closes a loop
                # inside a tile (the warp-divergent shuffle fallbacks at the end jump back from afar: left out),
                # named by its branch's line (the loop's own statement; its first instruction may be hoisted code)
                if phase_of(line, starts) not in TILE_PHASES or i - at[target[1]] > 1000:
                    continue
                print(f"  loop closed at line {line} ({phase_of(line, starts)}): {i - at[target[1]] + 1} "
                      f"instructions a trip")
    return 0


if __name__ == "__main__":
    sys.exit(main())
