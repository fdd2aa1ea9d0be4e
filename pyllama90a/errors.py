"""The exceptions pyllama90a raises. Every failure of llama.cpp reaches users through `check`."""
from __future__ import annotations

from typing import Any


class LlamaError(Exception):
    """Base class of every pyllama90a error. `native_log` holds llama.cpp's last log lines."""

    def __init__(self, message: str, native_log: list[str] | None = None) -> None:
        self.native_log = list(native_log or [])
        if self.native_log:
            message = message + "\nllama.cpp said:\n  " + "\n  ".join(self.native_log)
        super().__init__(message)


class ModelFormatError(LlamaError, ValueError):
    """The file is not a usable GGUF model (missing, not GGUF, truncated, absurd header)."""


class ModelLoadError(LlamaError):
    """llama.cpp could not load the model."""


class ContextError(LlamaError):
    """llama.cpp could not create the context (KV types, sizes, backend support)."""


class InvalidArgumentError(LlamaError, ValueError):
    """An argument is out of range or of the wrong kind."""


class ContextOverflowError(InvalidArgumentError):
    """The prompt (plus what is to be generated) does not fit the context."""


class DecodeError(LlamaError):
    """llama_decode/llama_encode failed."""


class ClosedError(LlamaError):
    """The model was closed and cannot be used any more."""


def check(ok: Any, exc_type: type[LlamaError], message: str) -> Any:
    """Return `ok` if it is a usable result; otherwise raise `exc_type` with llama.cpp's recent log.

    NULL pointers, False and negative return codes are failures.
    """
    failed = ok is None or ok is False or (isinstance(ok, int) and not isinstance(ok, bool) and ok < 0)
    if not failed:
        try:
            from ._ffi import ffi

            failed = isinstance(ok, ffi.CData) and ok == ffi.NULL
        except ImportError:  # pragma: no cover - the native module is always built
            pass
    if failed:
        from ._log import recent_native_log

        raise exc_type(message, recent_native_log())
    return ok


def positive_int(name: str, value: object) -> int:
    """`value` if it is a positive int (not a bool); else InvalidArgumentError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidArgumentError(f"{name} must be a positive integer, got {value!r}")
    return value
