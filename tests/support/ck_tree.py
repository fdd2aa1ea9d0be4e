"""The real CK tree (vendor/prepare_ck.py) for the CK FlashAttention tests; they skip only when the
pinned sdist cannot be fetched (no index reachable), never on a wrong digest or a broken tree."""
from __future__ import annotations

from pathlib import Path

import pytest

from support.repo_scripts import script_module


def prepare_ck_module():
    """vendor/prepare_ck.py as a module."""
    return script_module("prepare_ck")


@pytest.fixture(scope="session")
def ck_root() -> Path:
    prepare_ck = prepare_ck_module()
    try:
        return prepare_ck.prepare()
    except prepare_ck.FetchError as e:
        pytest.skip(f"the CK source (flash-attn sdist) could not be fetched: {e}")


@pytest.fixture(scope="session")
def fmha_dir(ck_root: Path) -> Path:
    return ck_root / "example" / "ck_tile" / "01_fmha"
