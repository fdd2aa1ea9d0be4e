"""flash_attn="auto" and a calibration file (pyllama90a/core/model/calibration.py), with the real default model on
the CPU: a hand-made calibration that prefers another path than the built-in table changes the pick; a corrupt or
foreign file is refused with a logged reason and the table decides; without a file, auto logs once that it guesses."""
from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

import pyllama90a as pl
from pyllama90a.core.gguf.header import read_header
from pyllama90a.core.model import calibration as cal
from pyllama90a.core.model.attention_policy import attention_device, calibrated_choice
from pyllama90a.core.model.shape import attention_shape

N_CTX = 256
DEPTH = N_CTX // cal.REACH  # the depth of the hand-made speed points: deep enough to speak for N_CTX


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PYLLAMA90A_HOME", str(tmp_path))
    cal._guessing_logged.clear()
    return tmp_path


def this_key(model_path: Path) -> cal.CalibrationKey:
    return cal.calibration_key(attention_device(-1)[1], attention_shape(read_header(model_path), model_path))


def preferring(key: cal.CalibrationKey, fastest: str, ctk: str = "q4_0") -> cal.Calibration:
    """A calibration whose `fastest` flash_attn wins both phases for ctk/ctk at DEPTH."""
    speed = tuple(cal.SpeedPoint(fa, False, ctk, ctk, phase, DEPTH, 100.0 if fa == fastest else 50.0)
                  for fa in ("on", "off", "hybrid") for phase in cal.PHASES)
    return cal.Calibration(key, "hand-made", "now", speed, (), ())


def auto_choice(model_path: Path, ctk: str = "q4_0") -> pl.AttentionChoice:
    with pl.Model(model_path, ctk=ctk, ctv=ctk, n_ctx=N_CTX) as m:
        return m.attention


def test_a_calibration_that_prefers_fa_on_changes_the_pick(model_path: Path, home: Path) -> None:
    assert auto_choice(model_path).flash_attn == "off"  # the table's choice on a CPU with a quantized V
    path = cal.write(preferring(this_key(model_path), "on"))
    got = auto_choice(model_path)
    assert (got.flash_attn, got.calibration) == ("on", str(path))
    assert "calibrated" in got.reason
    # a pair the file did not measure stays with the table
    assert (auto_choice(model_path, "q8_0").flash_attn, auto_choice(model_path, "q8_0").calibration) == ("off", None)


def test_a_shallow_calibration_does_not_speak_for_a_longer_context(model_path: Path, home: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    """A --quick file measures depths 0 and 256: it once made auto pick FA on for q4_0 at n_ctx 4096 on this CPU,
    where the table's depth-4096 measurements say off. Beyond REACH x its deepest depth, the table decides."""
    path = cal.write(preferring(this_key(model_path), "on"))
    deeper = N_CTX * 2
    with caplog.at_level(logging.INFO, logger="pyllama90a"), \
            pl.Model(model_path, ctk="q4_0", ctv="q4_0", n_ctx=deeper) as m:
        assert (m.attention.flash_attn, m.attention.calibration) == ("off", None)
    said = [r.getMessage() for r in caplog.records if str(path) in r.getMessage()]
    assert said and f"up to {N_CTX}, not {deeper}" in said[0]
    assert auto_choice(model_path).calibration == str(path)  # at N_CTX it still decides


def test_phases_that_disagree_join_in_hybrid(model_path: Path, home: Path) -> None:
    key = this_key(model_path)
    speed = (cal.SpeedPoint("on", False, "q4_0", "q4_0", "prefill", DEPTH, 100.0),
             cal.SpeedPoint("off", False, "q4_0", "q4_0", "prefill", DEPTH, 50.0),
             cal.SpeedPoint("hybrid", False, "q4_0", "q4_0", "prefill", DEPTH, 99.0),
             cal.SpeedPoint("on", False, "q4_0", "q4_0", "decode", DEPTH, 10.0),
             cal.SpeedPoint("off", False, "q4_0", "q4_0", "decode", DEPTH, 20.0),
             cal.SpeedPoint("hybrid", False, "q4_0", "q4_0", "decode", DEPTH, 19.0))
    cal.write(cal.Calibration(key, "hand-made", "now", speed, (), ()))
    assert auto_choice(model_path).flash_attn == "hybrid"


# tok/s that an H100 80GB HBM3 measured for an iq4_nl cache (benchmarks/results/h100-8b-hd128-calibrate/
# calibration-full.json, depths 0 and 1024): FA has no CUDA kernel for iq4_nl and falls back to the CPU, so FA and
# hybrid prefill at 40-313 tok/s, while hybrid's decode edges out FA-off's (204.5 against 203.5, geometric mean)
H100_IQ4_NL = {("on", False): ((298.7, 130.9), (40.0, 25.6)), ("off", False): ((7801.7, 212.1), (6541.7, 195.2)),
               ("hybrid", False): ((311.4, 211.9), (40.6, 197.4)), ("hybrid", True): ((312.7, 203.6), (42.0, 201.8))}


def test_a_decode_winner_whose_prefill_is_far_slower_is_not_picked(model_path: Path, home: Path) -> None:
    """Picking each phase's winner and then the decode's once took hybrid for iq4_nl on the H100: a 512-token
    prompt in 12.8 s instead of 0.08 s, for a decode 0.5 % faster. The pick is the path that serves a whole
    request (cal.REQUEST) fastest."""
    speed = tuple(cal.SpeedPoint(fa, fused, "iq4_nl", "iq4_nl", phase, depth, tok_s)
                  for (fa, fused), by_depth in H100_IQ4_NL.items()
                  for depth, phases in zip((0, DEPTH), by_depth, strict=True)
                  for phase, tok_s in zip(cal.PHASES, phases, strict=True))
    cal.write(cal.Calibration(this_key(model_path), "hand-made", "now", speed, (), ()))
    got = auto_choice(model_path, "iq4_nl")
    assert (got.flash_attn, got.fused_decode) == ("off", False)
    assert "512-token prompt" in got.reason and got.reason.index("off ") < got.reason.index("hybrid ")


@pytest.mark.parametrize("damage", ["corrupt", "foreign", "wrong-field"])
def test_a_corrupt_or_foreign_file_is_refused_and_the_table_decides(model_path: Path, home: Path, damage: str,
                                                                     caplog: pytest.LogCaptureFixture) -> None:
    key = this_key(model_path)
    path = cal.write(preferring(key, "on"))
    if damage == "corrupt":
        path.write_text(path.read_text()[:-40])
    elif damage == "foreign":  # a file copied from another device, at this key's name
        path.write_text(preferring(replace(key, device="ROCm0 (AMD Instinct MI210)"), "on").to_json())
    else:
        path.write_text(path.read_text().replace('"tok_s": 100.0', '"tok_s": "fast"'))
    with caplog.at_level(logging.WARNING, logger="pyllama90a"):
        got = auto_choice(model_path)
    assert (got.flash_attn, got.calibration) == ("off", None)
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert refused and str(path) in refused[0]
    expected = {"corrupt": "not JSON", "foreign": "made for another device", "wrong-field": "tok_s must be a float"}
    assert expected[damage] in refused[0]


def test_without_a_calibration_auto_logs_once_that_it_guesses(model_path: Path, home: Path,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="pyllama90a"):
        auto_choice(model_path)
        auto_choice(model_path)
    guessing = [r for r in caplog.records if "a guess here" in r.getMessage()]
    assert len(guessing) == 1 and "calibrate" in guessing[0].getMessage()
    # the table was measured on CPUs: a guess on another CPU is worth an INFO line, not a warning at every start
    assert guessing[0].levelno == logging.INFO


def test_a_guess_on_a_device_kind_the_table_never_measured_is_a_warning(model_path: Path, home: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    shape = attention_shape(read_header(model_path), model_path)
    with caplog.at_level(logging.INFO, logger="pyllama90a"):
        assert calibrated_choice("q4_0", "q4_0", "gfx90a", "ROCm0 (AMD Instinct MI210)", shape, N_CTX) is None
    guessing = [r for r in caplog.records if "a guess here" in r.getMessage()]
    assert len(guessing) == 1 and guessing[0].levelno == logging.WARNING


def test_the_file_round_trips(model_path: Path, home: Path) -> None:
    calibration = preferring(this_key(model_path), "hybrid")
    calibration = replace(calibration, memory=(cal.MemoryPoint("off", "q4_0", "q4_0", 256, 1000, 2000),),
                          quality=(cal.QualityPoint("off", "decode", "q4_0", "q4_0", 0.05, 0.9, 20.5, 20.1),))
    path = cal.write(calibration)
    assert path.parent == home / "calibrations"
    assert cal.parse(path.read_text(), this_key(model_path)) == calibration
