"""`ToolCallOutput`: a chat's generated text read for the tool calls it offered, the one reader Model.chat and
the server's chat route share. A whole answer is parsed once (a malformed call stays content); a stream is
split as it arrives into OpenAI's deltas, {"content": ...} and {"tool_calls": [...]}."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..tool_calls import ParseResult, ToolCallFormat, ToolCallStream


def finish_reason(reason: str, made_calls: bool) -> str:
    """OpenAI's finish_reason: "tool_calls" when a generation that stopped by itself made tool calls."""
    return "tool_calls" if made_calls and reason == "stop" else reason


@dataclass(frozen=True)
class ToolCallOutput:
    """The tools a chat offered and the syntax its model writes calls in."""

    fmt: ToolCallFormat
    tools: Sequence[dict]

    def whole(self, text: str, reason: str) -> tuple[ParseResult, str]:
        """A whole answer's content and calls, and its finish_reason ("tool_calls" when it made calls)."""
        parsed = self.fmt.parse(text, self.tools)
        return parsed, finish_reason(reason, bool(parsed.tool_calls))

    def stream(self) -> ToolCallDeltas:
        return ToolCallDeltas(self.fmt.stream(self.tools))


class ToolCallDeltas:
    """One streamed answer's text as OpenAI's deltas (see tool_calls.ToolCallStream)."""

    def __init__(self, parser: ToolCallStream) -> None:
        self._parser = parser

    def feed(self, text: str, last: bool = False) -> list[dict]:
        """The deltas `text` (the next generated text) makes known; with `last`, those held back too."""
        deltas = self._parser.feed(text)
        return deltas + self._parser.finish() if last else deltas

    def result(self) -> ParseResult:
        """What was streamed, as one content and its calls (complete after the last feed)."""
        return self._parser.result()

    def finish_reason(self, reason: str) -> str:
        return finish_reason(reason, self._parser.has_tool_calls)
