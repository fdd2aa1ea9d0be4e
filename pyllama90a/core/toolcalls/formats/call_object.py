"""What every format family shares: one call object ({"name": ..., "arguments": {...}}) read from a
position of the text, complete or partial, and the blocks a family reads calls in."""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from ..json_scan import ObjectScanner, skip_ws

Scanners = dict[int, ObjectScanner]  # a stream's scanners of the objects it reads, by their position in the text

ARG_KEYS = ("arguments", "parameters")  # Llama 3 writes "parameters"; either is read in every format


@dataclass(frozen=True)
class PartialCall:
    """A call as far as the text shows it: its name, its arguments' JSON text so far (all of it once
    `complete`), and `upto`, the end in the text of what it covers (the arguments so far, or the object)."""

    name: str
    arguments: str
    upto: int
    complete: bool


@dataclass
class Block:
    """One call block from its start: "done" at `end` (its calls complete), "open" (the text ends inside it;
    its last call may be partial) or "malformed" (not a call: from its start on, the text is content)."""

    status: Literal["done", "open", "malformed"]
    calls: list[PartialCall] = field(default_factory=list)
    end: int = 0


def read_call(text: str, pos: int, names: set[str] | None, final: bool, scanners: Scanners | None = None) -> Block:
    """The call object at `pos`: "done" (one complete call, `end` after the object), "open" (partial: the call
    shows once its name is known, listed, and its arguments object has begun) or "malformed". With
    `scanners`, the scanner of an earlier read at `pos` goes on from where it stopped."""
    scanner = scanners.get(pos) if scanners is not None else None
    if scanner is None:
        scanner = ObjectScanner()
        if scanners is not None:
            scanners[pos] = scanner
    if not (scanner.done or scanner.invalid):
        scanner.feed(text[pos + len(scanner.buf):])
    if scanner.invalid:
        return Block("malformed")
    if not scanner.done:
        if final:
            return Block("malformed")
        partial = _partial_call(scanner, pos, names)
        return Block("open", [partial] if partial is not None else [])
    if scanner.memo is None:
        scanner.memo = (_complete_call(scanner, names),)
    complete: tuple[str, str] | None = scanner.memo[0]
    if complete is None:
        return Block("malformed")
    return Block("done", [PartialCall(*complete, upto=pos + scanner.end, complete=True)], pos + scanner.end)


def closed_by(block: Block, text: str, closing: str, final: bool) -> Block:
    """A done call block followed by an optional `closing` text (after whitespace): the block ends after the
    closing; while the text may still become it, the block stays open."""
    if block.status != "done":
        return block
    after = skip_ws(text, block.end)
    rest = text[after:]
    if closing and rest.startswith(closing):
        return Block("done", block.calls, after + len(closing))
    if not final and closing.startswith(rest):
        return Block("open", block.calls)
    return block


def _partial_call(scanner: ObjectScanner, pos: int, names: set[str] | None) -> PartialCall | None:
    keys = [k for k in scanner.order if k not in ("type", "id")]
    if len(keys) < 2 or keys[0] != "name" or keys[1] not in ARG_KEYS:
        return None
    name_start, name_end = scanner.members["name"]
    args_start, args_end = scanner.members[keys[1]]
    if name_end is None or scanner.buf[args_start] != "{":
        return None
    try:
        name = json.loads(scanner.buf[name_start:name_end])
    except ValueError:
        return None
    if not isinstance(name, str) or (names is not None and name not in names):
        return None
    upto = args_end if args_end is not None else scanner.i
    return PartialCall(name, scanner.buf[args_start:upto], pos + upto, complete=False)


def _complete_call(scanner: ObjectScanner, names: set[str] | None) -> tuple[str, str] | None:
    """(name, arguments JSON text) of a complete scanned call object, or None if it is not a valid call."""
    try:
        obj = json.loads(scanner.buf[:scanner.end])
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    if not isinstance(name, str) or (names is not None and name not in names):
        return None
    if set(obj) - {"name", "type", "id", *ARG_KEYS}:
        return None
    keys = [k for k in ARG_KEYS if k in obj]
    if not keys:
        return name, "{}"
    if len(keys) > 1 or not isinstance(obj[keys[0]], dict):
        return None
    return name, scanner.value(keys[0]) or "{}"


Search = Callable[[str, int], "int | None"]


def marker_search(marker: str) -> tuple[Search, Search]:
    """find_start and partial_start of a family whose blocks start with the literal `marker`."""
    def find_start(text: str, pos: int) -> int | None:
        i = text.find(marker, pos)
        return None if i < 0 else i

    def partial_start(text: str, pos: int) -> int | None:
        return tail_start(text, pos, marker)

    return find_start, partial_start


def tail_start(text: str, pos: int, marker: str) -> int | None:
    """Where a tail of text[pos:] starts that is the beginning of `marker` (held back while streaming)."""
    for k in range(min(len(marker) - 1, len(text) - pos), 0, -1):
        if marker.startswith(text[len(text) - k:]):
            return len(text) - k
    return None
