"""llama.cpp's log lines go to the Python logger `pyllama90a.native` (quiet by default).

The last warnings and errors are also kept, so that an exception can say what llama.cpp said.
"""
from __future__ import annotations

import atexit
import collections
import logging
import threading

from ._native import ffi, lib

logger = logging.getLogger("pyllama90a.native")
logger.addHandler(logging.NullHandler())
logger.propagate = False  # quiet unless the user adds a handler or calls set_native_log_level

_GGML_TO_LOGGING = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
_recent: collections.deque[str] = collections.deque(maxlen=8)
_partial = threading.local()


@ffi.def_extern()
def pyllama90a_on_log(level: int, text) -> None:  # called from C
    # llama.cpp may send one line in several pieces: join them until the newline
    buf = getattr(_partial, "buf", "") + ffi.string(text).decode("utf-8", "replace")
    if not buf.endswith("\n"):
        _partial.buf = buf
        return
    _partial.buf = ""
    for line in buf.splitlines():
        if not line.strip():
            continue
        py_level = _GGML_TO_LOGGING.get(level, logging.INFO)
        if py_level >= logging.WARNING:
            _recent.append(line.strip())
        logger.log(py_level, "%s", line)


def attach() -> None:
    # INFO and above reach Python (a few hundred lines at load time, none per token)
    lib.pyllama90a_log_attach(2)
    atexit.register(lib.pyllama90a_log_detach)


def set_native_log_level(level: int | str) -> None:
    """Show llama.cpp's log at `level` and above on the root logger's handlers (e.g. "INFO")."""
    logger.setLevel(level)
    logger.propagate = True
    # setLevel has accepted the name, so getLevelName maps it to its number
    numeric_level: int = logging.getLevelName(level) if isinstance(level, str) else level
    lib.pyllama90a_log_attach(1 if numeric_level <= logging.DEBUG else 2)


def clear_recent() -> None:
    _recent.clear()


def recent_native_log() -> list[str]:
    return list(_recent)
