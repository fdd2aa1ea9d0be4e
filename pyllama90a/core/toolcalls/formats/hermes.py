"""Hermes/Qwen (and the generic format, which writes the same): one
``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` block per call; the closing tag may be left
out when the text ends or the next call starts."""
from __future__ import annotations

from ..json_scan import skip_ws
from .call_object import Block, Scanners, closed_by, marker_search, read_call

TRIGGER = "<tool_call>"
CLOSING = "</tool_call>"


find_start, partial_start = marker_search(TRIGGER)


def read_block(text: str, start: int, names: set[str] | None, final: bool,
               scanners: Scanners | None = None) -> Block:
    pos = skip_ws(text, start + len(TRIGGER))
    if pos >= len(text):
        return Block("malformed" if final else "open")
    return closed_by(read_call(text, pos, names, final, scanners), text, CLOSING, final)
