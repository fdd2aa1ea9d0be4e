"""benchmarks/device/variants_table.py on a committed call's data: the tables and comparisons a results README quotes.

The data is call 2 of benchmarks/results/h100-8b-hd128-0048-0051/ (an NVIDIA H100, the JSON the benches wrote
there); its README's figures were copied from these files by hand, which the tool replaces.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from support.repo_scripts import script_module

CALL2 = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "h100-8b-hd128-0048-0051" / "call2"
variants_table = script_module("variants_table", Path("benchmarks") / "device")


def test_the_tables_give_each_run_s_rates_and_ratios_as_the_readme_quotes() -> None:
    batched, single = variants_table.tables(CALL2, variants_table.OURS, variants_table.REFERENCE, []).split("\n\n")[:2]
    rows = {line.split(" | ")[0].lstrip("| "): line for line in batched.splitlines()}
    # the README: + 0049 + 0050 + 0051 (without-0048) at 32 sequences of 8K, 2240.8 / 2242.6 tok/s, 1.348 / 1.341x
    assert "2240.8 ± 0.6" in rows["without-0048"] and rows["without-0048"].endswith("| 1.348x |")
    assert "2242.6 ± 3.5" in rows["without-0048-run2"] and rows["without-0048-run2"].endswith("| 1.341x |")
    # one sequence, the series through 0047: 0.99x at depth 0 (0.988) and 1.24x at 32K (1.238)
    assert "| without-0048-0051-0050+0049 | 0.988x | 0.992x | 1.058x | 1.238x |" in single.splitlines()


def test_a_build_is_compared_over_its_runs_with_their_spread() -> None:
    text = variants_table.tables(CALL2, variants_table.OURS, variants_table.REFERENCE,
                                 ["without-0048:without-0048-0051", "all:without-0048"])
    # 0051 against the build without it (two runs each): +1.2 % at 32 sequences, the README's figure
    assert ("without-0048 against without-0048-0051: N = 1 +1.0 % (spread 0.4 % / 1.0 %); "
            "N = 8 +1.0 % (spread 0.2 % / 0.3 %); N = 32 +1.2 % (spread 0.1 % / 0.1 %)") in text
    assert "all against without-0048: " in text and "N = 32 -0.3 % (spread one run / 0.1 %)" in text


def test_runs_limits_the_tables_to_one_call_s_runs_and_refuses_a_run_that_is_not_there() -> None:
    text = variants_table.tables(CALL2, variants_table.OURS, variants_table.REFERENCE, [], ["all-run3"])
    assert "| all-run3 |" in text and "without-0048" not in text
    with pytest.raises(SystemExit, match="no batched run all-run4"):
        variants_table.tables(CALL2, variants_table.OURS, variants_table.REFERENCE, [], ["all-run4"])


SWEEP = CALL2.parents[1] / "h200-8b-hd128-0054" / "calls"


def test_a_sweep_of_our_mode_alone_has_no_ratio_column_and_compares_its_builds() -> None:
    # patch 0054's N sweep (an NVIDIA H200): hybrid q4_0 only, 8 sequence counts, both builds in both orders
    text = variants_table.tables(SWEEP, variants_table.OURS, variants_table.REFERENCE, ["all:without-0054"])
    header = text.splitlines()[0]
    assert header.startswith("| run | N = 64 |") and header.endswith("| N = 205 |") and " vs " not in header
    assert "| without-0054 | 2896.0 ± 7.2 | 2807.5 ± 14.3 | 2183.8 ± 9.8 |" in text
    # 67 sequences: 2591.0 / 2588.8 against 2183.8 / 2179.2 tok/s
    assert "N = 67 +18.7 % (spread 0.1 % / 0.2 %)" in text
