"""Checks of what the model computed: NaN or infinite logits and embeddings are an error, not text.

A file with NaN/inf weights (or values that overflow on the way) loads and decodes; the sampler then picks from
garbage (greedy sampling of a NaN row gives token 0, over and over) and nothing says so. The logits of a
generation's first step and every embedding are checked: n_vocab (or n_embd) floats, microseconds. So are a
request's logit_bias and constraint, which must leave some token to sample.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...errors import ConstraintError, InvalidArgumentError, NonFiniteOutputError

if TYPE_CHECKING:  # pragma: no cover
    from ..constrained import OutputRules


def require_finite(values: np.ndarray, what: str) -> None:
    """NonFiniteOutputError naming `what` unless every value is finite."""
    if not np.isfinite(values).all():
        n_bad = int(values.size - np.count_nonzero(np.isfinite(values)))
        raise NonFiniteOutputError(f"the model computed {n_bad} NaN or infinite values of {values.size} in {what}: "
                                   f"its weights are broken (NaN/inf tensor data, or values that overflow)")


def refuse_total_ban(rules: OutputRules | None, n_vocab: int) -> None:
    """InvalidArgumentError (param logit_bias) when a request's logit_bias bans (-100) every token: nothing could
    be sampled, and a sampler given a row of -inf picks garbage (the logprobs would be NaN)."""
    bias = rules.bias if rules is not None else None
    if bias is not None and int(np.count_nonzero(np.isneginf(bias.values))) >= n_vocab:
        raise InvalidArgumentError(f"logit_bias bans all {n_vocab} tokens of the vocabulary (-100 each): nothing "
                                   f"could be generated", param="logit_bias")


def require_choice(row: np.ndarray) -> None:
    """ConstraintError when the logit_bias and the constraint together leave no token to sample (every logit
    -inf after they were applied)."""
    if not np.isfinite(row).any():
        raise ConstraintError("logit_bias and the output constraint together leave no token that can be generated",
                              param="logit_bias")
