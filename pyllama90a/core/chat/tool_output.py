"""`ToolCallOutput`: a chat's generated text read for the tool calls it offered, the one reader Model.chat and
the server's answer shapes share. A whole answer is parsed once (a malformed call stays content); a stream is
split as it arrives into OpenAI's deltas, {"content": ...} and {"tool_calls": [...]}.

A call cut off by max_tokens (finish_reason "length", no call that parses) is no call, but its text is what was
generated: the answer's content is the whole text, never dropped (as llama-server answers); a stream, which sent
the partial call's deltas as they came, ends with a content delta of the text its content deltas had not
carried, so that its content is the whole answer's."""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeVar

from ..generation.outputs import Completion, Piece
from ..toolcalls import ParseResult, ToolCallFormat, ToolCallStream
from .held_tokens import HeldTokens

R = TypeVar("R", bound=str)  # a finish_reason: FinishReason, or the engine's Chunk's (which may be "error")


def finish_reason(reason: R, made_calls: bool) -> R | Literal["tool_calls"]:
    """OpenAI's finish_reason: "tool_calls" when a generation that stopped by itself made tool calls."""
    return "tool_calls" if made_calls and reason == "stop" else reason


@dataclass(frozen=True)
class ToolCallOutput:
    """The tools a chat offered and the syntax its model writes calls in."""

    fmt: ToolCallFormat
    tools: Sequence[dict[str, Any]]

    def whole(self, text: str, reason: R) -> tuple[ParseResult, R | Literal["tool_calls"]]:
        """A whole answer's content and calls, and its finish_reason ("tool_calls" when it made calls); a call
        cut off by max_tokens leaves the whole text as the content (see the module's doc)."""
        parsed = self.fmt.parse(text, self.tools)
        if reason == "length" and not parsed.tool_calls:
            return ParseResult(text, []), reason
        return parsed, finish_reason(reason, bool(parsed.tool_calls))

    def stream(self) -> ToolCallDeltas:
        return ToolCallDeltas(self)

    def split(self, pieces: Iterator[Piece]) -> Iterator[Piece]:
        """A chat's pieces with the text split into content (Piece.text) and tool-call deltas (Piece.tool_calls);
        the last piece's Completion has the calls, the content as its text and finish_reason "tool_calls"."""
        deltas = self.stream()
        held = HeldTokens()  # tokens of text the parser holds back, sent with the piece that shows it
        try:
            for piece in pieces:  # (a thinking chat's reasoning, read out before, passes as it is)
                done = piece.completion
                found = deltas.feed(piece.text, last=done is not None)
                held.add(piece)
                if done is None:
                    if found or piece.reasoning:
                        yield _piece_of(found, held, piece.reasoning)
                    continue
                found += deltas.cut_off(done.finish_reason)
                result = deltas.result()
                reason = deltas.finish_reason(done.finish_reason)
                completion = replace(done, text=result.content, finish_reason=reason,
                                     tool_calls=tuple(result.tool_calls))
                yield replace(_piece_of(found, held, piece.reasoning), finish_reason=reason, completion=completion)
        finally:
            close = getattr(pieces, "close", None)
            if close is not None:
                close()  # an early close of this stream ends the generation (frees the Model) at once


def completion_of(pieces: Iterator[Piece], output: ToolCallOutput | None) -> Completion:
    """A generation run to its end: its last piece's Completion, a chat's tool calls read from the text."""
    last = None
    for last in pieces:  # noqa: B007 (runs the generation to its end, keeping the last piece)
        pass
    assert last is not None and last.completion is not None
    done = last.completion
    if output is None:
        return done
    parsed, reason = output.whole(done.text, done.finish_reason)
    return replace(done, text=parsed.content, finish_reason=reason, tool_calls=tuple(parsed.tool_calls))


class ToolCallDeltas:
    """One streamed answer's text as OpenAI's deltas (see toolcalls.ToolCallStream)."""

    def __init__(self, output: ToolCallOutput) -> None:
        self._output = output
        self._parser: ToolCallStream = output.fmt.stream(output.tools)
        self._fed: list[str] = []  # the text fed (a call cut off by max_tokens makes it the content)
        self._cut_off_tail = ""  # cut_off's content delta: the text the parser's content deltas had not carried

    def feed(self, text: str, last: bool = False) -> list[dict[str, Any]]:
        """The deltas `text` (the next generated text) makes known; with `last`, those held back too."""
        deltas = self._parser.feed(text)
        if last:
            deltas += self._parser.finish()
        self._fed.append(text)
        return deltas

    def cut_off(self, reason: str) -> list[dict[str, Any]]:
        """After the last feed: when max_tokens cut off a call, the content delta of the text the content deltas
        have not carried, so that the stream's content is whole()'s (the deltas of the call stay sent)."""
        if reason != "length":
            return []
        text, sent = "".join(self._fed), self._parser.result().content
        if len(text) == len(sent) or not text.startswith(sent):
            return []
        if self._output.whole(text, reason)[0].tool_calls:  # (calls that parse: their content, as whole())
            return []
        self._cut_off_tail = text[len(sent):]
        return [{"content": self._cut_off_tail}]

    def result(self) -> ParseResult:
        """What was streamed, as one content and its calls (complete after the last feed and cut_off)."""
        streamed = self._parser.result()
        return ParseResult(streamed.content + self._cut_off_tail, streamed.tool_calls)

    def finish_reason(self, reason: R) -> R | Literal["tool_calls"]:
        return finish_reason(reason, self._parser.has_tool_calls)


def _piece_of(deltas: list[dict[str, Any]], held: HeldTokens, reasoning: str) -> Piece:
    text = "".join(d.get("content", "") for d in deltas)
    calls = [tc for d in deltas for tc in d.get("tool_calls", ())]
    return Piece(text, held.take_tokens(), tool_calls=calls, reasoning=reasoning, logprobs=held.take_logprobs())
