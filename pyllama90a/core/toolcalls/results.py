"""Parsed tool calls, and OpenAI's streaming deltas of them put back together."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ParsedToolCall:
    id: str
    name: str
    arguments: str  # the JSON object as the model wrote it

    def to_openai(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class ParseResult:
    content: str
    tool_calls: list[ParsedToolCall]

    def message(self) -> dict[str, Any]:
        """An OpenAI assistant message: content None when there are calls and no text, as OpenAI does."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content if self.content or not self.tool_calls
                               else None}
        if self.tool_calls:
            msg["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        return msg


def reassemble(deltas: Iterable[dict[str, Any]]) -> ParseResult:
    """Deltas put back together the way an OpenAI client does (for tests and for non-streaming callers)."""
    content = ""
    calls: dict[int, dict[str, str]] = {}
    for d in deltas:
        if "content" in d:
            content += d["content"]
        for tc in d.get("tool_calls", ()):
            entry = calls.setdefault(tc["index"], {"id": "", "name": "", "arguments": ""})
            if "id" in tc:
                entry["id"] = tc["id"]
            fn = tc.get("function", {})
            entry["name"] += fn.get("name", "")
            entry["arguments"] += fn.get("arguments", "")
    return ParseResult(content.strip(), [ParsedToolCall(c["id"], c["name"], c["arguments"])
                                         for _, c in sorted(calls.items())])
