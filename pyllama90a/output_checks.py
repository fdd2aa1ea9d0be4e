"""Checks of what the model computed: NaN or infinite logits and embeddings are an error, not text.

A file with NaN/inf weights (or values that overflow on the way) loads and decodes; the sampler then picks from
garbage (greedy sampling of a NaN row gives token 0, over and over) and nothing says so. The logits of a
generation's first step and every embedding are checked: n_vocab (or n_embd) floats, microseconds.
"""
from __future__ import annotations

import numpy as np

from .errors import NonFiniteOutputError


def require_finite(values: np.ndarray, what: str) -> None:
    """NonFiniteOutputError naming `what` unless every value is finite."""
    if not np.isfinite(values).all():
        n_bad = int(values.size - np.count_nonzero(np.isfinite(values)))
        raise NonFiniteOutputError(f"the model computed {n_bad} NaN or infinite values of {values.size} in {what}: "
                                   f"its weights are broken (NaN/inf tensor data, or values that overflow)")
