"""The examples run as a user would run them."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.parametrize("script,expect", [
    ("quickstart.py", "Paris"),
    ("context_budget.py", "K and V q4_0"),
    ("save_and_resume.py", "same continuation: True"),
    ("batch_engine.py", "Paris"),
    ("async_users.py", "ana: The capital of France is' Paris"),
])
def test_example_runs(model_path, script: str, expect: str) -> None:
    out = subprocess.run([sys.executable, str(EXAMPLES / script), str(model_path)], capture_output=True, text=True,
                         timeout=300, cwd="/")
    assert out.returncode == 0, out.stderr
    assert expect in out.stdout
