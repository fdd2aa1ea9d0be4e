"""The engine's counts behind `BatchEngine.stats()` and the server's metrics (llama-server's names among them):
requests, prompt and completion tokens, drafts, decode calls, and tokens sampled per second lately."""
from __future__ import annotations

import collections
from collections.abc import Sequence

from .slots import EngineStats

RATE_WINDOW_S = 5.0  # tokens_per_s is over the decode steps of the last few seconds


class EngineCounts(collections.Counter[str]):
    """Counts by name (requests, failed, prompt_tokens, prompt_decoded, completion_tokens, draft_tokens,
    draft_accepted, drafts, decodes, decode_slots, tokens_max) and the recent steps' sampled tokens. The engine
    updates and reads them under its lock."""

    def __init__(self) -> None:
        super().__init__()
        self._recent: collections.deque[tuple[float, int]] = collections.deque()  # (time, tokens) per step

    def decoded(self, cells: Sequence[int]) -> None:
        """One decode call over slots holding `cells` tokens each afterwards."""
        self.update(decodes=1, decode_slots=len(cells))
        self["tokens_max"] = max([self["tokens_max"], *cells])

    def sampled(self, now: float, tokens: int) -> None:
        """`tokens` sampled from one decode call's logits, at `now`."""
        self._recent.append((now, tokens))
        self._forget(now)

    def _forget(self, now: float) -> None:
        while self._recent and now - self._recent[0][0] > RATE_WINDOW_S:
            self._recent.popleft()

    def stats(self, now: float, queue_depth: int, busy_slots: int, parallel: int) -> EngineStats:
        self._forget(now)
        span = now - self._recent[0][0] if self._recent else 0.0
        rate = sum(n for _, n in self._recent) / span if span > 0 else 0.0
        return EngineStats(self["requests"], self["failed"], self["prompt_tokens"], self["prompt_decoded"],
                           self["completion_tokens"], queue_depth, busy_slots, parallel, rate,
                           *(self[k] for k in ("draft_tokens", "draft_accepted", "drafts", "decodes",
                                               "decode_slots", "tokens_max")))
