"""Chat messages in one typed form (`ChatMessage` in a `Messages`), checked and converted once where a request
enters: `normalize_messages`, called by the server's request parsing and by the Python entries (Model.chat,
Model.apply_chat_template, BatchEngine.chat_prompt). Everything below (the Jinja template, the history as text,
llama.cpp's built-in template) takes a `Messages` as it is and converts nothing.

What is accepted (OpenAI's shape): `role`, a non-empty string; `content`, a string, null, or a list of text parts
(`{"type": "text", "text": ...}` or plain strings), joined with newlines; an assistant's `tool_calls`, a list of
`{"id"?, "type"?, "function": {"name", "arguments"?}}` whose arguments are a JSON string or an object (given to
the template as a dict whose `.json` is the text as sent: most templates write it with `tojson`); `tool_call_id`
and `name`, strings. Only an assistant message with tool_calls may leave content out. A null value is the same as
an absent key. Other keys of a message (e.g. reasoning_content, which some templates read) are kept in `extra`
and given to the template as they are; other keys of a tool call are not.
"""
from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...errors import InvalidArgumentError, about, utf8

__all__ = ["ChatMessage", "Messages", "ToolArguments", "ToolCall", "normalize_messages", "template_messages"]


class ToolArguments(dict[str, Any]):
    """A tool call's arguments as the template sees them: the dict (so `tojson` writes the object, not a
    quoted string), with the JSON text as sent in `.json`."""

    json: str


@dataclass(frozen=True)
class ToolCall:
    """An earlier call of an assistant message: its function's name and arguments (a JSON object, or the text as
    sent when it is none: a model's malformed call in the history), its id and type as sent."""

    name: str
    arguments: ToolArguments | str
    id: str | None = None
    type: str = "function"

    @property
    def arguments_text(self) -> str:
        """The arguments as JSON text, as sent."""
        return self.arguments.json if isinstance(self.arguments, ToolArguments) else self.arguments


@dataclass(frozen=True)
class ChatMessage:
    """One checked message (see the module's doc)."""

    role: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)  # the message's other keys, for the template


class Messages(tuple[ChatMessage, ...]):
    """A request's messages, checked and converted by normalize_messages."""


_TYPED_KEYS = frozenset({"role", "content", "tool_calls", "tool_call_id", "name"})


def normalize_messages(messages: object, *, first: int = 0) -> Messages:
    """OpenAI-style messages (dicts) checked and converted into their typed form; a Messages is returned as it is
    (it was checked where it entered). An error's `param` is the path of the bad field ("messages[1].content");
    `first` is the index of messages[0] in the caller's list, for a caller that checks one message at a time."""
    if isinstance(messages, Messages):
        return messages
    if not isinstance(messages, (list, tuple)) or not messages:
        raise InvalidArgumentError("messages must be a non-empty list of {'role': ..., 'content': ...}",
                                   param="messages")
    return Messages(_message(m, f"messages[{i}]") for i, m in enumerate(messages, first))


def _message(m: object, where: str) -> ChatMessage:
    if not isinstance(m, dict):
        raise InvalidArgumentError(f"{where} must be an object, got {type(m).__name__}", param=where)
    role = m.get("role")
    if not isinstance(role, str) or not role:
        raise InvalidArgumentError(f"{where}.role must be a non-empty string, got {role!r}"[:200],
                                   param=f"{where}.role")
    with about(f"{where}.role"):
        utf8(f"{where}.role", role)  # (a lone surrogate would fail only at tokenization, naming no message)
    content = _content(m.get("content"), f"{where}.content")
    if content is not None:
        with about(f"{where}.content"):
            utf8(f"{where}.content", content)
    raw_calls = m.get("tool_calls")
    calls: tuple[ToolCall, ...] = ()
    if raw_calls is not None:
        if role != "assistant":
            raise InvalidArgumentError(f"{where}.tool_calls is only for assistant messages (role is {role!r})",
                                       param=f"{where}.tool_calls")
        if not isinstance(raw_calls, (list, tuple)):
            raise InvalidArgumentError(f"{where}.tool_calls must be a list, got {type(raw_calls).__name__}",
                                       param=f"{where}.tool_calls")
        calls = tuple(_tool_call(call, f"{where}.tool_calls[{j}]") for j, call in enumerate(raw_calls))
    elif content is None:
        raise InvalidArgumentError(f"{where}.content is missing (only an assistant message with tool_calls may "
                                   "leave it out)", param=f"{where}.content")
    return ChatMessage(role, content or "",  # (most templates concatenate content: "" where calls stand alone)
                       calls, _string(m, "tool_call_id", where), _string(m, "name", where),
                       {k: v for k, v in m.items() if k not in _TYPED_KEYS})


def _string(m: dict[str, Any], key: str, where: str) -> str | None:
    value = m.get(key)
    if value is not None and not isinstance(value, str):
        raise InvalidArgumentError(f"{where}.{key} must be a string", param=f"{where}.{key}")
    return value


def _content(value: object, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        texts = []
        for j, part in enumerate(value):
            if isinstance(part, str):
                texts.append(part)
                continue
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise InvalidArgumentError(f"{where}[{j}] must be a text part {{'type': 'text', 'text': ...}} "
                                           f"(only text is supported), got {kind!r}"[:200], param=f"{where}[{j}]")
            texts.append(part["text"])
        return "\n".join(texts)
    raise InvalidArgumentError(f"{where} must be a string, a list of text parts or null, "
                               f"got {type(value).__name__}", param=where)


def _tool_call(call: object, where: str) -> ToolCall:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(call, dict) or not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise InvalidArgumentError(f"{where} must be {{'id': ..., 'type': 'function', 'function': "
                                   f"{{'name': ..., 'arguments': ...}}}}", param=where)
    call_id, call_type = _string(call, "id", where), _string(call, "type", where)
    return ToolCall(fn["name"], _arguments(fn.get("arguments", {}), f"{where}.function.arguments"), call_id,
                    "function" if call_type is None else call_type)


def _arguments(value: object, where: str) -> ToolArguments | str:
    if isinstance(value, dict):
        args = ToolArguments(value)
        args.json = json.dumps(value, ensure_ascii=False)
        return args
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return value  # not JSON (a model's malformed call in the history): the template gets the text
        if isinstance(parsed, dict):
            args = ToolArguments(parsed)
            args.json = value
            return args
        return value
    raise InvalidArgumentError(f"{where} must be a JSON string or an object, got {type(value).__name__}", param=where)


def template_messages(messages: Sequence[ChatMessage]) -> list[dict[str, Any]]:
    """The messages as a Jinja template reads them: dicts of OpenAI's shape (a key only where it has a value)."""
    return [_template_message(m) for m in messages]


def _template_message(m: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    for key, value in (("name", m.name), ("tool_call_id", m.tool_call_id)):
        if value is not None:
            out[key] = value
    if m.tool_calls:
        out["tool_calls"] = [{**({"id": c.id} if c.id is not None else {}), "type": c.type,
                              "function": {"name": c.name, "arguments": c.arguments}} for c in m.tool_calls]
    return out | dict(m.extra)
