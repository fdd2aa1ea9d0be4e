"""An incremental scanner of one JSON object: it follows strings and nesting and records the top-level
members' keys and value spans, so that a partial call shows its name and where its arguments start before the
object is complete. Full validity is checked with json.loads once it is complete."""
from __future__ import annotations

import json
from typing import Any

WS = " \t\r\n"


def skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in WS:
        pos += 1
    return pos


class ObjectScanner:
    """See the module's doc; `buf` holds what it was fed (the text from the object's start), `memo` what a
    reader made of the complete object (read once)."""

    def __init__(self) -> None:
        self.buf = ""
        self.i = 0
        self.depth = 0
        self.stack: list[str] = []
        self.in_str = False
        self.esc = False
        self.phase = "start"  # start, key, colon, value, prim, nested, string, comma, done, invalid
        self.key_start = 0
        self.key: str | None = None
        self.value_start = 0
        self.members: dict[str, tuple[int, int | None]] = {}  # key -> (value start, value end or None)
        self.order: list[str] = []
        self.n_members = 0
        self.end = 0
        self.memo: Any = None

    @property
    def done(self) -> bool:
        return self.phase == "done"

    @property
    def invalid(self) -> bool:
        return self.phase == "invalid"

    def feed(self, text: str) -> None:
        self.buf += text
        buf = self.buf
        n = len(buf)
        while self.i < n and self.phase not in ("done", "invalid"):
            c = buf[self.i]
            if self.in_str:
                if self.esc:
                    self.esc = False
                elif c == "\\":
                    self.esc = True
                elif c == '"':
                    self.in_str = False
                    if self.depth == 1:
                        self._string_ended()
                self.i += 1
                continue
            self._char(c)
            self.i += 1

    def _string_ended(self) -> None:
        if self.phase == "key":
            try:
                self.key = json.loads(self.buf[self.key_start:self.i + 1])
            except ValueError:
                self.phase = "invalid"
                return
            self.phase = "colon"
        elif self.phase == "string":
            self._end_member(self.i + 1)

    def _begin_member(self, start: int) -> None:
        assert self.key is not None
        if self.key in self.members:  # a repeated key: ambiguous, not a call we accept
            self.phase = "invalid"
            return
        self.members[self.key] = (start, None)
        self.order.append(self.key)

    def _end_member(self, end: int) -> None:
        assert self.key is not None
        self.members[self.key] = (self.members[self.key][0], end)
        self.n_members += 1
        self.phase = "comma"

    def _char(self, c: str) -> None:
        phase = self.phase
        if phase == "start":
            if c in WS:
                return
            if c != "{":
                self.phase = "invalid"
                return
            self.depth, self.stack, self.phase = 1, ["{"], "key"
            return
        if self.depth >= 2:  # inside a member's value
            if c == '"':
                self.in_str = True
            elif c in "{[":
                self.stack.append(c)
                self.depth += 1
            elif c in "}]":
                if self.stack[-1] != ("{" if c == "}" else "["):
                    self.phase = "invalid"
                    return
                self.stack.pop()
                self.depth -= 1
                if self.depth == 1:
                    self._end_member(self.i + 1)
            return
        # depth 1: between the call object's members
        if phase == "prim":
            if c in WS or c in ",}":
                self._end_member(self.i)
                phase = self.phase
                if c in WS:
                    return
            else:
                return
        if c in WS:
            return
        if phase == "key":
            if c == '"':
                self.in_str, self.key_start = True, self.i
            elif c == "}" and self.n_members == 0 and not self.members:
                self._close()
            else:
                self.phase = "invalid"
        elif phase == "colon":
            self.phase = "value" if c == ":" else "invalid"
        elif phase == "value":
            self._begin_member(self.i)
            if self.phase == "invalid":
                return
            if c == '"':
                self.in_str, self.phase = True, "string"
            elif c in "{[":
                self.stack.append(c)
                self.depth += 1
                self.phase = "nested"
            elif c in ",}]:":
                self.phase = "invalid"
            else:
                self.phase = "prim"
        elif phase == "comma":
            if c == ",":
                self.phase = "key"
            elif c == "}":
                self._close()
            else:
                self.phase = "invalid"
        else:
            self.phase = "invalid"

    def _close(self) -> None:
        self.stack.pop()
        self.depth = 0
        self.phase = "done"
        self.end = self.i + 1

    def value(self, key: str) -> str | None:
        span = self.members.get(key)
        if span is None or span[1] is None:
            return None
        return self.buf[span[0]:span[1]]

