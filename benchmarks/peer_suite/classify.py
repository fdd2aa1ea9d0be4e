"""Classify the failures of a peer-suite run (run.py's JUnit reports) and write the per-file table and the
failure list of benchmarks/results/llama-server-suite/:

    python benchmarks/peer_suite/classify.py REPORTS_DIR [--out benchmarks/results/llama-server-suite]

Each failure gets the class of the first rule (classes.py) that matches its file, its test's name and its
message; one that none matches is "unclassified", to be read and given a rule."""
from __future__ import annotations

import argparse
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from classes import RULES


def failures(report: Path) -> tuple[int, int, int, list[tuple[str, str]]]:
    """(pass, fail, skip, [(test, message)]) of one file's report."""
    suite = ET.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    failed: list[tuple[str, str]] = []
    skipped = 0
    total = 0
    for case in suite.iter("testcase"):
        total += 1
        problem = case.find("failure")
        problem = problem if problem is not None else case.find("error")
        if problem is not None:
            failed.append((case.get("name", ""), " ".join((problem.get("message") or "").split())))
        elif case.find("skipped") is not None:
            skipped += 1
    return total - len(failed) - skipped, len(failed), skipped, failed


def classify(file: str, test: str, message: str) -> tuple[str, str]:
    for rule_file, name, text, kind, why in RULES:
        if rule_file == file and re.search(name, test) and (text is None or re.search(text, message)):
            return kind, why
    return "unclassified", message[:200]


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("reports", type=Path)
    p.add_argument("--out", type=Path, default=Path(__file__).resolve().parents[1] / "results" / "llama-server-suite")
    args = p.parse_args()
    rows, listed = [], []
    totals = [0, 0, 0]
    for report in sorted(args.reports.glob("test_*.xml")):
        file = report.stem.removeprefix("test_")
        passed, failed, skipped, cases = failures(report)
        totals = [totals[0] + passed, totals[1] + failed, totals[2] + skipped]
        kinds: dict[str, int] = {}
        for test, message in cases:
            kind, why = classify(file, test, message)
            kinds[kind] = kinds.get(kind, 0) + 1
            listed.append(f"| {file} | `{test}` | {kind} | {why} |")
        summary = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
        rows.append(f"| {file} | {passed} | {failed} | {skipped} | {summary} |")
    args.out.mkdir(parents=True, exist_ok=True)
    table = ["| file | pass | fail | skip | failures by class |", "|---|---|---|---|---|", *rows,
             f"| **all** | **{totals[0]}** | **{totals[1]}** | **{totals[2]}** | |"]
    (args.out / "counts.md").write_text("\n".join(table) + "\n")
    (args.out / "failures.md").write_text(
        "# Every failing test of the last run, with its class\n\n(written by benchmarks/peer_suite/classify.py from "
        "the run's JUnit reports; the classes and their reasons: benchmarks/peer_suite/classes.py)\n\n"
        "| file | test | class | why |\n|---|---|---|---|\n" + "\n".join(listed) + "\n")
    print("\n".join(table))
    unclassified = sum("| unclassified |" in line for line in listed)
    print(f"{len(listed)} failures, {unclassified} unclassified")
    return 0


if __name__ == "__main__":
    sys.exit(main())
