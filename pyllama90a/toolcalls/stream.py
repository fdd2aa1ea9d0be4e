"""`ToolCallStream`: generated text chunks in, OpenAI's streaming deltas out, as the difference between
successive scans (parse.py) of the text so far."""
from __future__ import annotations

from collections.abc import Callable

from ..errors import InvalidArgumentError
from .formats import PartialCall
from .json_scan import WS
from .parse import Item, Scan, scan
from .results import ParsedToolCall, ParseResult
from .tools import type_name


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
        self.text = ""
        self.calls: list[dict] = []  # {"id", "name", "arguments", "complete"} sent so far
        self.malformed = False
        self._content = ""  # sent so far
        self._last: Scan = Scan([], False)  # the last scan that agreed with what was sent
        self._finished = False

    @property
    def has_tool_calls(self) -> bool:
        """Whether a complete call was streamed."""
        return any(c["complete"] for c in self.calls)

    def result(self) -> ParseResult:
        """What has been streamed so far, as a ParseResult (all of it after finish()): the content and the
        complete calls (a call cut off or broken after its header went out is in the deltas only, so that
        every call here has arguments that parse)."""
        return ParseResult(self._content, [ParsedToolCall(c["id"], c["name"], c["arguments"]) for c in self.calls
                                           if c["complete"]])

    def feed(self, chunk: str) -> list[dict]:
        """The deltas that `chunk` (the next piece of generated text) makes known."""
        if self._finished:
            raise InvalidArgumentError("feed() after finish()")
        if not isinstance(chunk, str):
            raise InvalidArgumentError(f"chunk must be a str, got {type_name(chunk)}")
        self.text += chunk
        return self._update(final=False)

    def finish(self) -> list[dict]:
        """The deltas for what was held back; call once, after the last chunk."""
        if self._finished:
            return []
        self._finished = True
        return self._update(final=True)

    def _update(self, final: bool) -> list[dict]:
        if not self.malformed:
            now = scan(self._family, self.text, self.names, final)
            if self._agrees(now.calls):
                self._last = now
            else:  # what went out stays; the text after it is content
                self.malformed = True
        items = self._last.items
        if self.malformed:
            calls = self._last.calls
            items = [self._last.content + self.text[calls[-1].upto if calls else 0:]]
        return _merge(self._send(items))

    def _agrees(self, calls: list[PartialCall]) -> bool:
        return len(calls) >= len(self.calls) and all(
            c.name == sent["name"] and c.arguments.startswith(sent["arguments"]) for c, sent in zip(calls, self.calls))

    def _send(self, items: list[Item]) -> list[dict]:
        out: list[dict] = []
        content = ""
        index = 0
        for item in items:
            if isinstance(item, str):
                content += item
                continue
            self._send_content(content, out)
            self._send_call(index, item, out)
            index += 1
        self._send_content(content, out)
        return out

    def _send_content(self, content: str, out: list[dict]) -> None:
        shown = content.strip(WS)  # (whitespace at the end waits for what follows it)
        if len(shown) > len(self._content):
            out.append({"content": shown[len(self._content):]})
            self._content = shown

    def _send_call(self, index: int, call: PartialCall, out: list[dict]) -> None:
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


def _merge(deltas: list[dict]) -> list[dict]:
    """Adjacent content deltas joined; adjacent argument fragments of the same call joined."""
    merged: list[dict] = []
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
