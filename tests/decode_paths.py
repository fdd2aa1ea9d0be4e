"""What the tests comparing two attention paths share: a patch's environment switch, set for a while, and
decoding one token at a time."""
from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np
import pytest

import pyllama90a as pl


@contextlib.contextmanager
def switches(**values: str | None) -> Iterator[None]:
    """Environment variables set (None: unset) inside the block, restored after; llama.cpp reads a patch's switch
    when it builds a graph or a context, so set it around that."""
    with pytest.MonkeyPatch.context() as mp:
        for name, value in values.items():
            if value is None:
                mp.delenv(name, raising=False)
            else:
                mp.setenv(name, value)
        yield


def step_logits(model: pl.Model, tokens: list[int]) -> np.ndarray:
    """Decode `tokens` one at a time after what `model` holds; the logits after each, shape (len, n_vocab)."""
    rows = []
    for token in tokens:
        model.eval([token])
        rows.append(model.last_logits())
    return np.array(rows)
