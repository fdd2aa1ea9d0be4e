"""Llama 3.1/3.2 custom tools: ``{"name": ..., "parameters": {...}}``, optionally after ``<|python_tag|>``;
several calls separated by ``;`` or newlines."""
from __future__ import annotations

import re

from ..json_scan import WS, skip_ws
from .call_object import Block, Scanners, closed_by, read_call, tail_start

PYTHON_TAG = "<|python_tag|>"
_START = re.compile(r'<\|python_tag\|>|\{\s*"(?:name|type)"')
_FIRST_KEYS = ('"name"', '"type"')


def find_start(text: str, pos: int) -> int | None:
    m = _START.search(text, pos)
    return m.start() if m else None


def partial_start(text: str, pos: int) -> int | None:
    """A tail that may become the python tag, or an object whose first key may become "name" or "type": a "{",
    whitespace, then the beginning of '"name"' or '"type"' (read backwards from the end, so that a stream's
    scan costs what the tail is, not the text)."""
    best = tail_start(text, pos, PYTHON_TAG)
    i = len(text)
    key = max((k for k in range(1, 6) for first in _FIRST_KEYS if i - k >= pos and text.endswith(first[:k])),
              default=0)
    i -= key
    while i > pos and text[i - 1] in WS:
        i -= 1
    if i > pos and text[i - 1] == "{":
        best = i - 1 if best is None else min(best, i - 1)
    return best


def read_block(text: str, start: int, names: set[str] | None, final: bool,
               scanners: Scanners | None = None) -> Block:
    pos = skip_ws(text, start + len(PYTHON_TAG)) if text.startswith(PYTHON_TAG, start) else start
    if pos >= len(text):
        return Block("malformed" if final else "open")
    return closed_by(read_call(text, pos, names, final, scanners), text, ";", final)
