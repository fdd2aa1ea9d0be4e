#!/usr/bin/env python3
"""What the gfx90a build really contains: the code objects of a ggml-hip build (ROCm >= 6.1), read back.

For every HIP object of the build folder (ggml-hip's sources and the CK fmha instances), the gfx90a code
object is unbundled and its AMDGPU metadata read (compile_gfx90a.kernel_metadata: wavefront size, VGPR / AGPR /
SGPR counts, spills, scratch, LDS), and it is disassembled for gfx90a to count the MFMA instructions
(`v_mfma_*`, CDNA's matrix cores) of each kernel. The report then checks:

  - every CK fmha forward kernel uses MFMA;
  - our kernels (patches 0004, 0006, 0007, 0013) are there, built for wave64, and spill no more than the worst
    of upstream's own kernels;
  - every kernel of the build has wavefront size 64.

Run it where the toolchain is (the ROCm chroot of rocm_env.py):

  python3 benchmarks/hip/rocm_env.py run -- python3 benchmarks/hip/code_objects.py \\
      --build build/cp314-cp314-linux_x86_64 --markdown benchmarks/results/hip-gfx90a-code-objects.md

Exit code: 0 when every check holds, 1 otherwise.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compile_gfx90a import ARCH, UNITS, find_tool, kernel_metadata, short_name

# our kernels, as compile_gfx90a's units name them (patches, source file, regexes over demangled names)
OURS = {f"{u.patches} {u.name}": (u.name, u.kernels) for u in UNITS if u.kernels}
CK_KERNEL = r"ck_tile::kentry<"


def mfma_counts(code: Path, objdump: str) -> dict[str, int]:
    """v_mfma instructions per kernel symbol of a code object."""
    text = subprocess.run([objdump, "-d", f"--mcpu={ARCH}", str(code)], capture_output=True, text=True,
                          check=True, timeout=600).stdout
    counts: dict[str, int] = {}
    current = None
    for line in text.splitlines():
        label = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if label:
            current = label.group(1)
            counts.setdefault(current, 0)
        elif current and "v_mfma_" in line:
            counts[current] += 1
    return counts


def read_build(build: Path) -> list[dict]:
    tc = {"clang_major": 21}
    objdump = find_tool("llvm-objdump", tc)
    kernels: list[dict] = []
    objects = sorted(p for p in build.rglob("*.o") if "ggml-hip.dir" in str(p) or "pyllama90a_ck_fmha.dir" in str(p))
    if not objects:
        raise SystemExit(f"code_objects: no ggml-hip or CK objects under {build}")
    with tempfile.TemporaryDirectory() as tmp:
        for i, obj in enumerate(objects):
            work = Path(tmp) / str(i)
            work.mkdir()
            meta = kernel_metadata(obj, work, tc)
            if not meta["kernels"]:
                continue
            counts = mfma_counts(work / (obj.stem + f".{ARCH}.co"), objdump)
            for k in meta["kernels"]:
                kernels.append({
                    "object": re.sub(r"^.*/(ggml-cuda|ggml-hip|ck_fmha|ck_fa)/", r"\1/", str(obj)),
                    "demangled": k["demangled"], "target": meta["target"],
                    "wavefront": int(k.get("wavefront_size", 0)), "vgpr": int(k.get("vgpr_count", 0)),
                    "agpr": int(k.get("agpr_count", 0)), "sgpr": int(k.get("sgpr_count", 0)),
                    "spills": int(k.get("vgpr_spill_count", 0)) + int(k.get("sgpr_spill_count", 0)),
                    "scratch": int(k.get("private_segment_fixed_size", 0)),
                    "lds": int(k.get("group_segment_fixed_size", 0)),
                    "mfma": counts.get(k.get("name", "").removesuffix(".kd"), 0),
                })
    return kernels


def check(kernels: list[dict]) -> tuple[dict, list[str]]:
    problems: list[str] = []
    ck = [k for k in kernels if CK_KERNEL in k["demangled"]]
    ours = {group: [k for k in kernels if any(re.search(p, k["demangled"]) for p in pats)]
            for group, (_, pats) in OURS.items()}
    built = {Path(k["object"]).name for k in kernels}
    ours_all = [k for group in ours.values() for k in group]
    upstream = [k for k in kernels if k not in ck and k not in ours_all]
    if not ck:
        problems.append("no CK fmha kernel in the build (was it configured with -DPYLLAMA90A_CK_FA=ON?)")
    problems += [f"CK kernel without MFMA: {short_name(k['demangled'])[:120]}" for k in ck if k["mfma"] == 0]
    for group, found in ours.items():
        if not found and f"{OURS[group][0]}.o" in built:  # a unit's object without our kernels in it
            problems.append(f"no kernel of {group}")
    waves = sorted({k["wavefront"] for k in kernels})
    if waves != [64]:
        problems.append(f"wavefront sizes {waves}, expected [64]")
    worst_upstream = max((k["spills"] for k in upstream), default=0)
    for k in ours_all:
        if k["spills"] > worst_upstream:
            problems.append(f"{short_name(k['demangled'])[:100]} spills {k['spills']} > upstream's worst "
                            f"{worst_upstream}")
    summary = {
        "objects": len({k["object"] for k in kernels}), "kernels": len(kernels), "ck_kernels": len(ck),
        "ours": {g: len(f) for g, f in ours.items()},
        "upstream_kernels": len(upstream), "wavefront_sizes": waves,
        "upstream_kernels_with_spills": sum(1 for k in upstream if k["spills"]),
        "upstream_worst_spills": worst_upstream, "upstream_with_mfma": sum(1 for k in upstream if k["mfma"]),
        "targets": sorted({k["target"] for k in kernels}),
    }
    return summary, problems


def _row(k: dict) -> str:
    name = Path(k["object"]).name.removesuffix(".cpp.o") if CK_KERNEL in k["demangled"] else short_name(k["demangled"])
    return (f"| `{name[:110]}` | {k['mfma']} | {k['vgpr']} / {k['agpr']} / {k['sgpr']} | "
            f"{k['lds']} | {k['scratch']} | {k['spills']} |")


def markdown(kernels: list[dict], summary: dict, problems: list[str], toolchain: str) -> str:
    head = "| kernel | v_mfma | VGPR / AGPR / SGPR | LDS B | scratch B | spills |\n|---|---:|---|---:|---:|---:|"
    lines = [f"Toolchain: {toolchain}; target {', '.join(summary['targets'])}. {summary['objects']} HIP objects, "
             f"{summary['kernels']} kernels: "
             f"{summary['ck_kernels']} CK fmha, ours {summary['ours']}, {summary['upstream_kernels']} upstream "
             f"({summary['upstream_with_mfma']} of them with MFMA; {summary['upstream_kernels_with_spills']} spill, "
             f"at most {summary['upstream_worst_spills']}). Wavefront sizes: {summary['wavefront_sizes']}.", "",
             "Checks: " + ("all hold." if not problems else "; ".join(problems)), "",
             "## CK fmha forward kernels", "", head]
    lines += [_row(k) for k in kernels if CK_KERNEL in k["demangled"]]
    for group, (_, pats) in OURS.items():
        found = [k for k in kernels if any(re.search(p, k["demangled"]) for p in pats)]
        lines += ["", f"## Ours: {group} ({len(found)} kernels)", ""]
        if not found:
            lines.append("(not in this build)")
            continue
        lines.append(head)
        lines += [_row(k) for k in sorted(found, key=lambda k: -k["vgpr"])[:12]]
        if len(found) > 12:
            lines.append(f"| ... {len(found) - 12} more, at most {max(k['vgpr'] for k in found)} VGPRs, "
                         f"{max(k['spills'] for k in found)} spills | | | | | |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", type=Path, required=True, help="the CMake build folder of a ggml-hip build")
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    kernels = read_build(args.build)
    summary, problems = check(kernels)
    version = subprocess.run([find_tool("clang", {"clang_major": 21}), "--version"], capture_output=True,
                             text=True).stdout.splitlines()[0]
    hip = Path("/usr/include/hip/hip_version.h")
    if hip.is_file():
        v = dict(re.findall(r"#define HIP_VERSION_(MAJOR|MINOR|PATCH)\s+(\d+)", hip.read_text()))
        version += f", HIP {v.get('MAJOR')}.{v.get('MINOR')}.{v.get('PATCH')}"
    if args.markdown:
        args.markdown.write_text(markdown(kernels, summary, problems, version))
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "problems": problems, "kernels": kernels}, indent=1))
    print(json.dumps(summary, indent=1))
    for p in problems:
        print("PROBLEM:", p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
