"""`python -m pyllama90a.bench batched`: N sequences, each at depth D, decoding together, per attention mode.

What llama.cpp's batched-bench measures for decode, and what a server on a GPU does: every step decodes one
token of each of N sequences in one batch (a KV stream per sequence, n_seq_max = N). Reported per (mode, D, N):
aggregate tok/s (N tokens per step), per-sequence tok/s, the KV + compute bytes of a context of N sequences of
that depth (plan_memory: simulated, nothing allocated), and the attention path the decode takes. A (mode, D, N)
whose planned weights + KV + compute exceed --memory-limit-gib is skipped and reported so.

    python -m pyllama90a.bench batched --synthetic 8b-hd128 --n-seq 1 8 32 --depths 2048 8192 \\
        --modes fa-on:f16/f16 hybrid:q4_0/q4_0+fused --memory-limit-gib 130 --kv-budget-gb 100

One context per (mode, D), of the largest N that fits: sequence 0 is filled to D by prefill, the others get its
cells (a sequence state copy), and each N decodes on sequences 0..N-1. Modes run one after another (two contexts
of 100 GB do not fit one device together), not interleaved as the single-sequence bench runs them.
--kv-budget-gb: the largest N whose KV cache at --budget-depth fits that many bytes, per mode, from the plans
(llama.cpp's limit of 256 sequences applied); --measure-budget also decodes at that N and compares each mode there
with the baseline at its own N (equal KV memory). --plan-only: the plans alone (which (mode, D, N) fit, and the
budget), no decoding: on any machine, in seconds.
"""
from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from ..core.model.memory_plan import MemoryPlanner
from ..core.model.model import Model
from ..native.batch import Batch
from ..native.context import LLAMA_MAX_SEQ, MIN_CELLS_PER_SEQUENCE, ContextHandle
from ..native.devices import device_memory, local_offload_devices
from ..native.kv_types import block_size
from .modes import Mode, add_source_arguments, model_file, parse_modes
from .report import machine_name, write_results


@dataclass(frozen=True)
class Plan:
    n_seq: int
    kv_bytes: int
    compute_bytes: int
    weights_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.compute_bytes


def cells_per_sequence(depth: int, tg: int) -> int:
    """A sequence's cells: its depth and the decoded tokens, in llama.cpp's multiples of 256."""
    return -(-(depth + tg + 1) // MIN_CELLS_PER_SEQUENCE) * MIN_CELLS_PER_SEQUENCE


def batch_size(n_seq: int) -> int:
    """n_batch (and n_ubatch) of a context of n_seq sequences: one step's N tokens in one ubatch."""
    return max(512, n_seq)


@functools.cache
def _planner(model_path: Path, mode: Mode, n_seq: int, n_gpu_layers: int) -> MemoryPlanner:
    """One planner per (mode, N), for every depth: each reads the file's metadata once."""
    return MemoryPlanner(model_path, n_gpu_layers=n_gpu_layers, ctk=mode.ctk, ctv=mode.ctv, flash_attn=mode.flash_attn,
                         n_seq_max=n_seq, n_batch=batch_size(n_seq), n_ubatch=batch_size(n_seq),
                         attention_paths=mode.attention_paths)


def plan(model_path: Path, mode: Mode, n_seq: int, cells: int, n_gpu_layers: int) -> Plan:
    mode.apply_environment()
    p = _planner(model_path, mode, n_seq, n_gpu_layers).plan(n_seq * cells)
    return Plan(n_seq, p.cache.total_bytes, p.cache.compute_bytes, p.weights_bytes)


def attention_path(mode: Mode, on_gpu: bool, n_seq: int, gqa: int) -> str:
    """The decode's attention path at N sequences (one token each, a KV stream each) of a model with `gqa` query
    heads a KV head. Hybrid with the fused kernel: llama-attn's rule (patches 0012/0013) takes it for every N (grid
    z = the N streams; tests/core/test_hybrid_attention.py checks that on the GPU). FA on: fattn.cu's rule on CUDA
    from compute capability 8.9 (the bench's H100/H200):
    - a quantized K or V, or no GQA: the vector kernel at every N;
    - f16 with GQA: the vector kernel for one stream (it wants Q->ne[3] == 1) of up to 4 query heads a KV head, the
      tensor-core kernel for several streams (flash_attn_ext_f16, seen under ncu:
      benchmarks/results/h200-8b-hd128-batched/); one stream past 4 goes by the cache's length, which the label
      says rather than guess."""
    if mode.flash_attn == "on":
        if not on_gpu:
            return "flash attention"
        if block_size(mode.ctk) > 1 or block_size(mode.ctv) > 1 or gqa == 1 or (n_seq == 1 and gqa <= 4):
            return "flash attention (vector kernel on CUDA)"
        if n_seq > 1:
            return "flash attention (tensor-core kernel on CUDA)"
        return "flash attention (vector or tensor-core kernel on CUDA, by depth)"
    if mode.flash_attn == "hybrid":
        if mode.attention_paths.fused_decode and on_gpu:
            return "fused decode kernel, N streams in one launch"
        return "non-flash (K^T q, softmax, V^T p)"
    return "non-flash" if mode.flash_attn == "off" else "llama.cpp decides"


def copy_sequence(context: ContextHandle, n_seq: int) -> None:
    """Sequence 0's cells (filled by prefill) copied to sequences 1..n_seq-1 (untimed)."""
    state = context.sequence_state_bytes(0)
    for seq in range(1, n_seq):
        context.set_sequence_state(seq, state)


@contextmanager
def filled_context(model_path: Path, mode: Mode, n_seq: int, depth: int, tg: int, n_threads: int | None,
                   n_gpu_layers: int) -> Iterator[tuple[ContextHandle, Batch, list[int]]]:
    """A context of n_seq sequences of cells_per_sequence(depth, tg) cells each: sequence 0 filled to `depth` by
    prefill, its cells copied to the others (untimed). Yields the context, a batch of n_seq tokens and the tokens
    that decode_steps reads (benchmarks/device/ncu_batched.py profiles its steps too)."""
    mode.apply_environment()
    with Model(model_path, ctk=mode.ctk, ctv=mode.ctv, flash_attn=mode.flash_attn,
               n_ctx=n_seq * cells_per_sequence(depth, tg), n_seq_max=n_seq, n_batch=batch_size(n_seq),
               n_ubatch=batch_size(n_seq), n_threads=n_threads, n_gpu_layers=n_gpu_layers,
               attention_paths=mode.attention_paths) as model:
        tokens: list[int] = np.random.default_rng(0).integers(10, model.handle.n_vocab, size=depth + tg + 1).tolist()
        if depth:
            model.eval(tokens[:depth])
        with model.hold_context("the batched bench") as context, Batch(n_seq) as batch:
            if depth:
                copy_sequence(context, n_seq)
            yield context, batch, tokens


def decode_steps(context: ContextHandle, batch: Batch, tokens: list[int], depth: int, n_seq: int, tg: int) -> float:
    """Seconds for tg steps of one token of each of sequences 0..n_seq-1 (logits for each, as a server asks),
    after which their cells are cut back to `depth`."""
    t0 = time.perf_counter()
    for step in range(tg):
        batch.clear()
        for seq in range(n_seq):
            batch.add([tokens[(depth + step + seq) % len(tokens)]], depth + step, seq, "last")
        context.decode(batch)
    context.synchronize()
    elapsed = time.perf_counter() - t0
    for seq in range(n_seq):
        context.trim_sequence(seq, depth)
    return elapsed


DEFAULT_LIMIT_SOURCE = "the GPUs' free memory less 1 GiB each"  # what default_memory_limit reads, for the table


def default_memory_limit(n_gpu_layers: int) -> float | None:
    """Without --memory-limit-gib: where layers go to GPUs, their free memory now, less 1 GiB each (the CUDA
    runtime's own buffers, beyond the plan), so that a context this machine cannot hold is skipped and reported, not
    tried: one that failed to allocate ended the whole bench (the H200's 100 GB of KV on an H100, 2026-12-07). On
    the CPU none: the plan's bytes are the system's to page."""
    gpus = local_offload_devices() if n_gpu_layers != 0 else []
    return float(sum(device_memory(dev)[0] - 2**30 for dev in gpus)) if gpus else None


def budget_n_seq(model_path: Path, mode: Mode, depth: int, budget_bytes: float, n_gpu_layers: int) -> dict[str, Any]:
    """The largest N whose KV cache at `depth` fits `budget_bytes`, from one sequence's planned KV bytes."""
    one = plan(model_path, mode, 1, cells_per_sequence(depth, 0), n_gpu_layers)
    n = int(budget_bytes // one.kv_bytes)
    return {"mode": str(mode), "depth": depth, "budget_bytes": budget_bytes, "kv_bytes_per_sequence": one.kv_bytes,
            "n_seq_fit": n, "n_seq": min(n, LLAMA_MAX_SEQ)}


def run(model_path: Path, modes: list[Mode], depths: list[int], n_seqs: list[int], tg: int, reps: int,
        n_threads: int | None, n_gpu_layers: int, memory_limit: float | None, extra_n: dict[tuple[str, int], int],
        plan_only: bool = False, progress: TextIO = sys.stderr) -> dict[str, Any]:
    from ..native.ggml import devices

    on_gpu = n_gpu_layers != 0 and any(d.is_gpu for d in devices())
    rows: list[dict[str, Any]] = []
    for depth in depths:
        cells = cells_per_sequence(depth, tg)
        for mode in modes:
            wanted = sorted(set(n_seqs) | ({extra_n[str(mode), depth]} if (str(mode), depth) in extra_n else set()))
            plans = {n: plan(model_path, mode, n, cells, n_gpu_layers) for n in wanted}
            fits = [n for n in wanted if memory_limit is None or plans[n].total_bytes <= memory_limit]
            for n in wanted:
                if n not in fits:
                    rows.append({"mode": str(mode), "depth": depth, "n_seq": n, "skipped": "does not fit",
                                 "planned_bytes": plans[n].total_bytes, "kv_bytes": plans[n].kv_bytes,
                                 "compute_bytes": plans[n].compute_bytes})
                    print(f"{mode} depth {depth} N {n}: {plans[n].total_bytes / 2**30:.1f} GiB planned, skipped",
                          file=progress, flush=True)
            if plan_only:
                rows += [{"mode": str(mode), "depth": depth, "n_seq": n, "planned": "fits",
                          "planned_bytes": plans[n].total_bytes, "kv_bytes": plans[n].kv_bytes,
                          "compute_bytes": plans[n].compute_bytes} for n in fits]
            if not fits or plan_only:
                continue
            n_max = max(fits)
            print(f"{mode} depth {depth}: a context of {n_max} sequences, filling ...", file=progress, flush=True)
            with filled_context(model_path, mode, n_max, depth, tg, n_threads, n_gpu_layers) as filled:
                context, batch, tokens = filled
                for n in fits:
                    times = [decode_steps(context, batch, tokens, depth, n, tg) for _ in range(reps + 1)][1:]
                    agg = [n * tg / t for t in times]
                    p = plans[n]
                    rows.append({"mode": str(mode), "depth": depth, "n_seq": n,
                                 "path": attention_path(mode, on_gpu, n, context.model.gqa),
                                 "aggregate_tok_s": statistics.fmean(agg),
                                 "aggregate_tok_s_sd": statistics.stdev(agg) if len(agg) > 1 else 0.0,
                                 "per_sequence_tok_s": statistics.fmean(agg) / n, "samples": agg,
                                 "kv_bytes": p.kv_bytes, "compute_bytes": p.compute_bytes,
                                 "planned_bytes": p.total_bytes})
                    print(f"{mode} depth {depth} N {n}: {statistics.fmean(agg):.1f} tok/s aggregate",
                          file=progress, flush=True)
    return {"machine": machine_name(), "model": str(model_path), "tg": tg, "reps": reps, "depths": depths,
            "n_seqs": n_seqs, "modes": [str(m) for m in modes], "n_threads": n_threads,
            "memory_limit_bytes": memory_limit, "rows": rows, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}


def add_ratios(result: dict[str, Any], baseline: str) -> None:
    """Each measured row against the baseline at its (depth, N); with --measure-budget each mode's budget N
    against the baseline's own (equal KV memory)."""
    measured = {(r["mode"], r["depth"], r["n_seq"]): r["aggregate_tok_s"] for r in result["rows"]
                if "aggregate_tok_s" in r}
    result["baseline"] = baseline
    for r in result["rows"]:
        b = measured.get((baseline, r["depth"], r["n_seq"]))
        r["ratio_vs_baseline"] = r["aggregate_tok_s"] / b if b and "aggregate_tok_s" in r else None
    budget = result.get("budget", [])
    for b in budget:
        b["aggregate_tok_s"] = measured.get((b["mode"], b["depth"], b["n_seq"]))
    base_budget = next((b["aggregate_tok_s"] for b in budget if b["mode"] == baseline), None)
    for b in budget:
        b["ratio_vs_baseline"] = b["aggregate_tok_s"] / base_budget if b["aggregate_tok_s"] and base_budget else None


def markdown(result: dict[str, Any]) -> str:
    limit = result["memory_limit_bytes"]
    skipped = (f"An N whose planned weights + KV + compute exceed {limit / 2**30:.1f} GiB "
               f"({result['memory_limit_source']}) is skipped." if limit is not None
               else "No memory limit: every N is tried.")
    lines = [f"Machine: {result['machine']}  ",
             f"Model: `{Path(result['model']).name}`, tg {result['tg']} steps, {result['reps']} reps (mean ± sd), "
             f"baseline `{result['baseline']}`, {result['date']}  ",
             "Each step decodes one token of each of N sequences at depth D (a KV stream each); KV + compute "
             f"from plan_memory at N sequences of that depth. {skipped}", "",
             "| mode | depth | N | aggregate tok/s | vs baseline | per-sequence tok/s | KV MiB | compute MiB | path |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in sorted(result["rows"], key=lambda r: (r["depth"], r["n_seq"], result["modes"].index(r["mode"]))):
        mib = f"{r['kv_bytes'] / 2**20:.1f} | {r['compute_bytes'] / 2**20:.1f}"
        if "skipped" in r or "planned" in r:
            lines.append(f"| {r['mode']} | {r['depth']} | {r['n_seq']} | - | - | - | {mib} | "
                         f"{r.get('skipped', 'fits, not run')} ({r['planned_bytes'] / 2**30:.1f} GiB planned) |")
            continue
        ratio = f"{r['ratio_vs_baseline']:.2f}x" if r["ratio_vs_baseline"] else "-"
        lines.append(f"| {r['mode']} | {r['depth']} | {r['n_seq']} | {r['aggregate_tok_s']:.1f} ± "
                     f"{r['aggregate_tok_s_sd']:.1f} | {ratio} | {r['per_sequence_tok_s']:.2f} | {mib} | {r['path']} |")
    if result.get("budget"):
        lines += ["", "Largest N whose KV cache fits the budget (plan_memory of one sequence; llama.cpp takes at "
                  "most 256 sequences), and with --measure-budget each mode's aggregate at its own N (equal KV "
                  "memory):", "", "| mode | depth | KV budget GB | KV MB per sequence | N that fits | N (<= 256) | "
                  "aggregate tok/s at that N | vs baseline, each at its own N |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for b in result["budget"]:
            tok_s = f"{b['aggregate_tok_s']:.1f}" if b.get("aggregate_tok_s") else "-"
            ratio = f"{b['ratio_vs_baseline']:.2f}x" if b.get("ratio_vs_baseline") else "-"
            lines.append(f"| {b['mode']} | {b['depth']} | {b['budget_bytes'] / 1e9:g} | "
                         f"{b['kv_bytes_per_sequence'] / 1e6:.1f} | {b['n_seq_fit']} | {b['n_seq']} | {tok_s} | "
                         f"{ratio} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyllama90a.bench batched", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source_arguments(ap, ["fa-on:f16/f16", "hybrid:q4_0/q4_0+fused"], "8b-hd128")
    ap.add_argument("--n-seq", nargs="+", type=int, default=[1, 8, 32])
    ap.add_argument("--depths", nargs="+", type=int, default=[2048, 8192])
    ap.add_argument("--tg", type=int, default=16, help="decode steps per measurement")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--n-gpu-layers", type=int, default=-1)
    ap.add_argument("--memory-limit-gib", type=float, help="skip an N whose planned weights + KV + compute exceed it "
                    "(default: on a GPU, its free memory less 1 GiB; on the CPU, no limit)")
    ap.add_argument("--kv-budget-gb", type=float, help="report the largest N whose KV fits this many GB (1e9 bytes)")
    ap.add_argument("--budget-depth", type=int, default=8192, help="the depth of --kv-budget-gb's sequences")
    ap.add_argument("--measure-budget", action="store_true", help="also decode at each mode's budget N")
    ap.add_argument("--plan-only", action="store_true", help="only the memory plans and the budget: no decoding")
    ap.add_argument("--out", help="folder for batched.json and batched.md (default: print only)")
    args = ap.parse_args(argv)

    modes, baseline = parse_modes(ap, args)
    if args.reps < 1 or args.tg < 1 or min(args.depths) < 0 or min(args.n_seq) < 1 or max(args.n_seq) > LLAMA_MAX_SEQ:
        ap.error(f"--reps and --tg must be >= 1, --depths >= 0, --n-seq between 1 and {LLAMA_MAX_SEQ}")
    if args.measure_budget and args.kv_budget_gb is None:
        ap.error("--measure-budget needs --kv-budget-gb")
    model_path = model_file(args)
    budget = [budget_n_seq(model_path, m, args.budget_depth, args.kv_budget_gb * 1e9, args.n_gpu_layers)
              for m in modes] if args.kv_budget_gb is not None else []
    extra = {(b["mode"], b["depth"]): b["n_seq"] for b in budget} if args.measure_budget else {}
    if args.memory_limit_gib is not None:
        limit, source = args.memory_limit_gib * 2**30, "--memory-limit-gib"
    else:
        limit, source = default_memory_limit(args.n_gpu_layers), DEFAULT_LIMIT_SOURCE
    result = run(model_path, modes, sorted(set(args.depths)), sorted(set(args.n_seq)), args.tg, args.reps, args.threads,
                 args.n_gpu_layers, limit, extra, plan_only=args.plan_only)
    result["memory_limit_source"] = source if limit is not None else None
    result["budget"] = budget
    add_ratios(result, baseline)
    table = markdown(result)
    print(table)
    if args.out:
        write_results(Path(args.out), "batched", result, table)
    return 0
