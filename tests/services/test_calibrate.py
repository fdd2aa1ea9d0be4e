"""`pl.calibrate` and `python -m pyllama90a.bench quality` with the real default model, at tiny sizes: the
calibration round trip (measure, write, flash_attn="auto" reads it and picks what it says), and quality figures
that are the same on a rerun."""
from __future__ import annotations

from pathlib import Path

import pytest

import pyllama90a as pl
from pyllama90a.bench import quality
from pyllama90a.bench.calibrate import Preset, memory_modes, speed_modes
from pyllama90a.core.gguf.header import read_header
from pyllama90a.core.model import calibration as cal
from pyllama90a.core.model.shape import attention_shape

# depth 16: a calibration speaks for n_ctx up to REACH x its deepest depth, 64 here
TINY = Preset(depths=(0, 16), pp=8, tg=4, reps=1, types=("f16", "q4_0"), quality_n_ctx=16, quality_chunks=1)


def test_calibrate_writes_a_file_that_auto_follows(model_path: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYLLAMA90A_HOME", str(tmp_path))
    path = pl.calibrate(model_path, preset=TINY, n_ctx=64, n_threads=1, progress=False, out=tmp_path / "report")
    assert path.parent == tmp_path / "calibrations"
    with pl.Model(model_path, ctk="q4_0", ctv="q4_0", n_ctx=64) as m:
        key = cal.calibration_key(m.attention.backend, attention_shape(read_header(model_path), model_path))
        written = cal.parse(path.read_text(), key)
        said = cal.choose_flash_attn(written, "q4_0", "q4_0", 64)
        assert said is not None
        assert (m.attention.flash_attn, m.attention.calibration) == (said.flash_attn, str(path))
    # what it measured: both phases of each mode, the memory of each mode, the quality of each type and path
    assert {(p.flash_attn, p.phase) for p in written.speed if p.ctk == "q4_0"} == \
        {(fa, phase) for fa in ("on", "off", "hybrid") for phase in cal.PHASES}
    assert {(m.flash_attn, m.ctk) for m in written.memory} == {("on", "f16"), ("off", "f16"), ("on", "q4_0"),
                                                                ("off", "q4_0"), ("hybrid", "q4_0")}
    assert all(m.kv_bytes > 0 for m in written.memory)
    q4 = [q for q in written.quality if q.ctk == "q4_0"]
    assert len(q4) == len(quality.PATHS) * len(quality.PHASES) and all(q.mean_kl > 0 for q in q4)
    assert (tmp_path / "report" / "calibration.md").read_text().startswith("# Calibration of")


def test_quality_figures_are_the_same_on_a_rerun(model_path: Path) -> None:
    def measure() -> list[quality.QualityRow]:
        return quality.measure_quality(model_path, [("q8_0", "q8_0"), ("q4_0", "q4_0")], ("off",), quality.PHASES,
                                       n_ctx=32, n_chunks=1, n_threads=1)

    first, second = measure(), measure()
    assert [r.mean_kl for r in first] == pytest.approx([r.mean_kl for r in second], rel=1e-6)
    assert [(r.top1, round(r.perplexity, 4)) for r in first] == [(r.top1, round(r.perplexity, 4)) for r in second]
    q8, q4 = (r for r in first if r.phase == "decode")
    assert 0 < q8.mean_kl < q4.mean_kl  # 4 bits cost more than 8: the measure sees the cache's rounding


@pytest.mark.parametrize("args,message", [(["/nonexistent.gguf", "--quick"], "no model file at /nonexistent.gguf"),
                                          (["--quick", "--n-ctx", "0"], "n_ctx must be a positive integer")])
def test_calibrate_command_refuses_bad_input_clearly(args: list[str], message: str) -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "pyllama90a", "calibrate", *args], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and f"error: {message}" in out.stderr, out.stderr[-2000:]


def test_a_gpu_calibration_plans_the_memory_of_each_path_once() -> None:
    # on the H100 (2026-12-05) the report listed hybrid q4_0 twice, once for hybrid and once for hybrid + fused,
    # with nothing to tell the rows apart
    planned = memory_modes(speed_modes(("f16", "q8_0", "q4_0"), on_gpu=True))
    assert [(m.flash_attn, m.ctk) for m in planned] == [
        ("on", "f16"), ("off", "f16"), ("on", "q8_0"), ("off", "q8_0"), ("hybrid", "q8_0"), ("on", "q4_0"),
        ("off", "q4_0"), ("hybrid", "q4_0")]
    assert all(m.variant == "fused" for m in planned if m.flash_attn == "hybrid")  # what auto runs on a GPU
