"""The Responses API's conversation items, checked into one plain form and read as chat messages.

`input_items` checks a request's `input` (a string: one user message; or a list of items) and an answer's own
output items the same way, into plain items a follow-up (previous_response_id) replays:
    {"type": "message", "role": "user" | "system" | "developer" | "assistant", "content": "text"}
    {"type": "function_call", "call_id": ..., "name": ..., "arguments": "JSON text"}
    {"type": "function_call_output", "call_id": ..., "output": "text"}
    {"type": "reasoning", "text": "the reasoning_text parts' text (else the summary's)"}
A message's content is text or input_text / output_text (refusal) parts; an image, a file or audio is a 400
naming the part: this server reads text only; so is a reasoning item's encrypted_content (another server's).
`chat_messages` turns plain items into the chat's OpenAI-style messages: a developer message is a system one, a
reasoning item is the reasoning_content of the assistant message it begins (which templates that think render),
function calls join the assistant message they follow, a function_call_output is a tool message with its call's
id and function name.
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
              "function_call_output": {"type", "call_id", "output", "id", "status"},
              "reasoning": {"type", "summary", "content", "encrypted_content", "id", "status"}}
PART_KEYS = {"type", "text", "refusal", "annotations", "logprobs"}
REASONING_PARTS = {"content": "reasoning_text", "summary": "summary_text"}  # a reasoning item's lists, their parts
NOT_SERVED = {"item_reference": "item references are not served: send the item itself, or previous_response_id"}
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


def _reasoning(item: dict[str, Any], where: str, unknown: list[str]) -> Item:
    """A reasoning item's text: its reasoning_text parts, or (none given) its summary's."""
    if item.get("encrypted_content"):
        raise _error(f"'{where}.encrypted_content': encrypted reasoning is not served (it is another server's); "
                     "send the reasoning_text content", f"{where}.encrypted_content")
    texts: dict[str, list[str]] = {}
    for key, kind in REASONING_PARTS.items():
        parts = item.get(key) or []
        if not isinstance(parts, list):
            raise _error(f"'{where}.{key}' must be a list of {kind} parts", f"{where}.{key}")
        for j, part in enumerate(parts):
            at = f"{where}.{key}[{j}]"
            if not isinstance(part, dict) or part.get("type") != kind:
                raise _error(f"'{at}' must be an object of type {kind}", f"{at}.type")
            texts.setdefault(key, []).append(_text(part.get("text"), f"{at}.text"))
            unknown += [f"{at}.{k}" for k, v in part.items() if k not in ("type", "text") and v is not None]
    return {"type": "reasoning", "text": "\n".join(texts.get("content") or texts.get("summary") or [])}


def _item(item: Any, where: str, unknown: list[str]) -> Item:
    if not isinstance(item, dict):
        raise _error(f"'{where}' must be an object (a message, function_call or function_call_output)", where)
    kind = item.get("type", "message" if "role" in item else None)
    if kind in NOT_SERVED:
        raise _error(f"'{where}': {NOT_SERVED[kind]}", f"{where}.type")
    if kind not in KNOWN_KEYS:
        shown = kind[:40] if isinstance(kind, str) else kind
        raise _error(f"'{where}': items of type {shown!r} are not served (messages, reasoning, function_call and "
                     "function_call_output are; no built-in tools)", f"{where}.type")
    unknown += [f"{where}.{k}" for k, v in item.items() if k not in KNOWN_KEYS[kind] and v is not None]
    if kind == "message":
        role = item.get("role")
        if role not in ROLES:
            raise _error(f"'{where}.role' must be one of {', '.join(ROLES)}, got {str(role)[:40]!r}", f"{where}.role")
        return {"type": "message", "role": role, "content": _content(item.get("content"), f"{where}.content", unknown)}
    if kind == "reasoning":
        return _reasoning(item, where, unknown)
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
        last = messages[-1] if messages else None
        # an assistant message a reasoning item began, with nothing else yet
        thought = last is not None and last["role"] == "assistant" and "reasoning_content" in last \
            and not last["content"] and "tool_calls" not in last
        if kind == "reasoning":
            messages.append({"role": "assistant", "content": "", "reasoning_content": item["text"]})
        elif kind == "message":
            role = "system" if item["role"] == "developer" else item["role"]
            if role == "assistant" and thought:
                assert last is not None
                last["content"] = item["content"]
            else:
                messages.append({"role": role, "content": item["content"]})
        elif kind == "function_call":
            names[item["call_id"]] = item["name"]
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item["arguments"]}}
            if last is not None and last["role"] == "assistant":  # the calls of the answer this text began
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        else:
            name = names.get(item["call_id"])
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"],
                             **({"name": name} if name is not None else {})})
    return messages
