"""vendor/patch_report.py: the per-hunk report of how the patch series applies, on the pinned llama.cpp source
and on a copy of it that one hunk no longer fits."""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.repo_scripts import VENDOR, script_module

REPORT = VENDOR / "patch_report.py"
prepare_source = script_module("prepare_source")
patch_report = script_module("patch_report")
PIN = prepare_source.load_pin()


@pytest.fixture(scope="module")
def pinned_sdist() -> Path:
    sdist = prepare_source.local_sdist(PIN)
    if sdist is None:
        pytest.skip(f"the pinned llama.cpp sdist ({PIN['sdist']}) is not on this machine: fetching it needs the "
                    f"package index (the build does that; then rerun)")
    prepare_source.verify(sdist, PIN)
    return sdist


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPORT), *args], capture_output=True, text=True, timeout=300)


def _count(patch: Path) -> int:
    return sum(len(f.hunks) for f in patch_report.parse_patch(patch))


def _hunk_lines(stdout: str, patch: str) -> list[str]:
    """The per-hunk lines of one patch's section of the report."""
    section = stdout.split(patch + ":", 1)[1]
    lines = []
    for line in section.splitlines()[1:]:
        if not line.startswith("  "):
            break
        if line.lstrip().startswith("#"):
            lines.append(line)
    return lines


def test_every_hunk_applies_to_the_pinned_source(pinned_sdist: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # --pinned reads the same sdist the skip check found: from the environment variable where that named it
    monkeypatch.setenv("PYLLAMA90A_LLAMA_CPP_SRC", str(pinned_sdist))
    out = _run("--pinned")
    assert out.returncode == 0, out.stdout + out.stderr
    total = 0
    for patch in prepare_source.PATCHES:
        hunks = _count(patch)
        total += hunks
        lines = _hunk_lines(out.stdout, patch.name)
        assert len(lines) == hunks, (patch.name, lines)
        assert not [ln for ln in lines if "FAILED" in ln], lines
    summary = out.stdout.strip().splitlines()[-1]
    assert summary.startswith(f"OK: {len(prepare_source.PATCHES)} patches, {total} hunks:"), summary
    assert summary.endswith(" 0 failed"), summary


def test_a_hunk_whose_context_changed_is_named_and_later_patches_still_reported(pinned_sdist: Path,
                                                                                tmp_path: Path) -> None:
    tree = tmp_path / "llama.cpp"
    prepare_source.unpack(pinned_sdist, PIN["subdir"], tree)
    # take a hunk of 0002 and change every line it needs to find (its context and removed lines), so neither
    # an offset nor fuzz can place it
    patch = next(p for p in prepare_source.PATCHES if p.name.startswith("0002-"))
    target = patch_report.parse_patch(patch)[-1]
    hunk = target.hunks[0]
    source = tree / target.path
    lines = source.read_text().split("\n")
    n = len(hunk.old_lines)
    start = next(i for i in range(len(lines) - n + 1) if lines[i:i + n] == hunk.old_lines)
    lines[start:start + n] = [f"/* changed upstream */ {ln}" for ln in hunk.old_lines]
    source.write_text("\n".join(lines))
    before = sorted(p.relative_to(tree) for p in tree.rglob("*"))

    out = _run(str(tree))
    assert out.returncode == 1, out.stdout + out.stderr
    failed = [ln for ln in out.stdout.splitlines() if "FAILED" in ln and "@@" in ln]
    assert len(failed) == 1, out.stdout
    assert re.match(r"\s+#1\s+FAILED\s+" + re.escape(hunk.header), failed[0]), failed[0]
    section = out.stdout.split(patch.name + ":", 1)[1]
    assert section.splitlines()[0].strip() == f"{_count(patch)} hunks, 1 FAILED"
    assert f"  {target.path}\n{failed[0]}" in section  # under the file it patches
    # the patches after it were still applied and reported, hunk by hunk
    later = [p for p in prepare_source.PATCHES if p.name > patch.name]
    assert later
    for p in later:
        assert len(_hunk_lines(out.stdout, p.name)) == _count(p), p.name
    summary = out.stdout.strip().splitlines()[-1]
    assert summary.startswith("FAILED: ") and summary.endswith(f" 1 failed (in {patch.name})"), summary
    # the given tree was only read
    assert sorted(p.relative_to(tree) for p in tree.rglob("*")) == before
    assert "changed upstream" in source.read_text()
    assert "llama_kv_cache_bytes" not in (tree / "include" / "llama.h").read_text()
