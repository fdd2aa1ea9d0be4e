"""The real CK tree (vendor/prepare_ck.py) for the CK FlashAttention tests; they skip only when the
pinned sdist cannot be fetched (no index reachable), never on a wrong digest or a broken tree."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

VENDOR = Path(__file__).resolve().parents[2] / "vendor"


def prepare_ck_module():
    """vendor/prepare_ck.py as a module (vendor/ is no package: scripts run by CMake)."""
    if "prepare_ck" not in sys.modules:
        spec = importlib.util.spec_from_file_location("prepare_ck", VENDOR / "prepare_ck.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["prepare_ck"] = module
        spec.loader.exec_module(module)
    return sys.modules["prepare_ck"]


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
