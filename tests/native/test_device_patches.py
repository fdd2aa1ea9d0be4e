"""The device's patches on top of the series: benchmarks/device/experiments/ (variants.sh's WITH, each alone) and
benchmarks/device/candidates/ (copied into vendor/patches/ by a call, in order) apply to the prepared source.

A patch that no longer applies fails on the device, after the build, at the cost of a call: four experiments
had gone stale that way (their launches written before patch 0042 changed them) before this test.
"""
from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from support.repo_scripts import script_module

ROOT = Path(__file__).resolve().parents[2]
DEVICE = ROOT / "benchmarks" / "device"
EXPERIMENTS = sorted((DEVICE / "experiments").glob("*.patch"))
CANDIDATES = sorted((DEVICE / "candidates").glob("*.patch"))  # numbered: the order a call applies them in
patch_report = script_module("patch_report")


@pytest.fixture(scope="module")
def prepared() -> Path:
    """llama.cpp's source with vendor/patches/ applied (the build's; prepared again if absent)."""
    return script_module("prepare_source").prepare()


def _apply_in_order(prepared: Path, patches: list[Path], work: Path) -> None:
    """The files the patches touch, copied from the prepared tree into work/, then each patch applied in turn by
    patch_report (GNU patch, as the build applies vendor/patches/). Every hunk must apply without fuzz: the
    device's variants.sh applies experiments with git apply, which takes offsets and no fuzz."""
    for rel in {f.path for p in patches for f in patch_report.parse_patch(p)}:
        if (prepared / rel).is_file():
            (work / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(prepared / rel, work / rel)
    for p in patches:
        bad = [f"{r.path} #{r.number} {r.status} {r.detail}" for r in patch_report.apply_patch(work, p)
               if r.status not in ("clean", "offset")]
        assert not bad, f"{p.name} does not apply on the series: " + "; ".join(bad)


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
