"""A generation's thinking block (`<think>`...`</think>`, or the markers its chat template declares), token by token.

`Thinking` says what a request asks of it: its markers, whether the prompt already opened the block (a template
whose generation prompt ends in `<think>\\n`: the output starts inside it), a budget of reasoning tokens (when
spent, the end marker, after an optional message, is forced and the answer goes on) and whether the request's
constraint waits for the block's end. `ThinkingTracker` follows one sequence's bytes: the sequence asks it for the
next forced token, whether the constraint applies yet, and feeds it every token's bytes.

The constraint (a JSON schema, a grammar, a tool call) starts at the token after the end marker, so the reasoning
text is free. A sampled token that would end the marker and carry more text with it (`>{"` ...) is replaced by the
marker's rest, so the constraint's first token is the answer's first token; an end of generation inside the block
is replaced by the end marker, so the constrained answer is always written. Only a block the prompt opened defers
the constraint: without it the constraint applies from the first token.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ...errors import InvalidArgumentError, utf8


class Tokenizer(Protocol):
    def tokenize(self, data: bytes, add_special: bool, parse_special: bool) -> list[int]: ...

    def token_piece(self, token: int, special: bool = False) -> bytes: ...


@dataclass(frozen=True)
class Thinking:
    """A request's thinking block: start and end markers (non-empty text), `inside` (the prompt opened it),
    `budget` (tokens of reasoning, None: no limit, 0: the end marker at once) and `budget_message` (text forced
    before the end marker when the budget is spent)."""

    start: str
    end: str
    inside: bool = False
    budget: int | None = None
    budget_message: str = ""

    def __post_init__(self) -> None:
        for name in ("start", "end", "budget_message"):
            value = getattr(self, name)
            if not isinstance(value, str) or (not value and name != "budget_message"):
                what = "a str" if name == "budget_message" else "a non-empty str"
                raise InvalidArgumentError(f"thinking {name} must be {what}, got {value!r}"[:200],
                                           param="reasoning_budget_message" if name == "budget_message" else None)
            utf8(f"the thinking {name}", value)
        if not isinstance(self.inside, bool):
            raise InvalidArgumentError("thinking inside must be True or False")
        budget = self.budget
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 0):
            raise InvalidArgumentError(f"the reasoning budget must be None (no limit) or a number of tokens >= 0, "
                                       f"got {budget!r}", param="reasoning_budget")


class ThinkingTracker:
    """One sequence's thinking block. States: "before" (the block may still open: the output so far is
    whitespace or a prefix of the start marker), "inside", "after" (it ended, or the output is no block)."""

    def __init__(self, thinking: Thinking, vocab: Tokenizer) -> None:
        self.thinking = thinking
        self._vocab = vocab
        self._start, self._end = thinking.start.encode(), thinking.end.encode()
        self.state = "inside" if thinking.inside else "before"
        self._seen = b""          # "before": the output so far; "inside": the block's bytes so far
        self.reasoning_tokens = 0
        self._forced: list[int] = []
        # the tokens of the end marker's every suffix (its rest, when a token would run past it), and the budget's
        self._rests = [self._tokens(self._end[k:]) for k in range(len(self._end))]
        self._budget_tokens = self._tokens(thinking.budget_message.encode() + self._end)

    def _tokens(self, text: bytes) -> list[int]:
        tokens = self._vocab.tokenize(text, False, True)
        if not tokens:
            raise InvalidArgumentError(f"the thinking marker {text!r} has no tokens in this vocabulary")
        return tokens

    @property
    def defers_constraint(self) -> bool:
        """The request's constraint waits: the prompt opened the block and it has not ended."""
        return self.thinking.inside and self.state == "inside"

    def forced(self) -> int | None:
        """The token this step must produce (the end marker's, the budget's), or None: sample."""
        if not self._forced and self.state == "inside" and self.thinking.budget is not None \
                and self.reasoning_tokens >= self.thinking.budget:
            self._forced = list(self._budget_tokens)
        return self._forced[0] if self._forced else None

    def replacement(self, token: int, piece: bytes, eog: bool) -> int:
        """For a constraint waiting for the block's end: `token` (sampled, of bytes `piece`; `eog`: it ends the
        generation), or, where it would end the block with more text after the marker or end the generation
        inside the block, the first token of the marker's rest (the others are forced next)."""
        if not self.defers_constraint:
            return token
        if eog:  # the answer the constraint is for has not begun: the block ends first
            done = next((k for k in range(len(self._end) - 1, 0, -1) if self._seen.endswith(self._end[:k])), 0)
            rest = self._rests[done]
        else:
            joined = self._seen + piece
            at = joined.find(self._end)
            if at < 0 or not joined[at + len(self._end):].strip():
                return token
            seen = len(self._seen)  # the marker starts in what was seen (its rest is a suffix) or in this token
            rest = self._rests[seen - at] if at <= seen else self._tokens(piece[:at - seen] + self._end)
        self._forced = rest[1:]
        return rest[0]

    def accept(self, piece: bytes, forced: bool) -> None:
        """Follow the produced token (its bytes `piece`; `forced`: it was forced())."""
        if forced:
            self._forced.pop(0)
        if self.state == "after":
            return
        self._seen += piece
        if self.state == "before":
            lead = self._seen.lstrip()
            if lead.startswith(self._start):
                self.state, self._seen = "inside", lead[len(self._start):]
            elif not self._start.startswith(lead):
                self.state = "after"
                return
            else:
                return
        self.reasoning_tokens += 1
        if self._end in self._seen:
            self.state, self._seen, self._forced = "after", b"", []
        else:
            self._seen = self._seen[-(len(self._end) - 1):] if len(self._end) > 1 else b""
