"""`ToolCallStream`: generated text chunks in, OpenAI's streaming deltas out, as the difference between
successive scans (parse.py) of the text so far. Each scan starts where the last one settled (after the last
finished call block, at the open one's start, or at text held back) and goes on with the open block's object
scanners, so a feed reads its own text once, however long the answer grows."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypedDict

from ...errors import InvalidArgumentError
from .formats import PartialCall, Scanners
from .json_scan import WS
from .parse import Scan, scan
from .results import ParsedToolCall, ParseResult
from .tools import type_name


class _SentCall(TypedDict):
    id: str
    name: str
    arguments: str  # the arguments text sent so far
    complete: bool


class SentCall(_SentCall, total=False):
    """A call whose header ToolCallStream sent; upto (set as its text is read): the text position after it."""
    upto: int


class ToolCallStream:
    """Feed generated text chunks, get OpenAI-style deltas (`choices[i].delta` without the role):
    {"content": "..."} for text, and for each call first
    {"tool_calls": [{"index": i, "id": ..., "type": "function", "function": {"name": ..., "arguments": ""}}]}
    then {"tool_calls": [{"index": i, "function": {"arguments": "<fragment>"}}]} as the arguments arrive.

    Text that may be the start of a call is held back until it is known, and so is whitespace at the end of
    the content (the content is stripped, as a whole-text parse strips it). A call's header is sent once its
    name is known (and is a listed function) and its arguments object has begun; the arguments then stream.
    A stream cannot take back what it has sent: when a call's arguments turn out malformed after its header
    went out (or the text ends inside them, e.g. at max_tokens), that call keeps the arguments sent so far,
    the rest of the text is content, and `malformed` is True; a whole-text parse of the same text returns it
    all as content (a cut-off call: neither content nor a call, see parse.py).
    """

    def __init__(self, family: str, new_id: Callable[[], str], names: set[str] | None = None) -> None:
        self._family, self._new_id, self.names = family, new_id, names
        self.calls: list[SentCall] = []  # sent so far
        self.malformed = False
        self._finished = False
        # what a feed reads: the text from where the last scan settled (its start is text position `_base`),
        # and the open block's object scanners; what lies before is sent for good
        self._tail = ""
        self._base = 0
        self._scanners: Scanners = {}
        self._tail_raw = 0    # content characters of the tail already taken
        self._tail_calls = 0  # index in self.calls of the tail's first call
        self._raw = False     # a block went wrong: from it on, all text is content
        self._content: list[str] = []  # sent
        self._pending = ""    # whitespace at the end of the content, held until what follows it shows

    @property
    def has_tool_calls(self) -> bool:
        """Whether a complete call was streamed."""
        return any(c["complete"] for c in self.calls)

    def result(self) -> ParseResult:
        """What has been streamed so far, as a ParseResult (all of it after finish()): the content and the
        complete calls (a call cut off or broken after its header went out is in the deltas only, so that
        every call here has arguments that parse)."""
        return ParseResult("".join(self._content), [ParsedToolCall(c["id"], c["name"], c["arguments"])
                                                     for c in self.calls if c["complete"]])

    def feed(self, chunk: str) -> list[dict[str, Any]]:
        """The deltas that `chunk` (the next piece of generated text) makes known."""
        if self._finished:
            raise InvalidArgumentError("feed() after finish()")
        if not isinstance(chunk, str):
            raise InvalidArgumentError(f"chunk must be a str, got {type_name(chunk)}")
        if self._raw:
            out: list[dict[str, Any]] = []
            self._take_content(chunk, out)
            return out
        self._tail += chunk
        return self._update(final=False)

    def finish(self) -> list[dict[str, Any]]:
        """The deltas for what was held back; call once, after the last chunk."""
        if self._finished:
            return []
        self._finished = True
        return [] if self._raw else self._update(final=True)

    def _update(self, final: bool) -> list[dict[str, Any]]:
        now = scan(self._family, self._tail, self.names, final, 0, self._scanners)
        out: list[dict[str, Any]] = []
        if not self._agrees(now.calls):  # what went out stays; the text after the last call is content
            self.malformed = self._raw = True
            self._take_content(self._tail[self.calls[-1]["upto"] - self._base:], out)
            return _merge(out)
        taken = 0
        index = self._tail_calls
        for item in now.items:
            if isinstance(item, str):
                if taken + len(item) > self._tail_raw:
                    self._take_content(item[max(0, self._tail_raw - taken):], out)
                taken += len(item)
            else:
                self._send_call(index, item, out)
                index += 1
        self._tail_raw = max(self._tail_raw, taken)
        if now.malformed:
            self._raw = True  # (the block's text, and all after it, is content for good)
        else:
            self._settle(now)
        return _merge(out)

    def _settle(self, now: Scan) -> None:
        """Drop the tail's text before `now.settled`: no later scan reads it again."""
        done = now.items[:now.n_settled]
        self._tail_raw -= sum(len(i) for i in done if isinstance(i, str))
        self._tail_calls += sum(1 for i in done if not isinstance(i, str))
        cut = now.settled
        if cut:
            self._tail = self._tail[cut:]
            self._base += cut
            self._scanners = {k - cut: v for k, v in self._scanners.items() if k >= cut}

    def _agrees(self, calls: list[PartialCall]) -> bool:
        sent = self.calls[self._tail_calls:]
        return len(calls) >= len(sent) and all(
            c.name == s["name"] and c.arguments.startswith(s["arguments"]) for c, s in zip(calls, sent, strict=False))

    def _take_content(self, raw: str, out: list[dict[str, Any]]) -> None:
        """Send content text as it comes: stripped as a whole-text parse strips it (leading whitespace never,
        trailing whitespace once more content follows)."""
        text = self._pending + raw
        if not self._content:
            text = text.lstrip(WS)
        shown = text.rstrip(WS)
        self._pending = text[len(shown):]
        if shown:
            out.append({"content": shown})
            self._content.append(shown)

    def _send_call(self, index: int, call: PartialCall, out: list[dict[str, Any]]) -> None:
        if index == len(self.calls):
            self.calls.append({"id": self._new_id(), "name": call.name, "arguments": "", "complete": False})
            out.append({"tool_calls": [{"index": index, "id": self.calls[index]["id"], "type": "function",
                                        "function": {"name": call.name, "arguments": ""}}]})
        sent = self.calls[index]
        if len(call.arguments) > len(sent["arguments"]):
            out.append({"tool_calls": [{"index": index, "function": {
                "arguments": call.arguments[len(sent["arguments"]):]}}]})
            sent["arguments"] = call.arguments
        sent["complete"] = call.complete
        sent["upto"] = self._base + call.upto


def _merge(deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Adjacent content deltas joined; adjacent argument fragments of the same call joined."""
    merged: list[dict[str, Any]] = []
    for d in deltas:
        if merged:
            last = merged[-1]
            if "content" in d and "content" in last:
                last["content"] += d["content"]
                continue
            if ("tool_calls" in d and "tool_calls" in last and "id" not in d["tool_calls"][0]
                    and "id" not in last["tool_calls"][0]
                    and d["tool_calls"][0]["index"] == last["tool_calls"][0]["index"]):
                last["tool_calls"][0]["function"]["arguments"] += d["tool_calls"][0]["function"]["arguments"]
                continue
        merged.append(d)
    return merged
