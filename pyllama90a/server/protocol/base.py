"""The machinery of the request models (protocol.py): `ProtocolModel`, whose one hook sorts a body's fields into
declared, refused (refused_fields.py) and unknown; `Between`, a range whose error names it; and `parse`, which
validates a body into its model, converts it once into what the routes take, and turns anything wrong into
OpenAI's 400 naming the field in `param`.

Unknown fields (a typo, another server's extension) are never silently ignored: with Limits.unknown_fields
"warn" the request is served and they are named (X-Ignored-Fields, a log line), with "reject" they are a 400.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar
from urllib.parse import quote

from pydantic import (
    BaseModel,
    ConfigDict,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticCustomError, core_schema

from ..errors import APIError
from .refused_fields import NoOp, refused_field

UNKNOWN_FIELDS_MODES = ("warn", "reject")
IGNORED_HEADER = "X-Ignored-Fields"
_SHOWN_NAMES, _SHOWN_NAME_CHARS = 20, 64  # bounds on the names one header, log line or error message carries


@dataclass(frozen=True)
class Limits:
    """The server's bounds on a request (flags of `python -m pyllama90a.server`)."""
    max_tokens_default: int = 1024  # a chat request's max_tokens when it gives none
    max_tokens_limit: int = 32768   # the most max_tokens (max_completion_tokens) a request may ask for
    max_request_bytes: int = 16 * 2**20  # the largest body (a 128K-token prompt as JSON text is a few MiB)
    unknown_fields: str = "warn"    # fields known nowhere here: "warn" (served, named in a header) or "reject" (400)
    # the server-wide defaults of a request that sets none (llama-server's --seed, --temp); None: the route's own
    seed: int | None = None
    temperature: float | None = None

    def __post_init__(self) -> None:
        if self.unknown_fields not in UNKNOWN_FIELDS_MODES:
            raise ValueError(f"unknown_fields must be one of {', '.join(UNKNOWN_FIELDS_MODES)}, "
                             f"got {self.unknown_fields!r}")


def bad(message: str, *where: str | int) -> PydanticCustomError:
    """A validator's error with its whole message; `where` continues the failing value's place (a model's
    validator naming one of its fields, a list's item)."""
    return PydanticCustomError("request", "{message}", {"message": message, "where": where})


def shown(value: Any) -> str:
    """repr(value), cut short: an error message does not echo a megabyte of the request back."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


LIMIT = "--max-tokens-limit"  # a Between bound that is the server's Limits.max_tokens_limit


@dataclass(frozen=True)
class Between:
    """Annotated metadata: the number lies in [lo, hi] (hi may be LIMIT: the limits in the validation context)."""
    lo: float
    hi: float | str

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        return core_schema.with_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(self, schema: Any, handler: GetJsonSchemaHandler) -> dict[str, Any]:
        return {**handler(schema), "minimum": self.lo, "maximum": self.hi}  # (openapi.py resolves LIMIT)

    def _check(self, value: float, info: ValidationInfo) -> float:
        hi = getattr(info.context, "max_tokens_limit", Limits.max_tokens_limit) if isinstance(self.hi, str) else self.hi
        if not self.lo <= value <= hi:
            raise bad(f"'{info.field_name}' must be between {self.lo} and {hi}, got {shown(value)}")
        return value


class ProtocolModel(BaseModel):
    """A request body, or an object inside one. Strict: "1" is no integer, true no 1. A null field means its
    default (OpenAI's clients send null for what they leave unset), unless the class sets keep_none. The hook
    (`_sort_fields`): a field of `refused` is a 400 unless it has its no-op value; any other undeclared field is
    unknown, listed by `unknown` with its place (messages[1].lang), this object's before its children's."""
    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)
    refused: ClassVar[Mapping[str, tuple[NoOp, str]]] = {}
    keep_none: ClassVar[bool] = False

    @model_validator(mode="before")
    @classmethod
    def _sort_fields(cls, body: Any) -> Any:
        if not isinstance(body, dict):
            return body  # (pydantic's type error)
        declared = cls.model_fields
        refused = refused_field(body, {k: v for k, v in cls.refused.items() if k not in declared})
        if refused is not None:
            raise bad(refused[1], refused[0])
        return {k: v for k, v in body.items()
                if not ((k in cls.refused and k not in declared)
                        or (v is None and k in declared and not cls.keep_none))}

    @property
    def unknown(self) -> list[str]:
        names = list(self.model_extra or {})
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, ProtocolModel):
                names += [f"{name}.{u}" for u in value.unknown]
            for i, item in enumerate(value if isinstance(value, list) else ()):
                if isinstance(item, ProtocolModel):
                    names += [f"{name}[{i}].{u}" for u in item.unknown]
        return names

    def convert(self, limits: Limits) -> Any:
        """What the route takes (a subclass's converter builds the library's types from it): itself."""
        return self

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: Any, handler: GetJsonSchemaHandler) -> dict[str, Any]:
        """The document says what the hook does: a field that may be left out may be null."""
        json_schema = handler(schema)
        target = handler.resolve_ref_schema(json_schema)
        if not cls.keep_none:
            required = target.get("required", ())
            for name, prop in target.get("properties", {}).items():
                if name not in required and {"type": "null"} not in prop.get("anyOf", ()):
                    target["properties"][name] = {"anyOf": [prop, {"type": "null"}]}
        return json_schema


def parse(model: type[ProtocolModel], body: Any, limits: Limits, *args: Any) -> tuple[Any, list[str]]:
    """`body` validated as `model` and converted once (`convert`: what raises there is answered by the app's
    funnel, server/errors.py), and its unknown fields, sorted; with --unknown-fields reject those are a 400,
    after every other error (the converters' too)."""
    try:
        request = model.model_validate(body, context=limits)
    except ValidationError as e:
        raise _answer(e.errors(include_url=False)[0]) from None
    converted = request.convert(limits, *args)
    names = request.unknown
    if names and limits.unknown_fields == "reject":
        raise APIError(400, f"unknown request field(s): {shown_names(sorted(names))} (this server's "
                            "--unknown-fields is 'reject'; check the spelling, or send only fields it implements)",
                       param=names[0][:200], code="unknown_field")
    return converted, sorted(names)


_KINDS = {"int_type": "an integer", "float_type": "a number", "bool_type": "a boolean", "string_type": "a string",
          "dict_type": "an object", "model_type": "an object", "list_type": "a list"}


def _answer(error: Any) -> APIError:
    """The 400 for pydantic's first error: `param` is its place (messages[0].content), the message says what
    was expected."""
    ctx = error.get("ctx", {})
    loc = (*error["loc"], *ctx.get("where", ()))
    param = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") or None
    kind = error["type"]
    if param is None and kind == "model_type":
        return APIError(400, "the request body must be a JSON object")
    message = (error["msg"] if kind == "request" else f"'{param}' is required" if kind == "missing"
               else f"'{param}' must be {_KINDS[kind]}, got {shown(error['input'])}" if kind in _KINDS
               else f"'{param}' must be {ctx['expected']}" if kind == "literal_error"
               else f"'{param}' must not be empty" if kind == "too_short"
               else f"'{param}': {error['msg']}")
    return APIError(400, message, param=param)


def shown_names(names: list[str]) -> str:
    """'a, b, c' for a header, a log line or an error message: each name percent-encoded where it is not plain
    ASCII (a header holds no control or non-Latin-1 characters, and a comma inside a name would read as two)
    and cut short, and at most 20 of them: a request cannot make a header larger than a client accepts."""
    texts = []
    for name in names[:_SHOWN_NAMES]:
        text = quote(name, safe="[]")
        if len(text) > _SHOWN_NAME_CHARS:  # cut, and not inside a %XX
            text = re.sub(r"%[0-9A-F]?$", "", text[:_SHOWN_NAME_CHARS]) + "..."
        texts.append(text)
    if len(names) > _SHOWN_NAMES:
        texts.append(f"...({len(names) - _SHOWN_NAMES} more)")
    return ", ".join(texts)
