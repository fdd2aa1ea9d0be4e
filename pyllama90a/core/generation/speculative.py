"""Speculative decoding: a drafter guesses the tokens that follow, and the target model verifies the guesses (the
draft) in one batch. Two drafters, as llama-server's --spec-type names them:

- ngram-simple (NgramDrafter, here): prompt lookup, the tokens that followed the last earlier occurrence of the
  newest n-gram are guessed to follow again. A generation that repeats its prompt (code editing, a quoted
  document) then decodes several tokens per llama_decode instead of one.
- draft-simple (core/model/draft_model.py): a smaller draft model with the target's vocabulary, run greedily in
  its own context (llama-server's --model-draft).

The draft is decoded in one batch after the last sampled token, and GenerationSequence.verify samples each
position with the request's own sampler chain, keeping drafted tokens while they equal what was sampled
(llama.cpp's sample-and-accept). Each kept token was sampled from the same distribution, with the same random
draws, as plain decoding would have: greedy output is the same tokens, and sampling at temperature > 0 keeps its
distribution and, with a seed, its tokens.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ...errors import InvalidArgumentError, int_in_range

SPEC_TYPES = ("none", "ngram-simple", "draft-simple")
MAX_DRAFT = 256  # tokens of one draft, at most (a batch holds the draft and one more token)


@dataclass(frozen=True)
class Speculation:
    """How a Model or BatchEngine drafts (llama-server's flags): spec_type "none", "ngram-simple" or "draft-simple"
    (None: draft-simple with a draft model, else ngram-simple); draft_max (--spec-draft-n-max) tokens per draft at
    most, draft_min (--spec-draft-n-min) at least (a shorter guess is not tried); ngram_size_n
    (--spec-ngram-simple-size-n): the n-gram looked up. llama-server's default n is 12; ours is 3, which finds a
    repeated passage again a few tokens after the generation left it.

    draft (--model-draft): the draft model of draft-simple, a GGUF path or a loaded Model (whose weights get a
    context of their own: the Model stays the caller's). Its vocabulary must be the target's (llama.cpp's rules,
    checked when the target opens: DraftModelError). draft_threads (--spec-draft-threads; None: the target's),
    draft_ctk/draft_ctv (--spec-draft-type-k/-v) and draft_n_gpu_layers (--spec-draft-ngl) set its context and
    placement when draft is a path."""

    spec_type: str | None = None
    draft_max: int = 16
    draft_min: int = 0
    ngram_size_n: int = 3
    draft: object = None
    draft_threads: int | None = None
    draft_ctk: str = "f16"
    draft_ctv: str = "f16"
    draft_n_gpu_layers: int = -1

    def __post_init__(self) -> None:
        if self.spec_type is None:  # (frozen: the resolved type is set once, here)
            object.__setattr__(self, "spec_type", "ngram-simple" if self.draft is None else "draft-simple")
        if self.spec_type not in SPEC_TYPES:
            raise InvalidArgumentError(f"spec_type must be one of {', '.join(SPEC_TYPES)}, got {self.spec_type!r}",
                                       param="spec_type")
        if (self.draft is not None) != (self.spec_type == "draft-simple"):
            raise InvalidArgumentError("a draft model (draft=...) goes with spec_type draft-simple, and draft-simple "
                                       f"needs one; got spec_type {self.spec_type!r} and draft={self.draft!r}",
                                       param="draft")
        if isinstance(self.draft, (str, bytes)) and not self.draft:
            raise InvalidArgumentError("draft is an empty path", param="draft")
        int_in_range("draft_max", self.draft_max, 1, MAX_DRAFT)
        int_in_range("draft_min", self.draft_min, 0, self.draft_max)
        int_in_range("ngram_size_n", self.ngram_size_n, 1, 64)
        if self.draft_threads is not None:
            int_in_range("draft_threads", self.draft_threads, 1, 4096)
        int_in_range("draft_n_gpu_layers", self.draft_n_gpu_layers, -1, 1 << 20)

    @property
    def draft_path(self) -> str | os.PathLike[str] | None:
        """draft when it is a path (a file to load); None when it is a loaded Model, or there is none."""
        return self.draft if isinstance(self.draft, (str, os.PathLike)) else None

    def drafter(self, prompt: Sequence[int]) -> NgramDrafter | None:
        """A prompt-lookup drafter for one generation after `prompt`; None when this speculation does not draft
        by prompt lookup (a draft model's drafters come from core/model/draft_model.py)."""
        return NgramDrafter(self, prompt) if self.spec_type == "ngram-simple" else None


class Drafter(Protocol):
    """What GenerationSequence asks of a drafter: the history grows by add(), draft() guesses what follows it,
    feedback() says how much of the last draft was kept."""

    def add(self, token: int) -> None: ...

    def feedback(self, drafted: int, accepted: int) -> None: ...

    def draft(self, limit: int) -> list[int]: ...


class DraftLength:
    """The longest draft tried next: halved down to what was kept after a rejection, doubled after a draft kept
    whole, since on a CPU each rejected token costs a good part of a decode step (both drafters' rule)."""

    def __init__(self, settings: Speculation) -> None:
        self.settings = settings
        self.limit = settings.draft_max

    def feedback(self, drafted: int, accepted: int) -> None:
        """How the last draft fared: the next one is as long as the run kept, plus one, or twice as long."""
        longer = 2 * self.limit if accepted == drafted else accepted + 1
        self.limit = min(self.settings.draft_max, max(self.settings.draft_min, longer))


def speculation(value: object) -> Speculation | None:
    """A `speculative=` argument checked: a Speculation, or None (no drafting)."""
    if value is not None and not isinstance(value, Speculation):
        raise InvalidArgumentError(f"speculative must be a Speculation or None, got {type(value).__name__}",
                                   param="speculative")
    return value


class NgramDrafter(DraftLength):
    """One generation's history (prompt, then each generated token) indexed by n-gram: where each n-gram last
    ended. A lookup is one dict access, so drafting costs nothing next to a decode."""

    def __init__(self, settings: Speculation, prompt: Sequence[int]) -> None:
        super().__init__(settings)
        self.history: list[int] = []
        self._last_end: dict[tuple[int, ...], int] = {}  # n-gram -> where its latest occurrence ended
        self._previous_end = -1  # where the newest n-gram ended before its current occurrence (-1: never)
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

    def draft(self, limit: int) -> list[int]:
        """Up to `limit` tokens guessed to follow the history (none when the newest n-gram never occurred before,
        or fewer than draft_min would be guessed)."""
        start = self._previous_end
        if start < 0:
            return []
        guess = self.history[start:start + min(limit, self.limit)]
        return guess if len(guess) >= max(self.settings.draft_min, 1) else []
