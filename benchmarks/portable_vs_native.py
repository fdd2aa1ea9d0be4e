"""Portable build (CPU variants, loaded at start-up) against a native build (-march=native) of the same tree.

Each build is installed into its own folder (pip install --target), and `python -m pyllama90a.bench` runs once
per build per round, in separate processes, alternated (native, portable, portable, native, ...), so that the
machine's drift and any order effect hit both alike; with --concurrent both run at once, one thread each on a CPU
of its own (taskset), swapping CPUs every round. The ratio portable / native is taken per round and per
figure; the table gives every round's ratio and their median.

    pip install --no-deps --target /tmp/native -C cmake.define.PYLLAMA90A_PORTABLE=OFF -C build-dir=build/native .
    pip install --no-deps --target /tmp/portable .
    python benchmarks/portable_vs_native.py --native /tmp/native --portable /tmp/portable --rounds 4 \
        --out benchmarks/results/cpu-portable-vs-native
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH_ARGS = ["--depths", "4096", "--modes", "fa-off:f16/f16", "fa-off:q4_0/q4_0", "--no-overhead", "--no-plot"]


def start_bench(site: Path, out: Path, threads: int, length: list[str], cpu: int | None = None) -> subprocess.Popen:
    # the checkout's Python code, the build's compiled part (pyllama90a/__init__.py finds it through PYTHONPATH)
    env = {**os.environ, "PYTHONPATH": str(site)}
    pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
    return subprocess.Popen([*pin, sys.executable, "-m", "pyllama90a.bench", *BENCH_ARGS, *length,
                             "--threads", str(threads), "--out", str(out)], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL)


def finish_bench(proc: subprocess.Popen, out: Path) -> dict:
    if proc.wait() != 0:
        raise RuntimeError(f"{proc.args} exited with {proc.returncode}")
    return json.loads((out / "bench.json").read_text())


def figures(result: dict) -> dict[str, float]:
    """{"fa-off:f16/f16 pp512": tok/s, ...} of one bench.json."""
    found = {}
    for row in result["rows"]:
        found[f"{row['mode']} {row['test']}"] = row["tok_s_mean"]
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--native", type=Path, required=True)
    p.add_argument("--portable", type=Path, required=True)
    p.add_argument("--rounds", type=int, default=4)
    # 1 on a machine that other work shares: a lone thread is slowed in proportion, two threads wait at every
    # barrier for whichever of them was descheduled
    p.add_argument("--threads", type=int, default=2)
    # both builds at the same time, one thread each on a CPU of its own, the CPUs swapped every round: a machine
    # whose speed drifts over minutes (a shared VM) then slows both alike, which alternating runs cannot ensure
    p.add_argument("--concurrent", action="store_true")
    # a decode figure of tg32 x 2 lasts under 2 s; longer ones average over the VM's short stalls
    p.add_argument("--tg", type=int, default=32)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--summarize", action="store_true", help="only summarize the rounds already in --out")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    if args.concurrent:
        args.threads = 1
    length = ["--tg", str(args.tg), "--reps", str(args.reps)]
    rounds: list[dict[str, dict[str, float]]] = []
    machine = ""
    for r in range(args.rounds):
        this: dict[str, dict[str, float]] = {}
        # ABBA: the build that runs first in a round alternates, so that an order effect (a machine faster or
        # slower in the first run after a pause) does not land on one build
        order = ("native", "portable") if r % 2 == 0 else ("portable", "native")
        if args.summarize:
            results = {b: json.loads((args.out / f"round{r + 1}-{b}" / "bench.json").read_text()) for b in order}
        elif args.concurrent:  # order[i] runs on CPU i
            procs = {b: start_bench(getattr(args, b), args.out / f"round{r + 1}-{b}", 1, length, cpu)
                     for cpu, b in enumerate(order)}
            results = {b: finish_bench(procs[b], args.out / f"round{r + 1}-{b}") for b in order}
        else:
            results = {}
            for b in order:
                folder = args.out / f"round{r + 1}-{b}"
                results[b] = finish_bench(start_bench(getattr(args, b), folder, args.threads, length), folder)
        for build in order:
            this[build] = figures(results[build])
            if build == "portable":
                machine = results[build].get("machine", machine)
            print(f"round {r + 1} {build}: {this[build]}", flush=True)
        rounds.append(this)
    keys = list(rounds[0]["native"])
    how = (" --concurrent" if args.concurrent else "") + f" --tg {args.tg} --reps {args.reps}"
    lines = [f"# Portable vs native build, CPU (`benchmarks/portable_vs_native.py --rounds {args.rounds}{how}`)", "",
             f"Machine (portable run): {machine}", "",
             "Bench per run: `python -m pyllama90a.bench " + " ".join(BENCH_ARGS + length)
             + f" --threads {args.threads}` (default model).", "",
             "| figure | native tok/s (median) | portable tok/s (median) | portable / native per round | median |"
             + (" per pair of rounds | median of pairs |" if args.concurrent else ""),
             "|---|---:|---:|---|---:|" + ("---|---:|" if args.concurrent else "")]
    summary = {}
    for key in keys:
        ratios = [rd["portable"][key] / rd["native"][key] for rd in rounds]
        native = statistics.median(rd["native"][key] for rd in rounds)
        portable = statistics.median(rd["portable"][key] for rd in rounds)
        summary[key] = {"native": native, "portable": portable, "ratios": ratios, "median": statistics.median(ratios)}
        line = (f"| {key} | {native:.1f} | {portable:.1f} | {', '.join(f'{x:.3f}' for x in ratios)} | "
                f"**{statistics.median(ratios):.3f}x** |")
        if args.concurrent:
            # rounds 2k+1 and 2k+2 ran each build once on each CPU: their geometric mean cancels a difference
            # between the two CPUs (seen: the second CPU ran either build about 8-15 % faster)
            pairs = [(ratios[i] * ratios[i + 1]) ** 0.5 for i in range(0, len(ratios) - 1, 2)]
            summary[key]["pairs"] = pairs
            summary[key]["median_of_pairs"] = statistics.median(pairs)
            line += f" {', '.join(f'{x:.3f}' for x in pairs)} | **{statistics.median(pairs):.3f}x** |"
        lines.append(line)
    (args.out / "summary.json").write_text(json.dumps({"machine": machine, "rounds": rounds, "summary": summary},
                                                      indent=1))
    (args.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
