"""Portable build (CPU variants, loaded at start-up) against a native build (-march=native) of the same tree.

Each build is installed into its own folder (pip install --target), and `python -m pyllama90a.bench` runs once
per build per round, in separate processes, alternated (native, portable, portable, native, ...), so that the
machine's drift and any order effect hit both alike. The ratio portable / native is taken per round and per figure; the table gives
every round's ratio and their median.

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
BENCH_ARGS = ["--depths", "4096", "--modes", "fa-off:f16/f16", "fa-off:q4_0/q4_0", "--reps", "2",
              "--no-overhead", "--no-plot"]


def run_bench(site: Path, out: Path, threads: int) -> dict:
    # the checkout's Python code, the build's compiled part (pyllama90a/__init__.py finds it through PYTHONPATH)
    env = {**os.environ, "PYTHONPATH": str(site)}
    subprocess.run([sys.executable, "-m", "pyllama90a.bench", *BENCH_ARGS, "--threads", str(threads), "--out", str(out)], cwd=ROOT, env=env,
                   check=True, stdout=subprocess.DEVNULL)
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
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    rounds: list[dict[str, dict[str, float]]] = []
    machine = ""
    for r in range(args.rounds):
        this: dict[str, dict[str, float]] = {}
        # ABBA: the build that runs first in a round alternates, so that an order effect (a machine faster or
        # slower in the first run after a pause) does not land on one build
        for build in (("native", "portable") if r % 2 == 0 else ("portable", "native")):
            result = run_bench(getattr(args, build), args.out / f"round{r + 1}-{build}", args.threads)
            this[build] = figures(result)
            if build == "portable":
                machine = result.get("machine", machine)
            print(f"round {r + 1} {build}: {this[build]}", flush=True)
        rounds.append(this)
    keys = list(rounds[0]["native"])
    lines = [f"# Portable vs native build, CPU (`benchmarks/portable_vs_native.py --rounds {args.rounds}`)", "",
             f"Machine (portable run): {machine}", "",
             "Bench per run: `python -m pyllama90a.bench " + " ".join(BENCH_ARGS)
             + f" --threads {args.threads}` (default model).", "",
             "| figure | native tok/s (median) | portable tok/s (median) | portable / native per round | median |",
             "|---|---:|---:|---|---:|"]
    summary = {}
    for key in keys:
        ratios = [rd["portable"][key] / rd["native"][key] for rd in rounds]
        native = statistics.median(rd["native"][key] for rd in rounds)
        portable = statistics.median(rd["portable"][key] for rd in rounds)
        summary[key] = {"native": native, "portable": portable, "ratios": ratios, "median": statistics.median(ratios)}
        lines.append(f"| {key} | {native:.1f} | {portable:.1f} | {', '.join(f'{x:.3f}' for x in ratios)} | "
                     f"**{statistics.median(ratios):.3f}x** |")
    (args.out / "summary.json").write_text(json.dumps({"machine": machine, "rounds": rounds, "summary": summary},
                                                      indent=1))
    (args.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
