"""ruff over the repository's Python (the rules are in pyproject.toml's [tool.ruff]): a finding fails the run
with ruff's own report. Skipped only where ruff is not installed (it is in the `test` extra)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> list[str]:
    try:
        import ruff  # the pip package: its binary sits next to the interpreter's scripts
    except ImportError:
        ruff = None
    if ruff is not None:
        return [sys.executable, "-m", "ruff"]
    if shutil.which("ruff"):
        return ["ruff"]
    pytest.skip("ruff is not installed (pip install '.[test]')")


def test_ruff_finds_nothing() -> None:
    out = subprocess.run([*_ruff(), "check", "--no-cache", "--output-format", "concise", "."], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"ruff check found problems:\n{out.stdout}{out.stderr}"


def test_ruff_reads_the_projects_rules(tmp_path: Path) -> None:
    """The check above means something: with the project's configuration, ruff reports a planted defect."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n\n\ndef f():\n    try:\n        return 1\n    except Exception:\n        return eval('2')\n")
    out = subprocess.run([*_ruff(), "check", "--no-cache", "--output-format", "concise",
                          "--config", str(ROOT / "pyproject.toml"), str(bad)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1, out.stdout + out.stderr
    for code in ("F401", "BLE001", "S307"):
        assert code in out.stdout, out.stdout
