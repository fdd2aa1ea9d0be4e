"""Shared fixtures: the real default model (SmolLM2-135M-Instruct Q4_1), pulled once if absent."""
from __future__ import annotations

from pathlib import Path

import pytest

import pyllama90a as pl

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="session")
def model_path() -> Path:
    return pl.default_model(pull=True)


@pytest.fixture(scope="session")
def model(model_path: Path):
    """One f16 Model shared by the API tests (read-only use: each test sets up what it needs)."""
    with pl.Model(model_path, n_ctx=1024, seed=1234) as m:
        yield m
