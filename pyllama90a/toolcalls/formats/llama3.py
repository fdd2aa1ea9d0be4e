"""Llama 3.1/3.2 custom tools: ``{"name": ..., "parameters": {...}}``, optionally after ``<|python_tag|>``;
several calls separated by ``;`` or newlines."""
from __future__ import annotations

import re

from ..json_scan import WS, skip_ws
from .call_object import Block, closed_by, read_call, tail_start

PYTHON_TAG = "<|python_tag|>"
_START = re.compile(r'<\|python_tag\|>|\{\s*"(?:name|type)"')
_FIRST_KEYS = ('"name"', '"type"')


def find_start(text: str, pos: int) -> int | None:
    m = _START.search(text, pos)
    return m.start() if m else None


def partial_start(text: str, pos: int) -> int | None:
    """A tail that may become the python tag, or an object whose first key may become "name" or "type"."""
    best = tail_start(text, pos, PYTHON_TAG)
    brace = text.rfind("{", pos)
    if brace >= 0:
        rest = text[brace + 1:].lstrip(WS)
        if len(text) - brace < 64 and any(key.startswith(rest) for key in _FIRST_KEYS):
            best = brace if best is None else min(best, brace)
    return best


def read_block(text: str, start: int, names: set[str] | None, final: bool) -> Block:
    pos = skip_ws(text, start + len(PYTHON_TAG)) if text.startswith(PYTHON_TAG, start) else start
    if pos >= len(text):
        return Block("malformed" if final else "open")
    return closed_by(read_call(text, pos, names, final), text, ";", final)
