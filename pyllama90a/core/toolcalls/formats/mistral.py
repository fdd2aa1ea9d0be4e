"""Mistral: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``, one JSON array of calls."""
from __future__ import annotations

from ..json_scan import skip_ws
from .call_object import Block, PartialCall, Scanners, marker_search, read_call

TRIGGER = "[TOOL_CALLS]"


find_start, partial_start = marker_search(TRIGGER)


def read_block(text: str, start: int, names: set[str] | None, final: bool,
               scanners: Scanners | None = None) -> Block:
    more = Block("malformed" if final else "open")
    pos = skip_ws(text, start + len(TRIGGER))
    if pos >= len(text):
        return more
    if text[pos] != "[":
        return Block("malformed")
    calls: list[PartialCall] = []
    pos += 1
    while True:
        pos = skip_ws(text, pos)
        if pos >= len(text):
            return Block(more.status, calls)
        item = read_call(text, pos, names, final, scanners)
        calls += item.calls
        if item.status != "done":
            return Block(item.status, calls)
        pos = skip_ws(text, item.end)
        if pos >= len(text):
            return Block(more.status, calls)
        if text[pos] == "]":
            return Block("done", calls, pos + 1)
        if text[pos] != ",":
            return Block("malformed")
        pos += 1
