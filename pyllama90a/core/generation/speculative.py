"""Speculative decoding by prompt lookup (llama-server's `--spec-type ngram-simple`): the tokens that followed the
last earlier occurrence of the newest n-gram are guessed to follow again. A generation that repeats its prompt
(code editing, a quoted document) then decodes several tokens per llama_decode instead of one.

The guesses (the draft) are decoded in one batch after the last sampled token, and GenerationSequence.verify
samples each position with the request's own sampler chain, keeping drafted tokens while they equal what was
sampled (llama.cpp's sample-and-accept). Each kept token was sampled from the same distribution, with the same
random draws, as plain decoding would have: greedy output is the same tokens, and sampling at temperature > 0
keeps its distribution and, with a seed, its tokens.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ...errors import InvalidArgumentError, int_in_range

SPEC_TYPES = ("none", "ngram-simple")
MAX_DRAFT = 256  # tokens of one draft, at most (a batch holds the draft and one more token)


@dataclass(frozen=True)
class Speculation:
    """How a Model or BatchEngine drafts (llama-server's flags): spec_type "none" or "ngram-simple"; draft_max
    (--spec-draft-n-max) tokens per draft at most, draft_min (--spec-draft-n-min) at least (a shorter guess is not
    tried); ngram_size_n (--spec-ngram-simple-size-n): the n-gram looked up. llama-server's default n is 12; ours
    is 3, which finds a repeated passage again a few tokens after the generation left it."""

    spec_type: str = "ngram-simple"
    draft_max: int = 16
    draft_min: int = 0
    ngram_size_n: int = 3

    def __post_init__(self) -> None:
        if self.spec_type not in SPEC_TYPES:
            raise InvalidArgumentError(f"spec_type must be one of {', '.join(SPEC_TYPES)}, got {self.spec_type!r}",
                                       param="spec_type")
        int_in_range("draft_max", self.draft_max, 1, MAX_DRAFT)
        int_in_range("draft_min", self.draft_min, 0, self.draft_max)
        int_in_range("ngram_size_n", self.ngram_size_n, 1, 64)

    def drafter(self, prompt: Sequence[int]) -> NgramDrafter | None:
        """A drafter for one generation after `prompt`; None when this speculation drafts nothing."""
        return None if self.spec_type == "none" else NgramDrafter(self, prompt)


def speculation(value: object) -> Speculation | None:
    """A `speculative=` argument checked: a Speculation, or None (no drafting)."""
    if value is not None and not isinstance(value, Speculation):
        raise InvalidArgumentError(f"speculative must be a Speculation or None, got {type(value).__name__}",
                                   param="speculative")
    return value


class NgramDrafter:
    """One generation's history (prompt, then each generated token) indexed by n-gram: where each n-gram last
    ended. A lookup is one dict access, so drafting costs nothing next to a decode."""

    def __init__(self, settings: Speculation, prompt: Sequence[int]) -> None:
        self.settings = settings
        self.history: list[int] = []
        self._last_end: dict[tuple[int, ...], int] = {}  # n-gram -> where its latest occurrence ended
        self._previous_end = -1  # where the newest n-gram ended before its current occurrence (-1: never)
        # the longest draft tried next: halved down to what was kept after a rejection, doubled after a draft kept
        # whole, since on a CPU each rejected token costs a good part of a decode step
        self.limit = settings.draft_max
        for token in prompt:
            self.add(token)

    def add(self, token: int) -> None:
        """`token` follows the history (a prompt token or a generated one)."""
        history, n = self.history, self.settings.ngram_size_n
        history.append(token)
        if len(history) < n:
            return
        key = tuple(history[-n:])
        self._previous_end = self._last_end.get(key, -1)
        self._last_end[key] = len(history)

    def feedback(self, drafted: int, accepted: int) -> None:
        """How the last draft fared: the next one is as long as the run kept, plus one, or twice as long."""
        longer = 2 * self.limit if accepted == drafted else accepted + 1
        self.limit = min(self.settings.draft_max, max(self.settings.draft_min, longer))

    def draft(self, limit: int) -> list[int]:
        """Up to `limit` tokens guessed to follow the history (none when the newest n-gram never occurred before,
        or fewer than draft_min would be guessed)."""
        start = self._previous_end
        if start < 0:
            return []
        guess = self.history[start:start + min(limit, self.limit)]
        return guess if len(guess) >= max(self.settings.draft_min, 1) else []
