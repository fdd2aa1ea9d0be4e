"""llama-server's `timings` object of a generation answer (prompt_n, prompt_ms, predicted_n, predicted_ms and
their per-token and per-second rates), measured by the server from when the request is queued.

prompt_ms runs from the request's queueing to its first token (so it includes any wait for a free slot), and
predicted_ms from there to its last: the time of the predicted_n - 1 tokens after the first, over which the
predicted rates are (0 for one token). prompt_n counts the prompt tokens decoded and cache_n those whose cells
came from a cache (a slot's, or the RAM prompt cache: Usage.cached_tokens), as llama-server: their sum is the
prompt's length. With speculative decoding, draft_n and draft_n_accepted count the request's drafted tokens.
"""
from __future__ import annotations

import time
from typing import Any


def _rates(n: int, ms: float, name: str, steps: int) -> dict[str, Any]:
    """n tokens in ms milliseconds, the rates over `steps` (the tokens the time was spent on)."""
    return {f"{name}_n": n, f"{name}_ms": ms, f"{name}_per_token_ms": ms / steps if steps > 0 else 0.0,
            f"{name}_per_second": 1e3 * steps / ms if ms > 0 and steps > 0 else 0.0}


class RequestTimer:
    """The times of one request's first token and last chunk, over all its choices."""

    def __init__(self) -> None:
        self.queued = time.perf_counter()
        self.first: float | None = None
        self.last: float | None = None

    def saw(self, has_token: bool) -> None:
        now = time.perf_counter()
        if self.first is None and has_token:
            self.first = now
        self.last = now

    def prompt_so_far(self, prompt_n: int, cache_n: int) -> dict[str, Any]:
        """The timings of a prompt-progress report: prompt_n tokens decoded by now (none: all zero, the report
        from before the prompt's first batch), nothing predicted yet."""
        ms = (time.perf_counter() - self.queued) * 1e3 if prompt_n else 0.0
        return {"cache_n": cache_n, **_rates(prompt_n, ms, "prompt", prompt_n), **_rates(0, 0.0, "predicted", 0)}

    def timings(self, prompt_n: int, predicted_n: int, cache_n: int = 0, drafts: tuple[int, int] = (0, 0)
                ) -> dict[str, Any]:
        """drafts: speculative decoding's (tokens drafted, of those kept), llama-server's draft_n and
        draft_n_accepted, which it adds only when something was drafted."""
        first = self.first if self.first is not None else self.last or self.queued
        last = self.last or first
        # (the first token comes with the prompt's last batch: predicted_ms times the other predicted_n - 1, and
        # its rates are theirs, as llama-server's)
        drafted = {"draft_n": drafts[0], "draft_n_accepted": drafts[1]} if drafts[0] else {}
        return {"cache_n": cache_n, **_rates(prompt_n, (first - self.queued) * 1e3, "prompt", prompt_n),
                **_rates(predicted_n, (last - first) * 1e3, "predicted", predicted_n - 1), **drafted}
