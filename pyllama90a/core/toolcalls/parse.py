"""One reader of generated text into content and tool calls, for whole answers and streams alike: `scan` reads
the text so far (with `final`, all of it), and a stream's deltas are the differences between successive
scans of its accumulated text (llama.cpp's approach), so a stream cannot disagree with a whole-text parse.
A stream scans only from where the last scan settled (`Scan.settled`), with the open block's object scanners
kept between scans (`scanners`), so each new piece of text is read once.

Reading never raises on model output: text that is not a well-formed call of a listed function is content,
from where it went wrong to the end. A call the text ends inside (cut off by max_tokens or a stop string; a
constrained call can end no other way) is neither a call nor content: a partial "<tool_call>..." never reaches
the content; its block's complete calls (Mistral's array) are kept."""
from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from .formats import FAMILIES, PartialCall, Scanners

Item = str | PartialCall  # content text, or a call


@dataclass(frozen=True)
class Scan:
    """items: content and calls in the text's order. malformed: a block went wrong, and the text from it on is
    the last content item (for good: more text cannot change that). settled: the text before it reads the same
    however the text goes on (scanning from there again gives the rest), and `items[:n_settled]` is what it
    holds."""

    items: list[Item]
    malformed: bool
    settled: int = 0
    n_settled: int = 0

    @property
    def calls(self) -> list[PartialCall]:
        return [i for i in self.items if isinstance(i, PartialCall)]

    @property
    def content(self) -> str:
        return "".join(i for i in self.items if isinstance(i, str))


def scan(family: ModuleType | str, text: str, names: set[str] | None, final: bool, start: int = 0,
         scanners: Scanners | None = None) -> Scan:
    """The content and calls of text[start:] (`start`: 0, or where an earlier scan of the text settled). Not
    `final`: a tail that may still become a call is held back (not in the content), and the last block may be
    open, its last call partial. `scanners`: the object scanners of an earlier scan, by position, to go on."""
    reader = FAMILIES[family] if isinstance(family, str) else family
    items: list[Item] = []
    pos = start
    while True:
        begin = reader.find_start(text, pos)
        if begin is None:
            hold = None if final else reader.partial_start(text, pos)
            items.append(text[pos:hold])
            return Scan(items, False, len(text) if hold is None else hold, len(items))
        items.append(text[pos:begin])
        block = reader.read_block(text, begin, names, final, scanners)
        if block.status == "malformed":
            cut = reader.read_block(text, begin, names, False, scanners) if final else block
            if cut.status == "open":  # the text ends inside a call (max_tokens, a stop): no content either
                items += [c for c in cut.calls if c.complete]
                return Scan(items, False, len(text), len(items))
            items.append(text[begin:])
            return Scan(items, True, begin, len(items) - 1)
        n_before = len(items)
        items += block.calls
        if block.status == "open":
            return Scan(items, False, begin, n_before)
        pos = block.end
