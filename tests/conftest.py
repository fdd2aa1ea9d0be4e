"""Shared fixtures: the real default model (SmolLM2-135M-Instruct Q4_1), pulled once if absent; and the test tiers.

Every test is in one tier: the one its module declares (`pytestmark`: server, cuda, hip, slow), else "model"
when it uses the model fixtures, else "fast". `pytest -m fast` is the development loop; `pytest` runs all.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import pyllama90a as pl

DATA = Path(__file__).parent / "data"

TIERS = ("fast", "model", "server", "slow", "cuda", "hip")
MODEL_FIXTURES = {"model", "model_path"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("wheel") is not None:
            item.add_marker(pytest.mark.slow)
        if any(item.get_closest_marker(tier) is not None for tier in TIERS):
            continue
        uses_model = MODEL_FIXTURES & set(getattr(item, "fixturenames", ()))
        item.add_marker(pytest.mark.model if uses_model else pytest.mark.fast)


@pytest.fixture(scope="session")
def model_path() -> Path:
    return pl.default_model(pull=True)


@pytest.fixture(scope="session")
def model(model_path: Path):
    """One f16 Model shared by the API tests (read-only use: each test sets up what it needs)."""
    with pl.Model(model_path, n_ctx=1024, seed=1234) as m:
        yield m
