"""The Responses API's conversation items, checked into one plain form and read as chat messages.

`input_items` checks a request's `input` (a string: one user message; or a list of items) and an answer's own
output items the same way, into plain items a follow-up (previous_response_id) replays:
    {"type": "message", "role": "user" | "system" | "developer" | "assistant", "content": "text"}
    {"type": "function_call", "call_id": ..., "name": ..., "arguments": "JSON text"}
    {"type": "function_call_output", "call_id": ..., "output": "text"}
A message's content is text or input_text / output_text (refusal) parts; an image, a file or audio is a 400
naming the part: this server reads text only. `chat_messages` turns plain items into the chat's OpenAI-style
messages: a developer message is a system one, function calls join the assistant message they follow, a
function_call_output is a tool message with its call's id and function name.
"""
from __future__ import annotations

from typing import Any

from ..errors import APIError

Item = dict[str, Any]

ROLES = ("user", "system", "developer", "assistant")
TEXT_PARTS = {"input_text": "text", "output_text": "text", "refusal": "refusal"}  # part type -> its text's key
# each item type's keys: checked, and (the rest of an item an answer or a client library carries) accepted; any
# other key with a value is unknown (null is the same as absent, as in a request's other objects)
KNOWN_KEYS = {"message": {"type", "role", "content", "id", "status"},
              "function_call": {"type", "call_id", "name", "arguments", "id", "status"},
              "function_call_output": {"type", "call_id", "output", "id", "status"}}
PART_KEYS = {"type", "text", "refusal", "annotations", "logprobs"}
NOT_SERVED = {"reasoning": "reasoning items are not served: this server's answers have none",
              "item_reference": "item references are not served: send the item itself, or previous_response_id"}
TEXT_ONLY = "this server reads text only (no images, files or audio)"


def _error(message: str, param: str) -> APIError:
    return APIError(400, message[:400], param=param[:200])


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _error(f"'{where}' must be a string, got {type(value).__name__}", where)
    return value


def _content(value: Any, where: str, unknown: list[str]) -> str:
    """A message's content as text: the string, or its text parts joined with newlines (as chat's parts are)."""
    if isinstance(value, str):
        return value
    if not isinstance(value, list):
        raise _error(f"'{where}' must be a string or a list of input_text parts, got {type(value).__name__}", where)
    texts = []
    for j, part in enumerate(value):
        at = f"{where}[{j}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(part, dict) or not isinstance(kind, str):
            raise _error(f"'{at}' must be an object with a 'type' (input_text)", at)
        if kind not in TEXT_PARTS:
            raise _error(f"'{at}': a '{kind[:40]}' part is not served: {TEXT_ONLY}", f"{at}.type")
        texts.append(_text(part.get(TEXT_PARTS[kind]), f"{at}.{TEXT_PARTS[kind]}"))
        unknown += [f"{at}.{k}" for k, v in part.items() if k not in PART_KEYS and v is not None]
    return "\n".join(texts)


def _item(item: Any, where: str, unknown: list[str]) -> Item:
    if not isinstance(item, dict):
        raise _error(f"'{where}' must be an object (a message, function_call or function_call_output)", where)
    kind = item.get("type", "message" if "role" in item else None)
    if kind in NOT_SERVED:
        raise _error(f"'{where}': {NOT_SERVED[kind]}", f"{where}.type")
    if kind not in KNOWN_KEYS:
        shown = kind[:40] if isinstance(kind, str) else kind
        raise _error(f"'{where}': items of type {shown!r} are not served (messages, function_call and "
                     "function_call_output are; no built-in tools)", f"{where}.type")
    unknown += [f"{where}.{k}" for k, v in item.items() if k not in KNOWN_KEYS[kind] and v is not None]
    if kind == "message":
        role = item.get("role")
        if role not in ROLES:
            raise _error(f"'{where}.role' must be one of {', '.join(ROLES)}, got {str(role)[:40]!r}", f"{where}.role")
        return {"type": "message", "role": role, "content": _content(item.get("content"), f"{where}.content", unknown)}
    call_id = _text(item.get("call_id"), f"{where}.call_id")
    if kind == "function_call":
        return {"type": kind, "call_id": call_id, "name": _text(item.get("name"), f"{where}.name"),
                "arguments": _text(item.get("arguments"), f"{where}.arguments")}
    output = item.get("output")
    return {"type": kind, "call_id": call_id,
            "output": output if isinstance(output, str) else _content(output, f"{where}.output", unknown)}


def input_items(value: Any, unknown: list[str] | None = None) -> tuple[Item, ...]:
    """`input` checked into plain items (see the module's doc); the names of the keys it does not know go in
    `unknown` (input[2].foo), which --unknown-fields serves or refuses as a request's other unknown fields."""
    if isinstance(value, str):
        return ({"type": "message", "role": "user", "content": value},)
    if not isinstance(value, list) or not value:
        raise _error("'input' must be a string or a non-empty list of items", "input")
    found: list[str] = []
    items = tuple(_item(item, f"input[{i}]", found) for i, item in enumerate(value))
    if unknown is not None:
        unknown += found
    return items


def chat_messages(items: tuple[Item, ...]) -> list[dict[str, Any]]:
    """Plain items as the chat's messages (see the module's doc)."""
    messages: list[dict[str, Any]] = []
    names: dict[str, str] = {}  # call_id -> function name, for the tool message that answers it
    for item in items:
        kind = item["type"]
        if kind == "message":
            role = "system" if item["role"] == "developer" else item["role"]
            messages.append({"role": role, "content": item["content"]})
        elif kind == "function_call":
            names[item["call_id"]] = item["name"]
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":  # the calls of the answer this text began
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        else:
            name = names.get(item["call_id"])
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"],
                             **({"name": name} if name is not None else {})})
    return messages
