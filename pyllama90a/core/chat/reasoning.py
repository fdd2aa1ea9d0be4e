"""Reasoning models: a chat's thinking block (`<think>`...`</think>`, or the markers its template declares) read
into `reasoning_content`, as llama-server reads it.

`reasoning_format` (llama-server's --reasoning-format, and a request's field): "none" leaves the generated text
as it is (thinking included) in the content; "deepseek" puts the text of a leading thinking block in the
reasoning, with the template's markers or `<think>`/`</think>` when it declares none; "auto" (the default) is
"deepseek" for a template that declares markers and "none" for one that does not.

A block is read at the start of the answer only: the prompt opened it (a template whose generation prompt ends
in `<think>\\n`, a continued assistant message that opened it), or the answer opens it (whitespace aside).
Whitespace around the reasoning and before the content after it is dropped. `ReasoningSplitter` reads a stream
as it arrives, holding back text that may be the start of a marker, so a marker cut across two tokens never
shows; a whole answer is the same splitter fed once, so a stream and a whole answer agree.

The generation side (core.generation.thinking) forces the end marker when a reasoning budget is spent, and makes
a constraint (JSON schema, grammar, tool call) wait for the block's end.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from ...errors import InvalidArgumentError
from ..generation.outputs import Piece
from ..generation.thinking import Thinking
from .held_tokens import HeldTokens

__all__ = ["DEFAULT_MARKERS", "REASONING_FORMATS", "ReasoningDefaults", "ReasoningOutput", "ReasoningSplitter",
           "closed_when_off", "get_defaults", "markers_of", "plan_reasoning", "set_defaults"]

REASONING_FORMATS = ("none", "deepseek", "auto")
DEFAULT_MARKERS = ("<think>", "</think>")
# the markers templates declare, looked for in a template's text in this order (llama.cpp's templates)
KNOWN_MARKERS = (DEFAULT_MARKERS, ("<|START_THINKING|>", "<|END_THINKING|>"), ("[THINK]", "[/THINK]"),
                 ("<seed:think>", "</seed:think>"))


def check_format(value: object) -> str:
    if value not in REASONING_FORMATS:
        raise InvalidArgumentError(f"reasoning_format must be one of {', '.join(REASONING_FORMATS)}, got "
                                   f"{value!r}"[:200], param="reasoning_format")
    return str(value)


@dataclass(frozen=True)
class ReasoningDefaults:
    """The defaults of a chat's reasoning (the server's --reasoning-* flags): the format, the budget in tokens
    (None: no limit), the message forced before the end marker when it is spent, and `enable_thinking`, the
    template variable's value when a request does not set it (llama-server's --reasoning on/off)."""

    format: str = "auto"
    budget: int | None = None
    budget_message: str = ""
    enable_thinking: bool = True

    def __post_init__(self) -> None:
        check_format(self.format)
        Thinking(*DEFAULT_MARKERS, budget=self.budget, budget_message=self.budget_message)  # (checks them)
        if not isinstance(self.enable_thinking, bool):
            raise InvalidArgumentError("enable_thinking must be True or False")


_defaults = ReasoningDefaults()


def get_defaults() -> ReasoningDefaults:
    return _defaults


def set_defaults(**changes: Any) -> ReasoningDefaults:
    """Change the reasoning defaults (e.g. set_defaults(format="none")) for every later chat."""
    global _defaults
    _defaults = replace(_defaults, **changes)
    return _defaults


def markers_of(source: str) -> tuple[str, str] | None:
    """The thinking markers a template's text declares (both of a known pair appear in it), or None."""
    return next(((s, e) for s, e in KNOWN_MARKERS if s in source and e in source), None)


def closed_when_off(prompt: str, source: str, enable_thinking: object) -> str:
    """The prompt of a chat whose thinking is off (enable_thinking false) with its block closed, as llama-server
    closes it: a block the generation prompt opened gets its end marker (QwQ, DeepSeek-R1: `<think>\\n</think>`),
    a template with markers that opened none an empty block; a prompt already ending in one (Qwen3's) is kept."""
    markers = markers_of(source)
    if enable_thinking is not False or markers is None:
        return prompt
    start, end = markers
    if prompt.rfind(start) > prompt.rfind(end):
        return prompt + end
    return prompt if prompt.rstrip().endswith(end) else prompt + start + end


@dataclass(frozen=True)
class ReasoningOutput:
    """How a chat's generated text is read: its thinking markers, and whether it starts inside the block."""

    start: str
    end: str
    inside: bool = False

    def splitter(self) -> ReasoningSplitter:
        return ReasoningSplitter(self.start, self.end, self.inside)

    def whole(self, text: str) -> tuple[str, str]:
        """A whole answer's (reasoning, content)."""
        return self.splitter().feed(text, last=True)

    def split(self, pieces: Iterator[Piece]) -> Iterator[Piece]:
        """A chat's pieces with the text split into reasoning (Piece.reasoning) and content (Piece.text); the last
        piece's Completion has the content as its text and the reasoning."""
        splitter = self.splitter()
        held = HeldTokens()  # tokens of text held back, sent with the piece that shows it
        try:
            for piece in pieces:
                done = piece.completion
                reasoning, content = splitter.feed(piece.text, last=done is not None)
                held.add(piece)
                if done is None:
                    if reasoning or content:
                        yield replace(piece, text=content, reasoning=reasoning, tokens=held.take_tokens(),
                                      logprobs=held.take_logprobs())
                    continue
                whole_reasoning, whole_content = self.whole(done.text)
                completion = replace(done, text=whole_content, reasoning=whole_reasoning)
                yield replace(piece, text=content, reasoning=reasoning, completion=completion,
                              tokens=held.take_tokens(), logprobs=held.take_logprobs())
        finally:
            close = getattr(pieces, "close", None)
            if close is not None:
                close()  # an early close of this stream ends the generation at once


def plan_reasoning(source: str | None, prompt: str, reasoning_format: str | None, budget: int | None,
                   budget_message: str | None) -> tuple[Thinking | None, ReasoningOutput | None]:
    """A chat's thinking block for the generation (None: nothing to force or wait for) and the reading of its
    output (None: all content), from its template's text (None: llama.cpp's built-in template) and rendered
    prompt. None arguments take the defaults (set_defaults); a budget given for a template without thinking
    markers is refused (it would be ignored)."""
    defaults = _defaults
    fmt = check_format(defaults.format if reasoning_format is None else reasoning_format)
    markers = markers_of(source) if source is not None else None
    if markers is None and (budget is not None or budget_message):
        raise InvalidArgumentError("a reasoning budget (or its message) needs a chat template with thinking markers "
                                   "(<think> ... </think>); this model's has none", param="reasoning_budget")
    if markers is None and fmt == "deepseek":
        markers = DEFAULT_MARKERS
    if markers is None:
        return None, None
    start, end = markers
    inside = prompt.rfind(start) > prompt.rfind(end)  # a block the prompt opened (a prefill, a continued message)
    budget = defaults.budget if budget is None else budget
    message = defaults.budget_message if budget_message is None else budget_message
    thinking = Thinking(start, end, inside, budget, message) if inside or budget is not None else None
    return thinking, ReasoningOutput(start, end, inside) if fmt != "none" else None


class ReasoningSplitter:
    """One answer's text, fed as it arrives, split into (reasoning, content) that is safe to show. States:
    "before" (the answer may still open a block), "inside", "after" (the block ended), "content" (no block)."""

    def __init__(self, start: str, end: str, inside: bool = False) -> None:
        self._start, self._end = start, end
        self._state = "inside" if inside else "before"
        self._held = ""
        self._leading = True  # at the start of the reasoning or of the content after it: whitespace is dropped

    def feed(self, text: str, last: bool = False) -> tuple[str, str]:
        """The (reasoning, content) that `text`, the answer's next text, makes known; with `last`, all of it."""
        held = self._held + text
        reasoning = ""
        if self._state == "before":
            lead = held.lstrip()
            if lead.startswith(self._start):
                held, self._state = lead[len(self._start):], "inside"
            elif self._start.startswith(lead) and not last:
                self._held = held
                return "", ""
            else:
                self._state = "content"
        if self._state == "inside":
            if self._leading:
                held = held.lstrip()
                self._leading = not held
            at = held.find(self._end)
            if at >= 0:
                reasoning, held = held[:at].rstrip(), held[at + len(self._end):]
                self._state, self._leading = "after", True
            else:
                cut = len(held) if last else _shown_until(held, self._end)
                self._held = held[cut:]
                return held[:cut].rstrip() if last else held[:cut], ""
        if self._state == "after" and self._leading:
            held = held.lstrip()
            self._leading = not held
        self._held = ""
        return reasoning, held


def _shown_until(text: str, marker: str) -> int:
    """Where the reasoning `text` may be shown to: before its end that may start `marker`, and before the
    whitespace before that (dropped if the marker follows)."""
    cut = len(text)
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:k]):
            cut -= k
            break
    while cut > 0 and text[cut - 1].isspace():
        cut -= 1
    return cut
