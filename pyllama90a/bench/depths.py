"""`python -m pyllama90a.bench`: prefill and decode speed per attention mode at chosen depths.

Every mode runs in this one process, interleaved (for each depth and repetition, each mode in turn) so
that machine drift hits all modes alike. Modes are `fa-{on,off}:{ctk}/{ctv}` or `hybrid:{ctk}/{ctv}`; the first
is the baseline of the ratios unless --baseline says otherwise. Quote ratios; absolute times on shared machines drift.

    python -m pyllama90a.bench --depths 0 4096 --modes fa-off:f16/f16 fa-on:q4_0/q4_0 fa-off:q4_0/q4_0
    python -m pyllama90a.bench --synthetic 1b-hd64 --depths 0 8192 --pp 512 --tg 32

`python -m pyllama90a.bench server --help`: the server load benchmark (pyllama90a/bench/server.py).
`python -m pyllama90a.bench constrained --help`: constrained against free decoding, N slots (bench_constrained.py).
`python -m pyllama90a.bench batched --help`: N sequences at depth D decoding together (bench_batched.py).
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO, cast

import numpy as np

from ..core.generation.outputs import Completion
from ..core.model.memory_plan import plan_memory
from ..core.model.model import Model
from ..native.ggml import devices
from .modes import VARIANT_ENV as VARIANT_ENV  # (also bench's names: tests and device scripts import them here)
from .modes import VARIANT_PATHS as VARIANT_PATHS
from .modes import Mode, add_source_arguments, model_file, parse_modes
from .report import machine_name, pyplot, write_results
from .roofline import copy_bandwidth, decode_bytes, weight_bytes_per_token

DEFAULT_MODES = ("fa-off:f16/f16", "fa-on:q4_0/q4_0", "fa-off:q4_0/q4_0")


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def fill(model: Model, tokens: list[int], depth: int) -> None:
    """Bring the cache to `depth` tokens (untimed); at least one, so that a decode step has a position."""
    model.truncate(0)
    model.eval(tokens[:max(depth, 1)])


def measure(model: Model, tokens: list[int], pp: int, tg: int) -> dict[str, float]:
    """Time a prefill of `pp` and a decode of `tg` tokens on top of the filled cache, then restore it."""
    depth = model.n_cached
    result = {}
    if pp:
        result["pp"] = pp / _timed(lambda: model.eval(tokens[depth:depth + pp]))
        model.truncate(depth)
    if tg:
        def decode_loop() -> None:
            for tok in tokens[depth:depth + tg]:
                model.eval([tok])

        result["tg"] = tg / _timed(decode_loop)
        model.truncate(depth)
    return result


def measure_generate(model: Model, tokens: list[int], tg: int) -> float:
    """Decode speed through Model.generate (greedy sampling, detokenizing, streaming bookkeeping): the
    Python API's per-token cost on top of the raw decode loop that `measure` times."""
    depth = model.n_cached
    # reuses the cached prefix; without stream= generate returns the Completion side of its union
    c = cast(Completion, model.generate(tokens[:depth + 1], max_tokens=tg, temperature=0))
    model.truncate(depth)
    # n tokens take n samples but n - 1 decodes (the last token is not fed back): count decode steps
    return (c.usage.completion_tokens - 1) / (c.timings.generate_ms / 1e3)


def run(model_path: Path, modes: list[Mode], depths: list[int], pp: int, tg: int, reps: int,
        n_threads: int | None, n_gpu_layers: int, overhead: bool = True,
        progress: TextIO = sys.stderr) -> dict:
    n_ctx = max(depths) + max(pp, tg) + 2  # the cache holds at least one token (fill)
    # the bound of a decode step: the bytes it reads over a copy bandwidth measured here, before the models load
    on_gpu = n_gpu_layers != 0 and any(d.is_gpu for d in devices())
    bandwidth = copy_bandwidth(gpu=on_gpu, n_threads=n_threads)
    weights = weight_bytes_per_token(model_path)
    # the modes are measured in turn at each depth, so each keeps its filled context; one load of the weights
    # serves them all (with_context): a copy per mode put calibrate's 22 modes of an 8B model (88 GB) past an
    # H100's 80 GB, and on a CPU each copy repacks the weights again
    models: dict[Mode, Model] = {}
    loaded: Model | None = None  # the first mode's Model: the one that loaded the weights
    for mode in modes:
        mode.apply_environment()
        settings: dict[str, Any] = {"ctk": mode.ctk, "ctv": mode.ctv, "flash_attn": mode.flash_attn, "n_ctx": n_ctx,
                                    "n_threads": n_threads, "n_batch": 512, "n_ubatch": 512,
                                    "attention_paths": mode.attention_paths}
        models[mode] = (loaded.with_context(**settings) if loaded is not None
                        else Model(model_path, n_gpu_layers=n_gpu_layers, **settings))
        loaded = loaded or models[mode]
    try:
        n_vocab = models[modes[0]].handle.n_vocab
        tokens = np.random.default_rng(0).integers(10, n_vocab, size=n_ctx).tolist()
        samples: dict[tuple[str, int, str], list[float]] = {}
        total, done = len(depths) * (reps + 1) * len(modes), 0
        for depth in depths:
            for mode in modes:
                mode.apply_environment()
                print(f"filling {mode} to depth {depth} ...", file=progress, flush=True)
                fill(models[mode], tokens, depth)
            for rep in range(-1, reps):  # rep -1 warms caches and is discarded
                for mode in modes:
                    mode.apply_environment()
                    r = measure(models[mode], tokens, pp, tg)
                    if tg and overhead and mode == modes[0]:
                        r["gen"] = measure_generate(models[mode], tokens, tg)
                    done += 1
                    if rep >= 0:
                        for test, tps in r.items():
                            samples.setdefault((str(mode), depth, test), []).append(tps)
                    print(f"[{done}/{total}] depth {depth} {mode} {'warm-up' if rep < 0 else f'rep {rep + 1}'}: "
                          + ", ".join(f"{k} {v:.1f} tok/s" for k, v in r.items()), file=progress, flush=True)
        kv = {str(mode): models[mode].kv_cache for mode in modes}
        compute = {str(mode): models[mode].compute_buffer_bytes for mode in modes}
    finally:
        for m in models.values():
            m.close()
    rows = []
    for (mode_name, depth, test), values in samples.items():
        cache = kv[mode_name]
        tok_s = statistics.fmean(values)
        step_bytes = decode_bytes(weights, cache.total_bytes / cache.n_ctx, depth) if test != "pp" else None
        rows.append({"mode": mode_name, "depth": depth, "test": f"{test}{pp if test == 'pp' else tg}", "kind": test,
                     "tok_s_mean": tok_s, "tok_s_sd": statistics.stdev(values) if len(values) > 1 else 0.0,
                     "samples": values, "kv_k_bytes": cache.k_bytes, "kv_v_bytes": cache.v_bytes,
                     "kv_cells": cache.n_ctx, "compute_buffer_bytes": compute[mode_name], "bytes_per_token": step_bytes,
                     "bandwidth_fraction": tok_s * step_bytes / bandwidth if step_bytes else None})
    return {"machine": machine_name(), "model": str(model_path), "n_ctx": n_ctx, "n_threads": n_threads, "pp": pp,
            "tg": tg, "copy_bandwidth_bytes_s": bandwidth, "copy_bandwidth_device": "GPU" if on_gpu else "CPU",
            "reps": reps, "depths": depths, "modes": [str(m) for m in modes], "rows": rows,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def memory_report(model_path: Path, modes: list[Mode], n_ctx: int, baseline: str, n_gpu_layers: int) -> str:
    """KV and compute-buffer bytes per mode at `n_ctx`, from plan_memory: llama.cpp simulates the allocations of
    each mode's context (no weights are read, nothing is allocated), as a load would reserve them."""
    rows = []
    for mode in modes:
        mode.apply_environment()
        cache = plan_memory(model_path, ctk=mode.ctk, ctv=mode.ctv, flash_attn=mode.flash_attn, n_ctx=n_ctx,
                            n_batch=512, n_ubatch=512, n_gpu_layers=n_gpu_layers,
                            attention_paths=mode.attention_paths).cache
        rows.append((str(mode), cache.total_bytes, cache.compute_bytes))
    base = next(r for r in rows if r[0] == baseline)
    lines = [f"Machine: {machine_name()}  ", f"Model: `{model_path.name}`, n_ctx {n_ctx}, n_ubatch 512 "
             "(plan_memory: allocations simulated by llama.cpp)", "",
             "| mode | KV MiB | vs baseline | compute buffer MiB | vs baseline | KV + compute MiB | vs baseline |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, kv, compute in rows:
        lines.append(f"| {name} | {kv / 2**20:.1f} | {kv / base[1]:.3f}x | {compute / 2**20:.1f} | "
                     f"{compute / base[2]:.3f}x | {(kv + compute) / 2**20:.1f} | "
                     f"{(kv + compute) / (base[1] + base[2]):.3f}x |")
    return "\n".join(lines) + "\n"


def add_ratios(result: dict, baseline: str) -> None:
    base = {(r["depth"], r["kind"]): r["tok_s_mean"] for r in result["rows"] if r["mode"] == baseline}
    result["baseline"] = baseline
    for r in result["rows"]:
        # Model.generate's speed is compared with the raw decode loop of the same mode
        b = base.get((r["depth"], "tg" if r["kind"] == "gen" else r["kind"]))
        r["ratio_vs_baseline"] = r["tok_s_mean"] / b if b else None


def markdown(result: dict) -> str:
    lines = [f"Machine: {result['machine']}  ",
             f"Model: `{Path(result['model']).name}`, n_ctx {result['n_ctx']}, threads {result['n_threads']}, "
             f"{result['reps']} reps (mean ± sd), baseline `{result['baseline']}`, {result['date']}  ",
             f"Copy bandwidth ({result['copy_bandwidth_device']}, ggml CONT, read + write): "
             f"{result['copy_bandwidth_bytes_s'] / 1e9:.1f} GB/s; a decode row's bound is its MB/token over it", "",
             "| mode | depth | test | tok/s | vs baseline | KV MiB (K+V) | compute MiB | MB/token | of bound |",
             "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in sorted(result["rows"], key=lambda r: (r["kind"], r["depth"], result["modes"].index(r["mode"]))):
        ratio = f"{r['ratio_vs_baseline']:.2f}x" if r["ratio_vs_baseline"] else "-"
        kv = (r["kv_k_bytes"] + r["kv_v_bytes"]) / 2**20
        step = f"{r['bytes_per_token'] / 1e6:.1f} | {r['bandwidth_fraction']:.0%}" if r["bytes_per_token"] else "- | -"
        lines.append(f"| {r['mode']} | {r['depth']} | {r['test']} | {r['tok_s_mean']:.1f} ± {r['tok_s_sd']:.1f} "
                     f"| {ratio} | {kv:.1f} | {r['compute_buffer_bytes'] / 2**20:.1f} | {step} |")
    return "\n".join(lines) + "\n"


def speed_panels(axes: Any, result: dict) -> None:
    """Prefill and decode tok/s against depth, one series per mode, on two axes (this bench's PNG and
    calibrate's)."""
    for ax, kind, title in ((axes[0], "pp", f"prefill (pp{result['pp']})"),
                            (axes[1], "tg", f"decode (tg{result['tg']})")):
        for mode in result["modes"]:
            rows = sorted((r for r in result["rows"] if r["mode"] == mode and r["kind"] == kind),
                          key=lambda r: r["depth"])
            ax.errorbar([r["depth"] for r in rows], [r["tok_s_mean"] for r in rows],
                        yerr=[r["tok_s_sd"] for r in rows], marker="o", capsize=3, label=mode)
        ax.set_title(title)
        ax.set_xlabel("depth (tokens in the KV cache)")
        ax.set_ylabel("tok/s")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=8)


def plot(result: dict, path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    speed_panels(axes, result)
    fig.suptitle(f"{Path(result['model']).name} on {result['machine']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(prog="python -m pyllama90a.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source_arguments(ap, list(DEFAULT_MODES), "1b-hd64")
    ap.add_argument("--depths", nargs="+", type=int, default=[0, 4096])
    ap.add_argument("--pp", type=int, default=512, help="prefill tokens per measurement (0: skip)")
    ap.add_argument("--tg", type=int, default=32, help="decoded tokens per measurement (0: skip)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--n-gpu-layers", type=int, default=-1)
    ap.add_argument("--no-overhead", action="store_true",
                    help="skip the Model.generate vs raw decode loop comparison (gen rows)")
    ap.add_argument("--memory-only", type=int, metavar="N_CTX",
                    help="only report KV and compute-buffer bytes per mode at this n_ctx (no timing)")
    ap.add_argument("--out", help="folder for bench.json, bench.md, bench.png (default: print only)")
    ap.add_argument("--no-plot", action="store_true",
                    help="no bench.png (matplotlib's import crashed in the H200 image's Python; plot elsewhere)")
    args = ap.parse_args(argv)

    modes, baseline = parse_modes(ap, args)
    if args.reps < 1 or min(args.depths) < 0 or args.pp < 0 or args.tg < 0:
        ap.error("--reps must be >= 1 and --depths, --pp, --tg >= 0")
    model_path = model_file(args)
    if args.memory_only:
        table = memory_report(model_path, modes, args.memory_only, baseline, args.n_gpu_layers)
        print(table)
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            (Path(args.out) / f"memory-{args.memory_only}.md").write_text(table)
        return 0
    result = run(model_path, modes, sorted(set(args.depths)), args.pp, args.tg, args.reps, args.threads,
                 args.n_gpu_layers, overhead=not args.no_overhead)
    add_ratios(result, baseline)
    table = markdown(result)
    print(table)
    if args.out:
        out = write_results(Path(args.out), "bench", result, table)
        if not args.no_plot and not plot(result, out / "bench.png"):
            print("matplotlib is not installed: no bench.png (pip install 'pyllama90a[bench]')", file=sys.stderr)
        elif (out / "bench.png").exists():
            print(f"wrote {out}/bench.png", file=sys.stderr)
    return 0

