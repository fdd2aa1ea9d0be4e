"""What llama.cpp says: its log lines go to the Python logger `pyllama90a.native` (quiet by default), and its
warnings and errors also to the NativeCall open on the thread that logged them, so an error carries what
llama.cpp said about the call that failed.

llama.cpp logs on the thread that makes the call, so a capture per thread gives each user of the library (a
generation, the engine thread, the embedder) its own lines: there is no shared buffer that another thread's
lines could fill or clear.
"""
from __future__ import annotations

import atexit
import collections
import logging
import threading
from typing import TYPE_CHECKING, NoReturn

from .._native import ffi, lib
from ..errors import LlamaError

if TYPE_CHECKING:  # pragma: no cover
    from .._native import CData  # (only in the stub, _native.pyi)

logger = logging.getLogger("pyllama90a.native")
logger.addHandler(logging.NullHandler())
logger.propagate = False  # quiet unless the user adds a handler or calls set_native_log_level

_GGML_TO_LOGGING = {1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}
KEPT_LINES = 8  # an error shows llama.cpp's last few warnings and errors, not a whole load log
# per thread: .partial (a line llama.cpp sent in pieces, so far) and .capture (the open NativeCall's lines)
_thread = threading.local()


@ffi.def_extern()
def pyllama90a_on_log(level: int, text: CData) -> None:  # text: a char*, from C
    # llama.cpp may send one line in several pieces: join them until the newline
    buf = getattr(_thread, "partial", "") + ffi.string(text).decode("utf-8", "replace")
    if not buf.endswith("\n"):
        _thread.partial = buf
        return
    _thread.partial = ""
    py_level = _GGML_TO_LOGGING.get(level, logging.INFO)
    capture = getattr(_thread, "capture", None) if py_level >= logging.WARNING else None
    for line in buf.splitlines():
        if not line.strip():
            continue
        if capture is not None:
            capture.append(line.strip())
        logger.log(py_level, "%s", line)


class NativeCall:
    """A block of native calls on this thread whose warning and error lines are kept in `lines`; `check` is the
    one place a failed native result becomes an exception, carrying those lines.

        with NativeCall() as call:
            rc = lib.llama_decode(ctx, batch)
        call.check(rc == 0, DecodeError, f"llama_decode failed with code {rc}")
    """

    __slots__ = ("_outer", "lines")

    def __enter__(self) -> NativeCall:
        self.lines: collections.deque[str] = collections.deque(maxlen=KEPT_LINES)
        self._outer = getattr(_thread, "capture", None)
        _thread.capture = self.lines
        return self

    def __exit__(self, *exc: object) -> None:
        _thread.capture = self._outer

    def check(self, ok: bool, error: type[LlamaError], message: str) -> None:
        """Raise `error(message)` with the lines this call logged unless `ok`."""
        if not ok:
            self.fail(error, message)

    def fail(self, error: type[LlamaError], message: str) -> NoReturn:
        """Raise `error(message)` with the lines this call logged (for a failure found without `check`)."""
        raise error(message, list(self.lines))


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
