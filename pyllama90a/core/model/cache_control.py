"""Model's calls for manual control of sequence 0's KV cache (benchmarks, tests, step-by-step use): eval,
logits, last_logits, truncate, n_cached. A mixin of Model: it runs on Model's lock, context and cached tokens."""
from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

import numpy as np

from ...errors import INT32_MAX, ContextOverflowError, InvalidArgumentError, LlamaError, int_in_range
from ...native import Batch, ContextHandle, ModelHandle


class CacheControl:
    """Model's manual evaluation calls (see Model's docstring for which are refused while it is busy)."""

    if TYPE_CHECKING:  # what they use of Model
        _kv_tokens: list[int]
        _logits_stale: bool

        @property
        def handle(self) -> ModelHandle: ...
        @property
        def n_ctx_seq(self) -> int: ...
        def _using_context(self, action: str) -> AbstractContextManager[ContextHandle]: ...
        def _using_model(self) -> AbstractContextManager[ModelHandle]: ...
        def _decode(self, context: ContextHandle, tokens: list[int]) -> None: ...

    def _fitting_tokens(self, tokens: Sequence[int], after: int) -> list[int]:
        """`tokens` as a list, checked to be valid ids that fit the context after `after` cached ones."""
        tokens = self.handle.check_token_ids(tokens)
        if not tokens:
            raise InvalidArgumentError("tokens is empty")
        n_ctx = self.n_ctx_seq
        if after + len(tokens) > n_ctx:
            raise ContextOverflowError(f"{after} cached + {len(tokens)} new tokens do not fit n_ctx={n_ctx}")
        return tokens

    @property
    def n_cached(self) -> int:
        """How many tokens the KV cache holds (sequence 0)."""
        with self._using_model():
            return len(self._kv_tokens)

    def eval(self, tokens: Sequence[int]) -> None:
        """Decode `tokens` after the cached ones (positions continue); for manual cache control and benchmarks."""
        with self._using_context("eval") as context:
            tokens = self._fitting_tokens(tokens, len(self._kv_tokens))
            for start in range(0, len(tokens), context.n_batch):
                self._decode(context, tokens[start:start + context.n_batch])
            context.synchronize()

    def last_logits(self) -> np.ndarray:
        """A copy of the logits after the last cached token, shape (n_vocab,)."""
        with self._using_context("read the logits") as context:
            if not self._kv_tokens:
                raise LlamaError("nothing was evaluated yet")
            if self._logits_stale:  # (after truncate or load_state the context holds another token's logits)
                last = self._kv_tokens.pop()
                if not context.trim_sequence(0, len(self._kv_tokens)):  # pragma: no cover - never for a KV cache
                    raise LlamaError("llama.cpp could not truncate the cache")
                self._decode(context, [last])
            return np.copy(context.logits_row(-1))

    def truncate(self, n_tokens: int) -> None:
        """Keep only the first `n_tokens` cached tokens."""
        int_in_range("n_tokens", n_tokens, 0, INT32_MAX)  # a position (int32)
        with self._using_context("truncate the cache") as context:
            if n_tokens >= len(self._kv_tokens):
                return
            if not context.trim_sequence(0, n_tokens):  # pragma: no cover - never for a KV cache
                raise LlamaError("llama.cpp could not truncate the cache")
            del self._kv_tokens[n_tokens:]
            self._logits_stale = True

    def logits(self, tokens: Sequence[int]) -> np.ndarray:
        """Evaluate `tokens` from an empty cache; logits after every token, shape (len(tokens), n_vocab)."""
        with self._using_context("compute logits") as context:
            tokens = self._fitting_tokens(tokens, 0)
            context.clear()
            self._kv_tokens = []
            out = np.empty((len(tokens), context.model.n_vocab), dtype=np.float32)
            with Batch(context.n_batch) as batch:
                for start in range(0, len(tokens), context.n_batch):
                    chunk = tokens[start:start + context.n_batch]
                    batch.clear()
                    batch.add(chunk, start, 0, logits="all")
                    context.decode(batch)
                    self._kv_tokens.extend(chunk)
                    for i in range(len(chunk)):
                        out[start + i] = context.logits_row(i)
            self._logits_stale = False
        return out
