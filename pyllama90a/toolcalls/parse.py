"""One reader of generated text into content and tool calls, for whole answers and streams alike: `scan` reads
the text so far (with `final`, all of it), and a stream's deltas are the differences between successive
scans of its accumulated text (llama.cpp's approach), so a stream cannot disagree with a whole-text parse.

Reading never raises on model output: text that is not a well-formed call of a listed function is content,
from where it went wrong to the end. A call the text ends inside (cut off by max_tokens or a stop string; a
constrained call can end no other way) is neither a call nor content: a partial "<tool_call>..." never reaches
the content; its block's complete calls (Mistral's array) are kept."""
from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Union

from .formats import FAMILIES, PartialCall

Item = Union[str, PartialCall]  # content text, or a call


@dataclass(frozen=True)
class Scan:
    items: list[Item]   # in the text's order
    malformed: bool     # a block went wrong: the text from it on is the last content item

    @property
    def calls(self) -> list[PartialCall]:
        return [i for i in self.items if isinstance(i, PartialCall)]

    @property
    def content(self) -> str:
        return "".join(i for i in self.items if isinstance(i, str))


def scan(family: ModuleType | str, text: str, names: set[str] | None, final: bool) -> Scan:
    """The content and calls of `text`. Not `final`: a tail that may still become a call is held back (not in
    the content), and the last block may be open, its last call partial."""
    reader = FAMILIES[family] if isinstance(family, str) else family
    items: list[Item] = []
    pos = 0
    while True:
        start = reader.find_start(text, pos)
        if start is None:
            hold = None if final else reader.partial_start(text, pos)
            items.append(text[pos:hold])
            return Scan(items, False)
        items.append(text[pos:start])
        block = reader.read_block(text, start, names, final)
        if block.status == "malformed":
            cut = reader.read_block(text, start, names, False) if final else block
            if cut.status == "open":  # the text ends inside a call (max_tokens, a stop): no content either
                items += [c for c in cut.calls if c.complete]
                return Scan(items, False)
            items.append(text[start:])
            return Scan(items, True)
        items += block.calls
        if block.status == "open":
            return Scan(items, False)
        pos = block.end
