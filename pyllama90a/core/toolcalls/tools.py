"""A request's tools and tool_choice, checked once where they enter (`Tools`, `ToolChoice`), and call ids."""
from __future__ import annotations

import json
import re
import secrets
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from ...errors import InvalidArgumentError, about

NAME_PATTERN = r"^[A-Za-z0-9_.\-]{1,64}$"  # a function's name (OpenAI's rule)
_NAME_RE = re.compile(NAME_PATTERN)
_ID_ALPHABET = string.ascii_letters + string.digits


def new_call_id(length: int = 24, prefix: str = "call_") -> str:
    """A random tool-call id: "call_" and 24 letters/digits, as OpenAI's look."""
    return prefix + "".join(secrets.choice(_ID_ALPHABET) for _ in range(length))


def type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


class Tools(tuple[dict[str, Any], ...]):
    """OpenAI tool dicts checked by check_tools, which returns a Tools as it is: a request's tools are checked
    once where they enter and every layer below (template, constraint, parsers) takes them as they are."""


def check_tools(tools: object, field: str = "tools") -> Tools:
    """`tools` as OpenAI tool dicts ({"type": "function", "function": {"name", "description"?,
    "parameters"?}}), checked; None gives an empty Tools. Bad shapes raise InvalidArgumentError naming the field
    (its message the path in it, its `param` the field)."""
    if isinstance(tools, Tools):
        return tools
    with about(field):
        return Tools(_check_tools(tools, field))


def _check_tools(tools: object, field: str) -> list[dict[str, Any]]:
    if tools is None:
        return []
    if not isinstance(tools, (list, tuple)):
        raise InvalidArgumentError(f"{field} must be a list of {{'type': 'function', 'function': {{...}}}}, "
                                   f"got {type_name(tools)}")
    seen: set[str] = set()
    out = []
    for i, tool in enumerate(tools):
        where = f"{field}[{i}]"
        if not isinstance(tool, dict):
            raise InvalidArgumentError(f"{where} must be an object, got {type_name(tool)}")
        if tool.get("type") != "function":
            raise InvalidArgumentError(f"{where}.type must be 'function', got {tool.get('type')!r}"[:200])
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise InvalidArgumentError(f"{where}.function must be an object, got {type_name(fn)}")
        name = fn.get("name")
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise InvalidArgumentError(f"{where}.function.name must be 1 to 64 letters, digits, '_', '-' or '.', "
                                       f"got {name!r}"[:200])
        if name in seen:
            raise InvalidArgumentError(f"{where}.function.name {name!r} is listed twice")
        seen.add(name)
        if "description" in fn and fn["description"] is not None and not isinstance(fn["description"], str):
            raise InvalidArgumentError(f"{where}.function.description must be a string")
        params = fn.get("parameters")
        if params is not None:
            if not isinstance(params, dict):
                raise InvalidArgumentError(f"{where}.function.parameters must be a JSON schema object, "
                                           f"got {type_name(params)}")
            if "type" in params and params["type"] != "object":
                raise InvalidArgumentError(f"{where}.function.parameters must describe an object "
                                           f"(type 'object'), got type {params['type']!r}"[:200])
            try:
                json.dumps(params, allow_nan=False)
            except (TypeError, ValueError) as e:
                raise InvalidArgumentError(f"{where}.function.parameters is not JSON: {e}") from None
        out.append(tool)
    return out


def tool_names(tools: Sequence[dict[str, Any]]) -> list[str]:
    return [t["function"]["name"] for t in tools]


ToolChoiceMode = Literal["none", "auto", "required"]


@dataclass(frozen=True)
class ToolChoice:
    """A checked tool_choice: mode is "none", "auto" or "required"; name is set for a named function (the
    mode is then "required": a call of that function only)."""

    mode: ToolChoiceMode
    name: str | None = None


def check_tool_choice(tool_choice: object, tools: Sequence[dict[str, Any]], field: str = "tool_choice") -> ToolChoice:
    """Check `tool_choice` against the checked `tools`. None means "auto" with tools and "none" without."""
    if isinstance(tool_choice, ToolChoice):
        return tool_choice
    with about(field):
        return _check_tool_choice(tool_choice, tools, field)
def _check_tool_choice(tool_choice: object, tools: Sequence[dict[str, Any]], field: str) -> ToolChoice:
    names = tool_names(tools)
    if tool_choice is None:
        return ToolChoice("auto" if names else "none")
    if isinstance(tool_choice, str):
        if tool_choice not in ("none", "auto", "required"):
            raise InvalidArgumentError(f"{field} must be 'none', 'auto', 'required' or "
                                       "{'type': 'function', 'function': {'name': ...}}, "
                                       f"got {tool_choice!r}"[:200])
        if tool_choice == "required" and not names:
            raise InvalidArgumentError(f"{field} 'required' needs a non-empty tools list")
        if tool_choice == "auto" and not names:
            return ToolChoice("none")
        return ToolChoice(cast(ToolChoiceMode, tool_choice))  # (one of the three: checked above)
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function")
        if tool_choice.get("type") != "function" or not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise InvalidArgumentError(f"{field} must be {{'type': 'function', 'function': {{'name': ...}}}}, "
                                       f"got {tool_choice!r}"[:200])
        if fn["name"] not in names:
            raise InvalidArgumentError(f"{field}.function.name {fn['name']!r} is not a function in tools "
                                       f"(tools has {names})"[:300])
        return ToolChoice("required", fn["name"])
    raise InvalidArgumentError(f"{field} must be a string or an object, got {type_name(tool_choice)}")

