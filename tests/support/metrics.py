"""Comparisons of next-token distributions used by the model-level tests."""
from __future__ import annotations

import numpy as np


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def mean_kl(p_logits: np.ndarray, q_logits: np.ndarray) -> float:
    """Mean over positions of KL(p || q) of the next-token distributions."""
    lp, lq = log_softmax(p_logits), log_softmax(q_logits)
    return float((np.exp(lp) * (lp - lq)).sum(axis=-1).mean())


def top1_agreement(a: np.ndarray, b: np.ndarray) -> float:
    return float((a.argmax(axis=-1) == b.argmax(axis=-1)).mean())


def perplexity(tokens: list[int], logits: np.ndarray) -> float:
    lp = log_softmax(logits[:-1])
    nll = -lp[np.arange(len(tokens) - 1), tokens[1:]]
    return float(np.exp(nll.mean()))
