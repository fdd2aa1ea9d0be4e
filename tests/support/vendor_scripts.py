"""vendor/'s scripts as modules: vendor/ is no package (CMake and people run its scripts), and tests call their
functions."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

VENDOR = Path(__file__).resolve().parents[2] / "vendor"


def vendor_module(name: str):
    """vendor/<name>.py, loaded once and registered in sys.modules (its dataclasses need that)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, VENDOR / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
