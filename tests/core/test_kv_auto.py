"""ctk="auto", ctv="auto" with kv_quality and kv_budget (pyllama90a/core/model/kv_auto.py), with the real default
model and a calibration file of this device whose quality figures are set by hand: a tighter bound takes a
larger type, a budget too small for every measured type is refused naming what was measured."""
from __future__ import annotations

from pathlib import Path

import pytest

import pyllama90a as pl
from pyllama90a.core.gguf.header import read_header
from pyllama90a.core.model import calibration as cal
from pyllama90a.core.model.attention_policy import attention_device
from pyllama90a.core.model.shape import attention_shape

N_CTX = 256
KL = {"f16": 0.0, "q8_0": 0.004, "q4_0": 0.06}


@pytest.fixture
def calibrated(model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PYLLAMA90A_HOME", str(tmp_path))
    key = cal.calibration_key(attention_device(-1)[1], attention_shape(read_header(model_path), model_path))
    quality = tuple(cal.QualityPoint(fa, phase, t, t, kl * (1.5 if phase == "decode" else 1.0), 0.9, 20.0, 20.0)
                    for t, kl in KL.items() for fa in ("off", "hybrid") for phase in cal.PHASES)
    return cal.write(cal.Calibration(key, "hand-made", "now", (), (), quality))


def auto_types(model_path: Path, **bounds: object) -> tuple[str, str]:
    with pl.Model(model_path, ctk="auto", ctv="auto", n_ctx=N_CTX, **bounds) as m:
        return m.ctk, m.ctv


def test_a_tighter_kv_quality_takes_a_larger_type(model_path: Path, calibrated: Path) -> None:
    assert auto_types(model_path) == ("q4_0", "q4_0")  # no bound: the smallest measured
    assert auto_types(model_path, kv_quality=0.1) == ("q4_0", "q4_0")
    # q4_0's worst phase (decode, 0.09) is past 0.08: the bound holds for every path and phase
    assert auto_types(model_path, kv_quality=0.08) == ("q8_0", "q8_0")
    assert auto_types(model_path, kv_quality=0.001) == ("f16", "f16")


def test_kv_budget_takes_the_smallest_that_fits_or_names_what_was_measured(model_path: Path,
                                                                           calibrated: Path) -> None:
    q8 = pl.kv_bytes(model_path, N_CTX, "q8_0", "q8_0").total_bytes
    assert auto_types(model_path, kv_quality=0.01, kv_budget=q8) == ("q8_0", "q8_0")
    with pytest.raises(pl.InvalidArgumentError, match=r"no measured cache type .* q4_0/q4_0: KL 0\.09000") as e:
        auto_types(model_path, kv_quality=0.01, kv_budget=q8 - 1)
    assert str(calibrated) in str(e.value) and "f16/f16: KL 0.00000" in str(e.value)


def test_the_header_is_read_once_for_every_measured_type(model_path: Path, calibrated: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A large model's header (its vocabulary) is megabytes: kv_auto sizes each measured type from one read."""
    from pyllama90a.core.model import kv_auto, kv_budget
    from pyllama90a.core.model.settings import ContextSettings

    reads: list[object] = []

    def counted(path: object, **limits: int) -> object:
        reads.append(path)
        return read_header(path, **limits)  # type: ignore[arg-type]

    monkeypatch.setattr(kv_auto, "read_header", counted)
    monkeypatch.setattr(kv_budget, "read_header", counted)
    settings = ContextSettings(ctk="auto", ctv="auto", n_ctx=N_CTX)
    assert (kv_auto.resolve_kv_types(settings, model_path, 0).ctk, len(reads)) == ("q4_0", 1)


def test_auto_types_need_a_calibration(model_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYLLAMA90A_HOME", str(tmp_path))
    with pytest.raises(pl.InvalidArgumentError, match=r"needs a calibration .* pyllama90a calibrate"):
        auto_types(model_path)


@pytest.mark.parametrize("settings", [{"ctk": "auto"}, {"kv_quality": 0.1}, {"kv_budget": 1 << 20},
                                      {"ctk": "auto", "ctv": "auto", "kv_quality": -1.0},
                                      {"ctk": "auto", "ctv": "auto", "kv_budget": "1 GiB"}])
def test_half_auto_or_a_bound_without_auto_is_refused(model_path: Path, settings: dict[str, object]) -> None:
    with pytest.raises(pl.InvalidArgumentError):
        pl.Model(model_path, n_ctx=N_CTX, **settings)
