"""What the tests comparing two attention paths share: the paths a Model takes (AttentionPaths), and decoding
one token at a time."""
from __future__ import annotations

import numpy as np

import pyllama90a as pl
from pyllama90a.core.model.attention_paths import AttentionPaths


def paths(**on: bool) -> AttentionPaths:
    """The default paths with some switched: paths(vquant_direct=False)."""
    return AttentionPaths(**on)


def step_logits(model: pl.Model, tokens: list[int]) -> np.ndarray:
    """Decode `tokens` one at a time after what `model` holds; the logits after each, shape (len, n_vocab)."""
    rows = []
    for token in tokens:
        model.eval([token])
        rows.append(model.last_logits())
    return np.array(rows)
