"""The repository's scripts as modules: vendor/ and benchmarks/ are no packages (CMake and people run their
scripts), and tests call their functions. One loader for all of them."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENDOR = ROOT / "vendor"


def script_module(name: str, folder: Path = Path("vendor")):
    """<folder>/<name>.py (folder relative to the repository), loaded once and registered in sys.modules (its
    dataclasses need that)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
