"""llama-server's post_sampling_probs: each step's probabilities over the candidates the sampler chain kept, in its
order (top_k, top_p, min_p, then the temperature's softmax: native.SamplerChain), from the logits row the chain
read (a constraint's mask and the logit_bias applied). A greedy step keeps one candidate, its probability 1."""
from __future__ import annotations

import numpy as np

from ...native.sampler import SamplerSettings


def kept_probabilities(logits: np.ndarray, sampling: SamplerSettings) -> tuple[np.ndarray, np.ndarray]:
    """(token ids, their probabilities) of the candidates the chain keeps, most likely first."""
    ids = np.flatnonzero(np.isfinite(logits))
    values = logits[ids].astype(np.float64)
    order = np.argsort(-values, kind="stable")
    ids, values = ids[order], values[order]
    if sampling.greedy:
        return ids[:1], np.ones(1)
    if sampling.top_k > 0:
        ids, values = ids[:sampling.top_k], values[:sampling.top_k]
    p = np.exp(values - values[0])
    p /= p.sum()
    # top_p: the fewest most likely whose probabilities reach top_p (at least one)
    n = min(int(np.searchsorted(np.cumsum(p), sampling.top_p)) + 1, len(ids)) if sampling.top_p < 1.0 else len(ids)
    ids, values = ids[:n], values[:n]
    # min_p: those at least min_p times as likely as the most likely (at least one)
    if sampling.min_p > 0.0:
        n = max(int(np.count_nonzero(values >= values[0] + np.log(sampling.min_p))), 1)
        ids, values = ids[:n], values[:n]
    scaled = (values - values[0]) / sampling.temperature
    p = np.exp(scaled)
    return ids, p / p.sum()
