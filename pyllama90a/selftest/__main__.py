"""python -m pyllama90a.selftest [--quick] [--out REPORT.md]: path checks + speed table, one markdown report."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TypedDict

from ..bench.depths import Mode, add_ratios, markdown, run
from ..core.model.attention_policy import attention_device
from ..tools.synthetic import SHAPES, synthetic_model
from .cpu_side import run_cpu_side
from .environment import describe
from .paths import CHECK_SHAPES, CUDA_ONLY_MODES, HIP_ONLY_MODES, NOISE_FACTOR, PATH_MODES, PathResult, check_device

# the seeds' comparison on MI210: FA on/off x f16/q8_0/q4_0 (shared/seeds); FA-off f16 is the baseline
SPEED_MODES = ("fa-off:f16/f16", "fa-on:f16/f16", "fa-off:q8_0/q8_0", "fa-on:q8_0/q8_0", "fa-off:q4_0/q4_0",
               "fa-on:q4_0/q4_0")


class SpeedSettings(TypedDict):
    """The speed table's synthetic model and the arguments of bench.run."""
    shape: str
    depths: list[int]
    pp: int
    tg: int
    reps: int


# a GPU runs the seeds' depths on a 1B model of head dim 64 in minutes; 2 CPU cores need a smaller model
GPU_SPEED = SpeedSettings(shape="1b-hd64", depths=[0, 4096, 16384], pp=512, tg=32, reps=3)
CPU_SPEED = SpeedSettings(shape="smollm-135m", depths=[0, 4096], pp=512, tg=32, reps=3)
QUICK_SPEED = SpeedSettings(shape="tiny", depths=[0, 256], pp=64, tg=8, reps=1)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m pyllama90a.selftest", description=__doc__)
    p.add_argument("--quick", action="store_true", help="one shape, a small speed table (a minute on 2 CPU cores)")
    p.add_argument("--no-speed", action="store_true", help="only the path checks")
    p.add_argument("--shape", choices=sorted(SHAPES), help="synthetic model of the speed table")
    p.add_argument("--depths", type=int, nargs="+", help="KV depths of the speed table")
    p.add_argument("--noise-factor", type=float, default=NOISE_FACTOR,
                   help="a path passes within this many times the device's FA-on/FA-off f16 noise")
    p.add_argument("--out", type=Path, help="also write the report here")
    return p.parse_args(argv)


def path_table(results: list[PathResult]) -> str:
    failed = sum(not r.passed for r in results)
    lines = [f"## Attention paths: {len(results) - failed} passed, {failed} failed", "",
             "Relative logit error against the CPU with FA on and the same K/V types (prefill of 300 tokens, "
             "then 6 decode steps). Noise: the device's FA-off f16 (upstream's standard attention) against that "
             "reference, and on a GPU also upstream's FA over the same K/V types (`+nock`), which measures how "
             "differently the GPU's cache rounds; the bound is a multiple of it (at least of 3e-3). Same cache: on a "
             "GPU, the error against upstream's FA on the same device, which reads the same quantized cache, within "
             "the f16 bound.", "",
             "| device | path | shape | exercises | prefill err | decode err | noise | bound | same cache err "
             "| bound | result |",
             "|---|---|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        same = ("- | -" if r.same_cache_error is None else f"{r.same_cache_error:.2e} | {r.same_cache_bound:.2e}")
        lines.append(f"| {r.device} | `{r.mode}` | {r.shape} | {r.what} | {r.prefill_error:.2e} | "
                     f"{r.decode_error:.2e} | {r.noise:.2e} | {r.bound:.2e} | {same} | "
                     f"{'pass' if r.passed else '**FAIL**'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    progress = sys.stderr
    kind, gpu = attention_device(n_gpu_layers=-1)
    shapes = CHECK_SHAPES[:1] if args.quick else CHECK_SHAPES
    extra = {"cuda": CUDA_ONLY_MODES, "hip": HIP_ONLY_MODES, "gfx90a": HIP_ONLY_MODES}.get(kind, ())
    gpu_modes = PATH_MODES + extra if kind != "cpu" else ()
    references, results = run_cpu_side(shapes, PATH_MODES, gpu_modes, args.noise_factor)
    if gpu_modes:
        results += check_device(gpu, -1, gpu_modes, references, shapes, args.noise_factor, progress)

    report = ["# pyllama90a self-test", "", f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}, "
              f"`python -m pyllama90a.selftest {' '.join(argv if argv is not None else sys.argv[1:])}`", "",
              "| | |", "|---|---|"]
    report += [f"| {what} | {value.replace('|', '/')} |" for what, value in describe()]
    report += ["", path_table(results)]
    if not args.no_speed:
        speed = (QUICK_SPEED if args.quick else CPU_SPEED if kind == "cpu" else GPU_SPEED).copy()
        speed["shape"] = args.shape or speed["shape"]
        speed["depths"] = args.depths or speed["depths"]
        model_path = synthetic_model(speed["shape"])
        result = run(model_path, [Mode.parse(m) for m in SPEED_MODES], speed["depths"], speed["pp"], speed["tg"],
                     speed["reps"], n_threads=None, n_gpu_layers=-1, overhead=False, progress=progress)
        add_ratios(result, SPEED_MODES[0])
        report += [f"## Speed: the seeds' comparison on synthetic `{speed['shape']}` (q4_0 weights)", ""]
        if args.quick:
            report += ["(--quick: a toy model and one repetition; proves the table runs, not a measurement)", ""]
        report += [markdown(result)]
    report += ["## Next: calibrate", "", "Which attention path is fastest on this device, "
               "and what each KV cache type costs in quality, is measured by `python -m pyllama90a calibrate [MODEL] "
               "[--quick]`: flash_attn=\"auto\" then follows that calibration instead of the built-in table (a "
               "guess on a device we never measured).", ""]
    text = "\n".join(report)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)
    return 1 if any(not r.passed for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
