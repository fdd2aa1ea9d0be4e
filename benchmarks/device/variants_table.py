#!/usr/bin/env python3
"""Kernel versions side by side, from one call's benches: the tables a results README quotes, read from the data.

variants.sh's default bench leaves, per run, RESULTS/batched-RUN/batched.json (N sequences decoding together) and
RESULTS/single-RUN/bench.json (one sequence at several depths); RUN is the variant ("all", "without-0051", ...) and
"-run2", "-run3" mark its later runs on the same machine. This prints, in the order the runs were made:

  - N = 1 / 8 / 32 (the batched bench's sequence counts): our mode's aggregate tok/s (mean ± sd of its reps), and at
    the largest N its ratio to the reference mode in the same table;
  - one sequence: our decode over the reference's at each depth, in the same table (between processes the
    reference itself drifts, so only the ratio is compared);
  - for each --vs A:B, build A against build B (the means over each build's runs) at every N, with each build's
    spread (max - min over its runs), so that a gain is read against it.

    python3 benchmarks/device/variants_table.py RESULTS [--runs RUN ...] [--vs all:without-0051 ...]

A warm machine's RESULTS also holds its earlier calls' runs, and "all" is another build in each call: --runs names
this call's runs (the README's tables come from one call each).
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

OURS = "hybrid:q4_0/q4_0+fused"
REFERENCE = "fa-on:f16/f16"


def runs(results: Path, kind: str, name: str, only: list[str] | None) -> dict[str, dict]:
    """RUN -> that run's JSON, in the order of the runs' dates (only the runs named in only, if given)."""
    found = {f.parent.name[len(kind) + 1:]: json.loads(f.read_text())
             for f in results.glob(f"{kind}-*/{name}.json")}
    missing = sorted(set(only or ()) - set(found))
    if missing:
        raise SystemExit(f"variants_table: no {kind} run {', '.join(missing)} under {results}")
    return dict(sorted(((r, d) for r, d in found.items() if only is None or r in only), key=lambda kv: kv[1]["date"]))


def build_of(run: str) -> str:
    return re.sub(r"-run\d+$", "", run)


def batched_rates(data: dict, mode: str) -> dict[int, tuple[float, float]]:
    """N -> (mean, sd) aggregate tok/s of mode at the table's first depth."""
    depth = data["depths"][0]
    return {r["n_seq"]: (r["aggregate_tok_s"], r["aggregate_tok_s_sd"]) for r in data["rows"]
            if r["mode"] == mode and r["depth"] == depth}


def decode_ratios(data: dict, ours: str, reference: str) -> dict[int, float]:
    """depth -> our decode tok/s over the reference's, one sequence."""
    tg = {(r["mode"], r["depth"]): r["tok_s_mean"] for r in data["rows"] if r["kind"] == "tg"}
    return {d: tg[(ours, d)] / tg[(reference, d)] for d in data["depths"] if (ours, d) in tg and (reference, d) in tg}


def tables(results: Path, ours: str, reference: str, versus: list[str], only: list[str] | None = None) -> str:
    batched = runs(results, "batched", "batched", only)
    single = runs(results, "single", "bench", only)
    if not batched and not single:
        raise SystemExit(f"variants_table: no batched-*/batched.json or single-*/bench.json under {results}")
    out = []
    if batched:
        n_seqs = sorted(next(iter(batched.values()))["n_seqs"])
        rates = {run: (batched_rates(data, ours), batched_rates(data, reference)) for run, data in batched.items()}
        # a sweep of N for our mode alone (a kernel change past one wave) has no reference: no ratio column
        with_reference = all(n_seqs[-1] in ref_n for _, ref_n in rates.values())
        ratio_head = [f"N = {n_seqs[-1]} vs {reference}"] if with_reference else []
        out += [f"| {' | '.join(['run'] + [f'N = {n}' for n in n_seqs] + ratio_head)} |",
                "|---|" + "---:|" * (len(n_seqs) + len(ratio_head))]
        for run, (ours_n, ref_n) in rates.items():
            cells = [f"{ours_n[n][0]:.1f} ± {ours_n[n][1]:.1f}" for n in n_seqs]
            if with_reference:
                cells.append(f"{ours_n[n_seqs[-1]][0] / ref_n[n_seqs[-1]][0]:.3f}x")
            out.append(f"| {run} | {' | '.join(cells)} |")
        out.append("")
    if single:
        depths = next(iter(single.values()))["depths"]
        out += [f"| run | {' | '.join(f'depth {d}' for d in depths)} |", "|---|" + "---:|" * len(depths)]
        for run, data in single.items():
            ratios = decode_ratios(data, ours, reference)
            out.append(f"| {run} | {' | '.join(f'{ratios[d]:.3f}x' for d in depths)} |")
        out.append("")
    for pair in versus:
        a, b = pair.split(":")
        out.append(f"{a} against {b}: " + compare(batched, a, b, ours))
    return "\n".join(out)


def compare(batched: dict[str, dict], a: str, b: str, mode: str) -> str:
    def rates(build: str) -> dict[int, list[float]]:
        got: dict[int, list[float]] = {}
        for run, data in batched.items():
            if build_of(run) == build:
                for n, (mean, _) in batched_rates(data, mode).items():
                    got.setdefault(n, []).append(mean)
        if not got:
            raise SystemExit(f"variants_table: no batched run of {build!r}")
        return got
    ra, rb = rates(a), rates(b)

    def spread(v: list[float]) -> str:
        return f"{100 * (max(v) - min(v)) / min(v):.1f} %" if len(v) > 1 else "one run"
    return "; ".join(
        f"N = {n} {100 * (sum(ra[n]) / len(ra[n]) / (sum(rb[n]) / len(rb[n])) - 1):+.1f} % "
        f"(spread {spread(ra[n])} / {spread(rb[n])})" for n in sorted(ra) if n in rb)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path, help="the folder holding batched-RUN/ and single-RUN/ (the call's r/)")
    ap.add_argument("--ours", default=OURS)
    ap.add_argument("--reference", default=REFERENCE)
    ap.add_argument("--runs", nargs="+", metavar="RUN", help="this call's runs (default: every run found)")
    ap.add_argument("--vs", action="append", default=[], metavar="A:B", help="build A against build B")
    args = ap.parse_args(argv)
    print(tables(args.results, args.ours, args.reference, args.vs, args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
