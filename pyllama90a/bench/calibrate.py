"""`python -m pyllama90a calibrate [MODEL] [--quick]` and `pl.calibrate(path, ...)`: this device's speed per
attention mode, memory per mode and KV quality per cache type for one model, written as the calibration file
that flash_attn="auto" follows (core/model/calibration.py).

Speed: the depth bench's run (depths.py) over FA on, FA off and hybrid (with the fused decode kernel on a GPU) for
each cache type, at depths up to n_ctx. Memory: plan_memory per mode at n_ctx (nothing allocated). Quality: the
quality bench (quality.py) per cache type against f16 on FA off and hybrid. --quick: three cache types, two
shallow depths, short texts (a few minutes on a laptop CPU).
"""
from __future__ import annotations

import argparse
import io
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO, cast

from ..core.gguf.header import read_header
from ..core.model.attention_policy import attention_device
from ..core.model.calibration import (
    REACH,
    Calibration,
    CalibrationKey,
    MemoryPoint,
    QualityPoint,
    SpeedPoint,
    calibration_key,
    parse,
    write,
)
from ..core.model.memory_plan import plan_memory
from ..core.model.shape import attention_shape
from ..errors import InvalidArgumentError, positive_int
from ..native.kv_types import KV_TYPES
from . import depths, quality
from .modes import Mode
from .report import write_results


@dataclass(frozen=True)
class Preset:
    depths: tuple[int, ...]  # those above n_ctx are left out
    pp: int
    tg: int
    reps: int
    types: tuple[str, ...]   # cache types (K and V alike) of the speed and quality measures
    quality_n_ctx: int
    quality_chunks: int


# --quick took 8.4 min on the 2 shared cores with depths (0, 512), pp 64, tg 16 and 128-token quality chunks
QUICK = Preset(depths=(0, 256), pp=32, tg=8, reps=1, types=("f16", "q8_0", "q4_0"), quality_n_ctx=64,
               quality_chunks=1)
FULL = Preset(depths=(0, 1024, 4096, 16384), pp=256, tg=32, reps=2,
              types=tuple(t for t in KV_TYPES if t != "f32"), quality_n_ctx=512, quality_chunks=2)


def speed_modes(types: tuple[str, ...], on_gpu: bool) -> list[Mode]:
    """FA on and off for each type; hybrid for a quantized V (and with the fused decode kernel on a GPU)."""
    modes = []
    for t in types:
        modes += [Mode("on", t, t), Mode("off", t, t)]
        if t not in ("f16", "bf16", "f32"):
            modes.append(Mode("hybrid", t, t))
            if on_gpu:
                modes.append(Mode("hybrid", t, t, "fused"))
    return modes


def memory_modes(modes: list[Mode]) -> list[Mode]:
    """The modes whose memory is planned: one per (flash_attn, K, V), since MemoryPoint (what kv_budget reads)
    has no variant. Of a path's variants the last (hybrid + fused on a GPU, what auto runs there) is planned."""
    return list({(m.flash_attn, m.ctk, m.ctv): m for m in modes}.values())


class _ProgressBar(io.TextIOBase):
    """The bench's progress lines ("[i/n] ...") as one tqdm bar (tqdm comes with gguf, a dependency)."""

    def __init__(self, total: int, enabled: bool) -> None:
        from tqdm import tqdm

        self._bar = tqdm(total=total, disable=not enabled, file=sys.stderr, unit="step", dynamic_ncols=True)

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.startswith("["):
                self._bar.update(1)
            if line.strip():
                self._bar.set_postfix_str(line.strip()[:70])
        return len(text)

    def step(self, what: str) -> None:
        self.write(f"[ ] {what}\n")

    def close(self) -> None:
        self._bar.close()
        super().close()


def calibrate(path: str | os.PathLike[str] | None = None, *, quick: bool = False, n_ctx: int = 4096,
              n_threads: int | None = None, n_gpu_layers: int = -1, out: str | os.PathLike[str] | None = None,
              progress: bool = True, preset: Preset | None = None) -> Path:
    """Measure this device for the model at `path` (default: the default model) and write its calibration file;
    returns the file's path. `out`: also a folder for the report (calibration.md, .json, .png). `preset`: what
    to measure, instead of QUICK or FULL."""
    positive_int("n_ctx", n_ctx)
    from ..core.gguf.default_model import default_model

    model_path = Path(os.fsdecode(path)) if path is not None else default_model()
    if not model_path.is_file():
        raise InvalidArgumentError(f"no model file at {model_path}", param="path")
    preset = preset or (QUICK if quick else FULL)
    chosen_depths = sorted({d for d in preset.depths if d + max(preset.pp, preset.tg) + 2 <= n_ctx} | {0})
    kind, label = attention_device(n_gpu_layers)
    key = calibration_key(label, attention_shape(read_header(model_path), model_path))
    modes = speed_modes(preset.types, kind != "cpu")
    pairs = [(t, t) for t in preset.types]
    steps = len(chosen_depths) * (preset.reps + 1) * len(modes) + len(quality.PATHS) * len(quality.PHASES) * len(pairs)
    bar = _ProgressBar(steps, progress)
    try:
        speed = depths.run(model_path, modes, chosen_depths, preset.pp, preset.tg, preset.reps, n_threads,
                           n_gpu_layers, overhead=False, progress=cast(TextIO, bar))
        memory = [_memory_point(model_path, mode, n_ctx, n_gpu_layers) for mode in memory_modes(modes)]
        rows = quality.measure_quality(model_path, pairs, quality.PATHS, quality.PHASES, preset.quality_n_ctx,
                                       preset.quality_chunks, n_threads, bar.step)
    finally:
        bar.close()
    calibration = Calibration(key, model_path.name, time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                              tuple(_speed_points(speed)), tuple(memory),
                              tuple(QualityPoint(r.flash_attn, r.phase, r.ctk, r.ctv, r.mean_kl, r.top1, r.perplexity,
                                                 r.perplexity_f16) for r in rows))
    written = write(calibration)
    if out is not None:
        from .calibration_report import markdown, plot

        folder = write_results(Path(out), "calibration", {"file": str(written), **speed}, markdown(calibration, speed))
        plot(calibration, speed, folder / "calibration.png")
    return written


def _speed_points(result: dict[str, Any]) -> list[SpeedPoint]:
    points = []
    for r in result["rows"]:
        mode = Mode.parse(r["mode"])
        phase = "prefill" if r["kind"] == "pp" else "decode"
        points.append(SpeedPoint(mode.flash_attn, mode.attention_paths.fused_decode, mode.ctk, mode.ctv, phase,
                                 r["depth"], r["tok_s_mean"]))
    return points


def _memory_point(model_path: Path, mode: Mode, n_ctx: int, n_gpu_layers: int) -> MemoryPoint:
    cache = plan_memory(model_path, ctk=mode.ctk, ctv=mode.ctv, flash_attn=mode.flash_attn, n_ctx=n_ctx,
                        n_gpu_layers=n_gpu_layers, attention_paths=mode.attention_paths).cache
    return MemoryPoint(mode.flash_attn, mode.ctk, mode.ctv, n_ctx, cache.total_bytes, cache.compute_bytes)


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("model", nargs="?", help="GGUF path (default: the default model)")
    ap.add_argument("--quick", action="store_true", help="three cache types, shallow depths (a few minutes)")
    ap.add_argument("--n-ctx", type=int, default=4096, help="the deepest context to measure up to")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--n-gpu-layers", type=int, default=-1)
    ap.add_argument("--out", help="also write the report (calibration.md, .json, .png) to this folder")
    ap.add_argument("--no-progress", action="store_true")


def run_command(args: argparse.Namespace, stdout: TextIO = sys.stdout) -> int:
    written = calibrate(args.model, quick=args.quick, n_ctx=args.n_ctx, n_threads=args.threads,
                        n_gpu_layers=args.n_gpu_layers, out=args.out, progress=not args.no_progress)
    deepest = max(p.depth for p in parse(written.read_text()).speed)
    print(f"wrote the calibration {written}: flash_attn=\"auto\" follows it on this device for n_ctx up to "
          f"{REACH * deepest} (--n-ctx measures deeper)", file=stdout)
    return 0


__all__ = ["FULL", "QUICK", "CalibrationKey", "Preset", "calibrate"]
