"""The one import point of the native module: `ffi` and `lib`. Importing it initialises llama.cpp once."""
from __future__ import annotations

from ._native import ffi, lib  # (re-exported: __all__)
from . import _log

lib.llama_backend_init()
_log.attach()

__all__ = ["ffi", "lib"]
