#!/usr/bin/env python3
"""Build the wave64 harness: our HIP kernels (the fused decode of patches 0013/0015-0018, its K/V stores and
reduce, patch 0004's OUT_PROD kernels) executed on the CPU with 64-wide wavefronts (gfx90a's), against a CPU
reference.

The patched ggml-cuda sources (vendor/prepare_source.py's tree, or --src) are compiled as HIP for gfx90a
(GGML_USE_HIP, __gfx90a__, ggml-hip's defines) by a host clang++ over benchmarks/hip/wave64/include, a small
HIP runtime of ours whose wavefronts are 64 lanes wide (wave64.h says what it models). Two mechanical rewrites
make the .cu/.cuh text host C++, into the build folder only (nothing is written to the tree): `K<<<g, b, s,
st>>>(args)` becomes `wave64_launch(K, g, b, s, st)(args)`, and `extern __shared__ T x[];` a pointer to the
block's dynamic shared memory. The harness (benchmarks/hip/wave64/harness.cpp) links llama.cpp's ggml-base of
the installed pyllama90a (tensor sizes, ggml's CPU dequantize and quantize for the reference and the inputs).

  python3 benchmarks/hip/build_wave64.py [--out DIR] [--cxx clang++-19] [--src TREE] [--ggml-lib DIR]
                                         [--mutate NAME] [--async-copies] [--width 64|32] [--run [HARNESS ARGS...]]

--mutate applies one of MUTATIONS to the kernel text first (a known-wrong kernel: the harness must fail it);
repeat it to apply several at once (each in its own kernel, so one build serves a case of each).
--async-copies runs the CUDA path's cp.async tile loop in place of HIP's register path (ASYNC_COPIES).
--width 32 builds the same runtime with 32-wide wavefronts (the NVIDIA control). Prints the binary's path.
Needs clang++ >= 15 (`apt-get install -y clang-19`); exits 77 when none is installed.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import compile_gfx90a  # a sibling script: its defines and its prepared source tree)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
WAVE64 = HERE / "wave64"
SKIP = 77
NO_CLANG = "no clang++ >= 15 installed (apt-get install -y clang-19): the wave64 harness cannot be built here"

# the ggml-cuda files whose kernels the harness runs (and the headers they include, all rewritten alike)
# (the fused decode: one unit per KV type since patch 0027, the kernels in pyl-attn-decode-impl.cuh)
UNITS = ("pyl-attn-decode.cu", *(f"pyl-attn-decode-{t}.cu" for t in compile_gfx90a.DECODE_TYPES), "pyl-set-rows-rot.cu",
         "out-prod.cu")

# Kernels that are wrong on 64-wide wavefronts only: each turns a group-of-32 lane index into a wavefront lane
# index (threadIdx.x % warpSize), which is the same thing on a 32-wide warp. The harness must fail each.
MUTATIONS = {
    # the fused decode's online softmax: a group of 32 lanes per query head
    "softmax-lane": ("pyl-attn-decode-impl.cuh",
                     "const int lane = tid % 32;\n        for (int hh = tid / 32;",
                     "const int lane = tid % warpSize;\n        for (int hh = tid / 32;"),
    # the split-KV reduce: lane 0 of each group of 32 publishes its chunk maximum
    "reduce-lane": ("pyl-attn-decode-impl.cuh",
                    "    const int     lane = threadIdx.x % 32;",
                    "    const int     lane = threadIdx.x % warpSize;"),
    # the K/V store: lane l of a group quantizes value l of a block
    "store-lane": ("pyl-set-rows-rot.cu",
                   "    const int      lane = threadIdx.x % 32;",
                   "    const int      lane = threadIdx.x % warpSize;"),
    # not a wave64 bug but a control of the q8 cases' looser bound (their V^T p in half2, patch 0026): each pair of
    # codes turned into half2 takes the other pair's bytes (values 2k, 2k+1 read from 2k+2, 2k+3 and back), on any
    # width
    "half2-pairs": ("pyl-attn-decode-impl.cuh", "k % 2 ? 0x4342u : 0x4140u", "k % 2 ? 0x4140u : 0x4342u"),
    # not a wave64 bug but a control of --async-copies: the next tile copied into the stage this tile is read from
    "async-stage": ("pyl-attn-decode-impl.cuh", "int * k_next = tiles_s + (stage ^ 1)*2*T*stride_w;",
                    "int * k_next = tiles_s + stage*2*T*stride_w;"),
    # not a wave64 bug but a control of the multi-sequence cases (patch 0055): the split launch's reduce writes the
    # split sequences' outputs over the first whole sequences' (its dst not offset past them)
    "split-dst": ("pyl-attn-decode-impl.cuh", "(float *) ((char *) dst->data + whole_seqs*dst->nb[3]), rot_out,",
                  "(float *) dst->data, rot_out,"),
    # not a wave64 bug but a control of --async-copies' MMAs (patch 0053): V^T p's sums of a block's two halves of
    # 16 values written to each other's places
    "mma-halves": ("pyl-attn-decode-impl.cuh",
                   "return 32*ib + 4*(i % 8) + 2*(i / 8) + h;\n    } else {\n"
                   "        return 32*ib + 16*h + 2*(i % 8) + i / 8;",
                   "return 32*ib + 4*(i % 8) + 2*(i / 8) + 1 - h;\n    } else {\n"
                   "        return 32*ib + 16*(1 - h) + 2*(i % 8) + i / 8;"),
}


# The CUDA path's tile loop (patches 0031/0032: cp.async into two stages, the path an H100 or H200 runs) on the
# harness, whose target is HIP: PYL_DEC_ASYNC on every target, each copy done when it is issued (one order the
# cp.async semantics allow), the host's async choice true, and V^T p's MMAs there (patch 0053) emulated. It checks
# the stages' indexing, the barriers' placement (a copy into a stage still read is a race, which the lanes' two
# orders expose), the mask loaded a tile ahead and the MMAs' fragments, not the copies' asynchrony on a GPU. Each
# (old, new) must be once in its unit, as a mutation's.
ASYNC_COPIES = (
    ("pyl-attn-decode-impl.cuh", "#if defined(CP_ASYNC_AVAILABLE)\n#define PYL_DEC_ASYNC 1",
     "#if 1  // wave64 harness: the async path, its copies done when issued\n#define PYL_DEC_ASYNC 1"),
    ("pyl-attn-decode-impl.cuh",
     'asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" : : "r"((unsigned int) __cvta_generic_to_shared(dst_s)), '
     '"l"(src));',
     "*dst_s = *(const int *) src;"),
    ("pyl-attn-decode-impl.cuh", 'asm volatile("cp.async.commit_group;" : : : "memory");', ""),
    ("pyl-attn-decode-impl.cuh", 'asm volatile("cp.async.wait_group %0;" : : "n"(pending) : "memory");', ""),
    ("pyl-attn-decode-impl.cuh", "async     = cp_async_available(ggml_cuda_info().devices[ctx.device].cc);",
     "async     = true;"),
    # V^T p on tensor cores where the kernel copies by cp.async (patch 0053): each MMA emulated (wave64_mma.h)
    ("pyl-attn-decode-impl.cuh", "#if defined(CP_ASYNC_AVAILABLE)\n#define PYL_DEC_MMA 1",
     '#if 1  // wave64 harness: the MMAs emulated\n#include "wave64_mma.h"\n#define PYL_DEC_MMA 1'),
    ("pyl-attn-decode-impl.cuh",
     'asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, '
     '{%0, %1, %2, %3};"\n        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])\n'
     '        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));',
     "wave64_mma_m16n8k16_f32_f16(c, a, b);"),
)


def log(msg: str) -> None:
    print(f"build_wave64: {msg}", file=sys.stderr, flush=True)


def find_clang(cxx: str | None) -> str | None:
    for c in ([cxx] if cxx else []) + [f"clang++-{v}" for v in range(21, 14, -1)] + ["clang++"]:
        p = shutil.which(c)
        if p:
            return p
    return None


def ggml_lib_dir() -> Path:
    """The installed pyllama90a's folder, which holds libggml-base.so (built from the same patched tree)."""
    out = subprocess.run([sys.executable, "-c", "import importlib.util as u; "
                          "print(u.find_spec('pyllama90a').submodule_search_locations[0])"],
                         capture_output=True, text=True, timeout=120, cwd="/")
    if out.returncode != 0:
        raise RuntimeError("pyllama90a is not installed in this Python: give --ggml-lib")
    return Path(out.stdout.strip())


LAUNCH = re.compile(r"(\b[A-Za-z_][\w:]*(?:<[^;{}()<>]*>)?)<<<")
LAUNCH_END = re.compile(r">>>\s*\(")
EXTERN_SHARED = re.compile(r"extern\s+__shared__\s+([\w:]+)\s+(\w+)\s*\[\s*\]\s*;")


def to_host_cxx(text: str) -> str:
    """The two rewrites that make CUDA/HIP source text host C++ over wave64.h."""
    text = LAUNCH.sub(r"wave64_launch(\1, ", text)
    text = LAUNCH_END.sub(")(", text)
    return EXTERN_SHARED.sub(r"\1 * \2 = (\1 *) ::wave64::dynamic_shared();", text)


def rewrite_tree(cuda: Path, out: Path, mutations: list[str], async_copies: bool = False) -> None:
    """ggml-cuda's headers and our units, rewritten, into out/ggml-cuda (the include path's first folder);
    async_copies: with ASYNC_COPIES."""
    dst = out / "ggml-cuda"
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "vendors").mkdir(exist_ok=True)
    files = [*cuda.glob("*.cuh"), *(cuda / "vendors").glob("*.h"), *(cuda / u for u in UNITS)]
    edits = [(f"mutation {m}", *MUTATIONS[m]) for m in mutations]
    edits += [(f"async copies {i}", *e) for i, e in enumerate(ASYNC_COPIES if async_copies else ())]
    mutated: set[str] = set()
    for p in files:
        text = to_host_cxx(p.read_text())
        for what, unit, old, new in edits:
            if p.name == unit:
                if text.count(old) != 1:
                    raise RuntimeError(f"{what}: its text is not once in {unit}")
                text = text.replace(old, new)
                mutated.add(what)
        target = dst / p.relative_to(cuda)
        if not target.exists() or target.read_text() != text:
            target.write_text(text)
    missing = sorted({what for what, *_ in edits} - mutated)
    if missing:
        raise RuntimeError(f"{missing}: their units are not in {cuda}")


def defines() -> list[str]:
    """ggml-hip's defines of a ggml-cuda unit (one list: compile_gfx90a.py's), and the gfx90a device macros."""
    return [*compile_gfx90a.DEFINES, "__HIP_PLATFORM_AMD__", "__HIP__", "__gfx90a__", "__GFX9__",
            "__AMDGCN_WAVEFRONT_SIZE=64"]


def build(args: argparse.Namespace) -> Path:
    cxx = find_clang(args.cxx)
    if cxx is None:
        log(NO_CLANG)
        sys.exit(SKIP)
    tree = Path(args.src) if args.src else compile_gfx90a.prepared_tree()
    lib = Path(args.ggml_lib) if args.ggml_lib else ggml_lib_dir()
    if not (lib / "libggml-base.so").is_file():
        raise RuntimeError(f"no libggml-base.so in {lib}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    mutations = sorted(set(args.mutate or ()))
    name = f"wave64-harness-w{args.width}" + ("-async" if args.async_copies else "") + \
        "".join(f"-{m}" for m in mutations) + ("" if args.opt == "1" else f"-O{args.opt}")
    src_dir = out / (name + "-src")
    rewrite_tree(tree / "ggml" / "src" / "ggml-cuda", src_dir, mutations, args.async_copies)
    harness = src_dir / "harness.cpp"  # its kernels are HIP text too
    text = to_host_cxx((WAVE64 / "harness.cpp").read_text())
    if not harness.exists() or harness.read_text() != text:
        harness.write_text(text)
    cmd = [cxx, "-x", "c++", "-std=gnu++17", f"-O{args.opt}", "-g0", "-fno-strict-aliasing", "-fno-exceptions",
           "-Wno-unused-command-line-argument", "-Wno-ignored-attributes", "-Wno-unknown-pragmas",
           "-Wno-deprecated-declarations", "-Wno-c++20-extensions", "-Wno-unused-value",
           *[f"-D{d}" for d in defines()], f"-DWAVE64_WIDTH={args.width}",
           f"-I{src_dir / 'ggml-cuda'}", f"-I{WAVE64 / 'include'}", f"-I{tree / 'ggml' / 'include'}",
           f"-I{tree / 'ggml' / 'src'}", str(harness),
           f"-L{lib}", "-lggml-base", f"-Wl,-rpath,{lib}", "-o", str(out / name)]
    stamp = hashlib.sha256(("\n".join(cmd) + "".join(
        p.read_text() for p in sorted((src_dir / "ggml-cuda").rglob("*")) if p.is_file()) +
        "".join(p.read_text() for p in sorted(WAVE64.rglob("*")) if p.is_file() and p.suffix in (".h", ".cpp"))
    ).encode()).hexdigest()
    stamp_file = out / (name + ".stamp")
    if (out / name).is_file() and stamp_file.is_file() and stamp_file.read_text() == stamp:
        return out / name
    log(f"compiling {name} with {Path(cxx).name} -O{args.opt} (a few minutes on 2 cores)")
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if res.returncode != 0:
        sys.stderr.write(res.stderr[-12000:])
        raise RuntimeError(f"{name} did not compile")
    stamp_file.write_text(stamp)
    return out / name


def run_cases(binary: Path, *args: str, jobs: int | None = None) -> tuple[int, list[dict], str]:
    """The harness's cases (all, or those of args' --filter) in `jobs` processes at once (default: this process's
    CPUs), each every jobs-th case (--shard): the harness runs one case after another on one CPU, and at -O0 the
    CUDA tile loop's 150 cases took ~150 s (2026-12-07, AMD EPYC, 2 vCPUs). Returns the worst exit status, every
    case's JSON row in the harness's order (shard i ran cases i, i + jobs, ...) and the processes' output, shard
    after shard."""
    jobs = max(1, jobs or len(os.sched_getaffinity(0)))
    with tempfile.TemporaryDirectory(prefix="wave64-run-") as tmp:
        reports = [Path(tmp) / f"shard{i}.jsonl" for i in range(jobs)]
        logs = [report.with_suffix(".log") for report in reports]
        procs = []
        for i, (report, log_path) in enumerate(zip(reports, logs, strict=True)):
            with log_path.open("w") as log_file:  # a file, not a pipe: no shard waits on a full pipe
                procs.append(subprocess.Popen([str(binary), *args, "--shard", f"{i}/{jobs}", "--json", str(report)],
                                              stdout=log_file, stderr=subprocess.STDOUT))
        for proc in procs:
            proc.wait(timeout=3600)
        outputs = [log_path.read_text(errors="replace") for log_path in logs]
        shards = [[json.loads(line) for line in report.read_text().splitlines()] if report.is_file() else []
                  for report in reports]
    rows = [shard[k] for k in range(max(map(len, shards))) for shard in shards if k < len(shard)]
    return max(proc.returncode for proc in procs), rows, "".join(outputs)


def render_markdown(rows: list[dict]) -> str:
    """The harness's cases as tables: one row per kernel version (or store variant) and shape, one column per
    cache type, each cell the case's error against the CPU reference and ok/FAIL."""
    def cell(r: dict) -> str:
        return f"{'ok' if r['ok'] else '**FAIL**'} {r['error']:.1e}"

    out: list[str] = []
    by_name = {r["case"]: r for r in rows}
    types = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0", "iq4_nl"]
    for kind, what in (("attn", "max |got - want| / max |want|, bound 4e-3 (V^T p in half2)"),
                       ("outprod", "max |got - want| / max |want|, bound 1e-4"),
                       ("store", "largest code difference in steps of the block's scale, bound 1.01")):
        keys = sorted({r["case"].rsplit("/", 2 if kind == "store" else 1)[0]
                       for r in rows if r["case"].startswith(kind + "/")})
        cols = [t for t in types if any(r["case"].startswith(kind + "/") and f"/{t}" in r["case"] for r in rows)]
        if not keys:
            continue
        out += [f"### {kind} ({what})", "", "| case | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
        for k in keys:
            if kind == "store":
                for n in ("1", "5"):
                    cells = [cell(by_name[f"{k}/{t}/{n}"]) if f"{k}/{t}/{n}" in by_name else "" for t in cols]
                    out.append(f"| {k} ({n} token{'s' if n != '1' else ''}) | " + " | ".join(cells) + " |")
            else:
                cells = [cell(by_name[f"{k}/{t}"]) if f"{k}/{t}" in by_name else "" for t in cols]
                out.append(f"| {k} | " + " | ".join(cells) + " |")
        out.append("")
    selftests = [r for r in rows if r["case"].startswith("selftest/")]
    if selftests:
        out += ["### self-tests (can the harness fail?)", "", "| kernel | expected | kernel result | harness |",
                "|---|---|---|---|"]
        for r in selftests:
            out.append(f"| {r['case']} | {'wrong' if r['expect_fail'] else 'right'} | "
                       f"{'pass' if r['kernel_pass'] else 'fail'} ({r['error']:.1e}; {r['detail']}) | "
                       f"{'ok' if r['ok'] else '**FAIL**'} |")
        out.append("")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("PYLLAMA90A_WAVE64_BUILD", str(ROOT / "build" / "wave64")))
    ap.add_argument("--cxx")
    ap.add_argument("--src", help="the patched llama.cpp tree (default: vendor/prepare_source.py's)")
    ap.add_argument("--ggml-lib", help="the folder of libggml-base.so (default: the installed pyllama90a's)")
    ap.add_argument("--mutate", choices=sorted(MUTATIONS), action="append")
    ap.add_argument("--async-copies", action="store_true",
                    help="the CUDA path's cp.async tile loop, each copy done when issued (ASYNC_COPIES)")
    ap.add_argument("--width", type=int, choices=(32, 64), default=64)
    ap.add_argument("--opt", default="1", choices=("0", "1", "2"))
    ap.add_argument("--markdown", help="run every case and write their tables to this file")
    ap.add_argument("--run", nargs=argparse.REMAINDER, help="run the harness with these arguments")
    args = ap.parse_args()
    binary = build(args)
    print(binary)
    if args.markdown:
        rc, rows, output = run_cases(binary)
        print(output, end="")
        Path(args.markdown).with_suffix(".jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        Path(args.markdown).write_text(render_markdown(rows) + "\n")
        return rc
    if args.run is not None:
        return subprocess.run([str(binary), *args.run]).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
