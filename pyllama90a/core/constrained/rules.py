"""A request's rules on its output beyond the sampler chain: OpenAI's logit_bias and a Constraint, applied in
place to llama.cpp's logits row right before the chain samples from it. Model.generate/chat and BatchEngine
use the same two calls per step, so a request behaves the same on either path."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ...native import ModelHandle
from .logit_bias import LogitBias
from .matcher import Matcher
from .spec import Constraint
from .vocab import end_of_generation, vocab_for


class OutputRules:
    """The logit_bias and constraint matcher of one generation (one sequence)."""

    __slots__ = ("bias", "matcher")

    def __init__(self, matcher: Matcher | None, bias: LogitBias | None) -> None:
        self.matcher, self.bias = matcher, bias

    @classmethod
    def for_request(cls, vocab: ModelHandle, constraint: Constraint | None,
                    logit_bias: Mapping[object, object] | None, ban_eog: bool = False) -> OutputRules | None:
        """The rules a request asks for on the vocabulary of `vocab`'s weights (checked; the grammar compiled now,
        in the caller's thread), or None when it asks for none: the per-step path then touches no logits.
        ban_eog: the end-of-generation tokens banned too (ignore_eos, as llama.cpp does it)."""
        bias = LogitBias(logit_bias or {}, vocab.n_vocab) if logit_bias or ban_eog else None
        if ban_eog and bias is not None:
            bias = bias.banning(end_of_generation(vocab))
        matcher = Matcher(constraint, vocab_for(vocab)) if constraint is not None else None
        return cls(matcher, bias) if matcher is not None or bias is not None else None

    def apply(self, row: np.ndarray, constrain: bool = True) -> None:
        """Bias, then mask, the logits row in place (a constraint's -inf wins over any bias); constrain=False:
        the bias only (a thinking block the constraint waits out). Raises ConstraintError if the grammar engine
        fails."""
        if self.bias is not None:
            self.bias.apply(row)
        if self.matcher is not None and constrain:
            self.matcher.apply(row)

    def accept(self, token: int) -> None:
        """Advance the constraint past the sampled token."""
        if self.matcher is not None:
            self.matcher.accept(token)
