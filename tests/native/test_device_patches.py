"""The device's patches on top of the series: benchmarks/device/experiments/ (variants.sh's WITH, each alone) and
benchmarks/device/candidates/ (copied into vendor/patches/ by a call, in order) apply to the prepared source.

A patch that no longer applies fails on the device, after the build, at the cost of a call: four experiments
had gone stale that way (their launches written before patch 0042 changed them) before this test.
"""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEVICE = ROOT / "benchmarks" / "device"
EXPERIMENTS = sorted((DEVICE / "experiments").glob("*.patch"))
CANDIDATES = sorted((DEVICE / "candidates").glob("*.patch"))  # numbered: the order a call applies them in


@pytest.fixture(scope="module")
def prepared() -> Path:
    """llama.cpp's source with vendor/patches/ applied (the build's; prepared again if absent)."""
    out = subprocess.run([sys.executable, str(ROOT / "vendor" / "prepare_source.py")], capture_output=True,
                         text=True, timeout=1800)
    assert out.returncode == 0, out.stderr[-2000:]
    return Path(out.stdout.strip().splitlines()[-1])


def _apply_in_order(prepared: Path, patches: list[Path], work: Path) -> None:
    """The files the patches touch, copied from the prepared tree into work/, then each patch applied in turn."""
    touched = {m for p in patches for m in re.findall(r"^\+\+\+ b/(\S+)", p.read_text(), re.M)}
    for rel in touched:
        if (prepared / rel).is_file():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(prepared / rel, work / rel)
    for p in patches:
        run = subprocess.run(["git", "apply", str(p)], cwd=work, capture_output=True, text=True, timeout=60)
        assert run.returncode == 0, f"{p.name} does not apply on the series:\n{run.stderr}"


def test_the_device_has_experiments() -> None:
    assert EXPERIMENTS, "no experiment patches: the glob or the folder moved"


@pytest.mark.parametrize("patch", EXPERIMENTS, ids=lambda p: p.stem)
def test_each_experiment_applies_on_the_series(prepared: Path, patch: Path, tmp_path: Path) -> None:
    _apply_in_order(prepared, [patch], tmp_path)


@pytest.mark.skipif(not CANDIDATES, reason="no candidate patches are queued")
def test_the_candidates_apply_on_the_series_in_order(prepared: Path, tmp_path: Path) -> None:
    _apply_in_order(prepared, CANDIDATES, tmp_path)


def test_a_stale_patch_fails_to_apply(prepared: Path, tmp_path: Path) -> None:
    """The control: an experiment whose context is no longer in the source does not apply."""
    stale = tmp_path / "stale.patch"
    stale.write_text(re.sub(r"^ (.*ggml_cuda_kernel_launch\(kernel,.*)$", r" \1 /* changed */",
                            (DEVICE / "experiments" / "attn-twice.patch").read_text(), count=1, flags=re.M))
    assert stale.read_text() != (DEVICE / "experiments" / "attn-twice.patch").read_text()
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(AssertionError, match="does not apply"):
        _apply_in_order(prepared, [stale], work)
