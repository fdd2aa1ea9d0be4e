"""Prefix reuse of a sequence's KV cells: Model (sequence 0) and each BatchEngine slot keep what a new prompt
shares with the tokens they cached and decode only the rest."""
from __future__ import annotations

from collections.abc import Sequence

from ...native import ContextHandle


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def keep_cached_prefix(context: ContextHandle, seq: int, cached: list[int], tokens: Sequence[int]) -> int:
    """Keep what sequence `seq` caches (its tokens are `cached`) as far as `tokens` starts with it, less the last
    of `tokens` (always decoded: its logits start the generation); drop the rest from the KV cache and from
    `cached`. Returns how many tokens stay cached."""
    keep = min(common_prefix(cached, tokens), len(tokens) - 1)
    if not context.trim_sequence(seq, keep):  # a memory that cannot cut a sequence: drop it all
        context.clear_sequence(seq)
        keep = 0
    del cached[keep:]
    return keep
