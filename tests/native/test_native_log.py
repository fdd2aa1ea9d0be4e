"""set_native_log_level: llama.cpp's own log lines reach Python logging handlers, filtered by level."""
from __future__ import annotations

import logging

import pytest

import pyllama90a as pl

NATIVE = "pyllama90a.native"


@pytest.fixture
def native_log(caplog: pytest.LogCaptureFixture):
    """caplog (its handler is on the root logger), with the native logger's state put back afterwards."""
    logger = logging.getLogger(NATIVE)
    level, propagate = logger.level, logger.propagate
    yield caplog
    pl.set_native_log_level("INFO")  # the level llama.cpp's log is attached at when the package loads
    logger.setLevel(level)
    logger.propagate = propagate


def _native_records_of_a_model_load(caplog: pytest.LogCaptureFixture, model_path) -> list[logging.LogRecord]:
    caplog.clear()
    with pl.Model(model_path, n_ctx=128, n_threads=2):
        pass
    return [r for r in caplog.records if r.name == NATIVE]


def test_info_lines_of_a_model_load_reach_a_handler(native_log, model_path) -> None:
    pl.set_native_log_level("INFO")
    records = _native_records_of_a_model_load(native_log, model_path)
    messages = [r.getMessage() for r in records]
    assert any(m.startswith("llama_model_loader: loaded meta data") for m in messages), messages[:5]
    assert {r.levelno for r in records} <= {logging.INFO, logging.WARNING, logging.ERROR}
    assert all(m == m.strip("\n") and m.strip() for m in messages)  # whole lines, no empty ones


def test_a_higher_level_filters_the_info_lines(native_log, model_path) -> None:
    pl.set_native_log_level("INFO")
    assert any(r.levelno == logging.INFO for r in _native_records_of_a_model_load(native_log, model_path))
    pl.set_native_log_level(logging.WARNING)  # a number works as well as a name
    assert not [r for r in _native_records_of_a_model_load(native_log, model_path) if r.levelno < logging.WARNING]


def test_debug_adds_llama_cpps_debug_lines(native_log, model_path) -> None:
    pl.set_native_log_level("INFO")
    info = _native_records_of_a_model_load(native_log, model_path)
    pl.set_native_log_level("DEBUG")
    debug = _native_records_of_a_model_load(native_log, model_path)
    assert not any(r.levelno == logging.DEBUG for r in info)
    assert any(r.levelno == logging.DEBUG for r in debug)
