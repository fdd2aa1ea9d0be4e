"""`python -m pyllama90a.selftest`: every attention path of this build passes, and a failing path fails the run."""
from __future__ import annotations

import subprocess
import sys


def _selftest(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyllama90a.selftest", *args], capture_output=True, text=True,
                          timeout=900)


def test_quick_selftest_passes_and_reports_paths_and_speed() -> None:
    out = _selftest("--quick")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = out.stdout
    assert "## Attention paths:" in report and " 0 failed" in report
    # the quantized-cache paths of our patches are among the rows, each with its own result
    for mode in ("fa-off:q4_0/q4_0", "fa-off:f16/q4_0", "fa-off:q4_0/f16", "fa-off:q4_0/q4_0+deq"):
        assert f"| `{mode}` |" in report
    assert report.count("| pass |") >= 7  # 7 FA-off paths on the CPU, more with a GPU
    assert "## Speed" in report and "| fa-on:q4_0/q4_0 | 256 | tg8 |" in report
    assert "`python -m pyllama90a calibrate [MODEL] [--quick]`" in report  # where an owner goes next


def test_a_path_outside_its_bound_fails_the_run(tmp_path) -> None:
    """With a zero bound, any path that is not bit-identical to the CPU reference fails: exit status 1."""
    report_file = tmp_path / "report.md"
    out = _selftest("--quick", "--no-speed", "--noise-factor", "0", "--out", str(report_file))
    assert out.returncode == 1, out.stderr[-3000:]
    assert "**FAIL**" in report_file.read_text()
