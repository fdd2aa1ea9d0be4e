"""OpenAI's logit_bias: token id -> bias in [-100, 100], added to that token's logit before sampling.

-100 bans the token (its logit becomes -inf, so no sampler can pick it); +100 adds 100, which outweighs any
logit a model gives, so the token is picked whenever it is otherwise allowed (a grammar mask still wins).
Checked once per request (`LogitBias(...)`), applied per step in place on the logits row.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from ...errors import InvalidArgumentError

MAX_BIAS = 100.0


class LogitBias:
    """A checked logit_bias for a vocabulary of `n_vocab` tokens. Keys are ints, or decimal strings as JSON
    gives them ({"50256": -100}); values are numbers in [-100, 100]."""

    __slots__ = ("ids", "n_vocab", "values")

    def __init__(self, bias: Mapping[object, object], n_vocab: int, *, name: str = "logit_bias") -> None:
        if not isinstance(bias, Mapping):
            raise InvalidArgumentError(f"{name} must be a mapping of token id to bias, got {type(bias).__name__}",
                                       param=name)
        if isinstance(n_vocab, bool) or not isinstance(n_vocab, int) or n_vocab <= 0:
            raise InvalidArgumentError(f"n_vocab must be a positive integer, got {n_vocab!r}")
        ids: dict[int, float] = {}
        for key, value in bias.items():
            token = _token_id(key, n_vocab, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not -MAX_BIAS <= value <= MAX_BIAS:
                raise InvalidArgumentError(f"{name}[{key!r}] must be a number in [-100, 100], got {value!r}",
                                           param=name)
            if token in ids:
                raise InvalidArgumentError(f"{name} gives token {token} twice", param=name)
            ids[token] = float(value)
        self.n_vocab = n_vocab
        self.ids = np.fromiter(ids.keys(), dtype=np.int64, count=len(ids))
        vals = np.fromiter(ids.values(), dtype=np.float32, count=len(ids))
        vals[vals <= -MAX_BIAS] = -np.inf  # -100 bans
        self.values = vals

    def __bool__(self) -> bool:
        return bool(self.ids.size)

    def __len__(self) -> int:
        return int(self.ids.size)

    def banning(self, tokens: Sequence[int]) -> LogitBias:
        """This bias with `tokens` banned too (-inf, whatever bias they had here)."""
        banned = LogitBias({}, self.n_vocab)
        ids = np.asarray(tokens, dtype=np.int64)
        keep = ~np.isin(self.ids, ids)  # (one entry per token: a repeated index of += adds once)
        banned.ids = np.concatenate([self.ids[keep], ids])
        banned.values = np.concatenate([self.values[keep], np.full(ids.size, -np.inf, dtype=np.float32)])
        return banned

    def apply(self, logits: np.ndarray) -> None:
        """Add the biases to `logits` (float32, shape (n_vocab,)) in place."""
        if not isinstance(logits, np.ndarray) or logits.dtype != np.float32 or logits.shape != (self.n_vocab,):
            raise InvalidArgumentError(f"logits must be a float32 numpy array of shape ({self.n_vocab},)")
        if self.ids.size:
            logits[self.ids] += self.values


def _token_id(key: object, n_vocab: int, name: str) -> int:
    if isinstance(key, str):
        text = key.strip()
        if not (text.isascii() and text.isdigit()):
            raise InvalidArgumentError(f"{name} keys must be token ids, got {key!r}", param=name)
        token = int(text) if len(text) <= 12 else n_vocab
    elif isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        token = int(key)
    else:
        raise InvalidArgumentError(f"{name} keys must be token ids, got {type(key).__name__} {key!r}", param=name)
    if not 0 <= token < n_vocab:
        raise InvalidArgumentError(f"{name}: token id {key!r} is not in this model's vocabulary [0, {n_vocab})",
                                   param=name)
    return token


def apply_logit_bias(logits: np.ndarray, bias: LogitBias | Mapping[object, object]) -> None:
    """Add `bias` (a LogitBias, or a mapping checked now) to `logits` in place."""
    if not isinstance(logits, np.ndarray) or logits.ndim != 1:
        raise InvalidArgumentError("logits must be a 1-D float32 numpy array")
    if not isinstance(bias, LogitBias):
        bias = LogitBias(bias, logits.shape[0])
    bias.apply(logits)
