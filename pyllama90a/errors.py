"""The exceptions pyllama90a raises, and the argument checkers that turn bad input into them.

Every failure of llama.cpp reaches users through `native.NativeCall.check`, with the lines llama.cpp logged;
every argument that goes to C goes through one of the checkers below first, so a bad value is an
InvalidArgumentError, never cffi's OverflowError/TypeError or a UnicodeEncodeError.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

INT32_MAX = 2**31 - 1
UINT32_MAX = 2**32 - 1


class LlamaError(Exception):
    """Base class of every pyllama90a error. `native_log` holds the warning and error lines llama.cpp logged
    during the native call that failed (on the thread that made it)."""

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
    """An argument is out of range or of the wrong kind. `param` names the argument (for the server: the request
    field) when the code that raised it knows which one, e.g. "tools" or "messages[2].content"; else None."""

    def __init__(self, message: str, native_log: list[str] | None = None, *, param: str | None = None) -> None:
        super().__init__(message, native_log)
        self.param = param


class ChatTemplateError(InvalidArgumentError):
    """A chat template does not compile or fails to render (its syntax, a raise_exception() call, an undefined
    value it needs, an operation the sandbox refuses); the message carries the template's own words and line."""


class UnsupportedChatTemplateError(ChatTemplateError):
    """llama.cpp's built-in chat template (used for a model file without a Jinja template) refused the
    messages."""

    def __init__(self, message: str, native_log: list[str] | None = None, *, param: str | None = "messages") -> None:
        super().__init__(message, native_log, param=param)


class ConstraintError(InvalidArgumentError):
    """A JSON schema, regular expression, grammar, response_format or tool-call format that cannot constrain
    generation (invalid, or using what the constraint library does not support); the message names the field."""


class ContextOverflowError(InvalidArgumentError):
    """The prompt (plus what is to be generated) does not fit the context. `n_prompt_tokens` and `n_ctx` (the
    context it had to fit) are set where they are known (llama-server's exceed_context_size_error reports them)."""

    def __init__(self, message: str, native_log: list[str] | None = None, *, param: str | None = None,
                 n_prompt_tokens: int | None = None, n_ctx: int | None = None) -> None:
        super().__init__(message, native_log, param=param)
        self.n_prompt_tokens, self.n_ctx = n_prompt_tokens, n_ctx


class InfillUnsupportedError(InvalidArgumentError):
    """The model cannot fill in the middle: its vocabulary lacks a FIM token an infill prompt needs (the message
    names each missing one)."""


class LoraAdapterError(InvalidArgumentError):
    """A LoRA adapter that cannot be used: a file that is not a LoRA GGUF for this model's architecture, an
    activated LoRA (aLoRA, not supported), a scale that is not a finite number, an adapter id that was not loaded.
    `param` is "lora" (the server's field and Model's argument)."""

    def __init__(self, message: str, native_log: list[str] | None = None, *, param: str | None = "lora") -> None:
        super().__init__(message, native_log, param=param)


class DraftModelError(InvalidArgumentError):
    """A draft model (speculative decoding) that cannot draft for its target: its vocabulary differs (the message
    names the first difference, by llama.cpp's rules), or `draft` is neither a GGUF path nor a Model. `param` is
    "draft"."""

    def __init__(self, message: str, native_log: list[str] | None = None, *, param: str | None = "draft") -> None:
        super().__init__(message, native_log, param=param)


class DecodeError(LlamaError):
    """llama_decode/llama_encode failed."""


class NonFiniteOutputError(DecodeError):
    """The model computed NaN or infinite logits or embeddings: its weights (or values such as norm epsilons)
    are broken. Raised instead of text sampled from garbage."""


class ClosedError(LlamaError):
    """The model was closed and cannot be used any more."""


class BusyError(LlamaError):
    """A generation stream is running on this Model; the call would race with it."""


class QueueFullError(LlamaError):
    """Every slot of a BatchEngine is busy and its waiting queue is full; retry later."""


class EngineStoppedError(ClosedError):
    """A BatchEngine's thread ended on an unexpected exception (its `__cause__`): the engine serves nothing
    more. A ClosedError, since the engine is as unusable as a closed one; close() still frees the model."""


class StateFileError(LlamaError):
    """A state file is missing, unreadable, corrupt, or was saved by another model or context."""


@contextlib.contextmanager
def about(param: str) -> Iterator[None]:
    """InvalidArgumentErrors raised inside, which name no argument, are about `param`: the caller knows which of
    its arguments it handed to a general checker (utf8, a tokenizer, a constraint builder)."""
    try:
        yield
    except InvalidArgumentError as e:
        if e.param is None:
            e.param = param
        raise


def int_in_range(name: str, value: object, lo: int, hi: int) -> int:
    """`value` if it is an int (not a bool) in [lo, hi]; else InvalidArgumentError naming `name`.
    Callers pass the width of the C type the value goes into, so cffi never sees a number it cannot hold."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"{name} must be an integer, got {value!r}")
    if not lo <= value <= hi:
        raise InvalidArgumentError(f"{name} must be in [{lo}, {hi}], got {_short(value)}")
    return value


def positive_int(name: str, value: object, hi: int = INT32_MAX) -> int:
    """`value` if it is an int in [1, hi] (default: what an int32 holds); else InvalidArgumentError."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidArgumentError(f"{name} must be a positive integer, got {_short(value)}")
    return int_in_range(name, value, 1, hi)


def number_in_range(name: str, value: object, lo: float, hi: float) -> float:
    """`value` if it is a finite int or float (not a bool) in [lo, hi]; else InvalidArgumentError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidArgumentError(f"{name} must be a finite number, got {_short(value)}")
    if not (lo <= value <= hi and (isinstance(value, int) or math.isfinite(value))):  # an int may be too big
        raise InvalidArgumentError(f"{name} must be a finite number in [{lo}, {hi}], got {_short(value)}")
    return value


class PositiveSettings:
    """Base of frozen dataclasses whose every field is a positive, finite number of its annotated type (int or
    float): the constraint, chat-template and worker limits. A bad value is a ValueError (the server names its
    flag); WHAT names the kind of setting in the message."""
    WHAT: ClassVar[str] = "setting"
    if TYPE_CHECKING:  # pragma: no cover (every subclass is a dataclass: what dataclasses.fields takes)
        __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
                    or (f.type == "int" and not isinstance(value, int)) or not math.isfinite(value):
                raise ValueError(f"{self.WHAT} {f.name} must be a positive {f.type}, got {value!r}")


def flag(name: str, value: object) -> bool:
    """`value` if it is a bool; else InvalidArgumentError (truthiness of arbitrary objects hides mistakes)."""
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"{name} must be True or False, got {_short(value)}")
    return value


def utf8(name: str, value: object, *, nul_ok: bool = True) -> bytes:
    """`value` (a str) encoded as UTF-8. Lone surrogates cannot be encoded; with nul_ok=False a NUL is refused
    too, for strings that reach C as NUL-terminated char* (a NUL would silently cut them)."""
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{name} must be a str, got {type(value).__name__}")
    try:
        data = value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidArgumentError(f"{name} is not valid Unicode text: {e.reason} at index {e.start} "
                                   f"({value[e.start:e.end]!r})") from None
    if not nul_ok and b"\0" in data:
        raise InvalidArgumentError(f"{name} contains a NUL character at index {value.index(chr(0))}")
    return data


def fs_path(name: str, value: object) -> bytes:
    """A str or os.PathLike file path as the bytes C's open() gets; a NUL (which C would cut the path at)
    or another type is an InvalidArgumentError."""
    try:
        if not isinstance(value, (str, bytes, os.PathLike)):
            raise TypeError  # (what os.fsencode raises for it)
        raw = os.fsencode(value)
    except TypeError:
        raise InvalidArgumentError(f"{name} must be a str or os.PathLike path, got {type(value).__name__}") from None
    except UnicodeEncodeError as e:  # only where the file system encoding is not UTF-8 with surrogateescape
        raise InvalidArgumentError(f"{name} cannot be encoded for the file system: {e.reason}") from None
    if b"\0" in raw:
        raise InvalidArgumentError(f"{name} contains a NUL character: {os.fsdecode(raw)!r}")
    if not raw:
        raise InvalidArgumentError(f"{name} is empty")
    return raw


def _short(value: object) -> str:
    """repr(value), cut: a 5,000-digit integer should not become a 5,000-character message."""
    if isinstance(value, int) and value.bit_length() > 256:  # repr of a huge int is slow, or refused
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
