"""The one import point of the native module: `ffi` and `lib`. Importing it initialises llama.cpp once."""
from __future__ import annotations

from pathlib import Path

from . import _native
from ._native import ffi, lib  # (re-exported: __all__)
from . import _log

_log.attach()  # first: loading the backends logs
# A portable build (GGML_BACKEND_DL) registers no backend by itself: load them from the folder of the compiled
# module, where the build put them (in a source checkout that is the installed copy, not this folder), and let
# ggml choose the best CPU variant for this CPU. llama_backend_init would otherwise search the Python
# executable's folder and the current directory. A native build has its backends linked in already.
if lib.ggml_backend_reg_count() == 0:
    lib.ggml_backend_load_all_from_path(str(Path(_native.__file__).resolve().parent).encode())
lib.llama_backend_init()

__all__ = ["ffi", "lib"]
