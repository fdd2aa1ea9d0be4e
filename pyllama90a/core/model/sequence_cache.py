"""Sequence 0's KV cache on a Model's context: the tokens whose K and V its cells hold, and every change to them
(a generation's decodes and context shifts, reuse of a cached prefix, eval, truncate, start over, a state file).
Model owns one per context and calls it under its rule of one user at a time: this module knows nothing of
threads."""
from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import numpy as np

from ...errors import ContextOverflowError, InvalidArgumentError, LlamaError
from ...native import Batch, ContextHandle
from ..generation.context_shift import shift
from ..generation.outputs import Completion, Piece, Timings, Usage
from ..generation.prefix_cache import keep_cached_prefix
from ..generation.sequence import GenerationSequence, Step, TokenLogprob
from .state_file import StateIdentity, StateLimits, restore_state, write_state_file


class SequenceCache:
    """The tokens in sequence 0's cells of `context`, in order, kept true by every call here."""

    def __init__(self, context: ContextHandle) -> None:
        self.context = context
        self.tokens: list[int] = []
        # the context's logits are not those of the last cached token (truncate, load): last_logits decodes that
        # token again
        self._logits_stale = False
        self._batch: Batch | None = None  # for drafts (made at the first): a token, its draft, all their logits

    def _decode(self, tokens: list[int]) -> None:
        """Decode `tokens` (at most n_batch) after the cached ones; their last one's logits are ready afterwards."""
        self.context.decode_tokens(tokens)
        self.tokens.extend(tokens)
        self._logits_stale = False

    def _hold_exactly(self, tokens: list[int]) -> int:
        """Bring the cache to hold exactly `tokens` (a prompt, with room for one more), reusing the longest cached
        prefix; how many tokens were decoded. The logits of the last one are ready afterwards."""
        context, n_ctx = self.context, self.context.n_ctx_seq
        if len(tokens) >= n_ctx:
            raise ContextOverflowError(
                f"the prompt has {len(tokens)} tokens but the context holds n_ctx={n_ctx} "
                f"(and one more is needed to generate)")
        common = keep_cached_prefix(context, 0, self.tokens, tokens)
        for start in range(common, len(tokens), context.n_batch):
            self._decode(tokens[start:start + context.n_batch])
        return len(tokens) - common

    def generate(self, prompt: list[int], sequence: GenerationSequence) -> Iterator[Piece]:
        """The pieces of `sequence` continuing `prompt` (its cached prefix reused); the last one carries the
        Completion. Model.generate and chat's loop, one token a step (several when a draft is kept)."""
        t0 = time.perf_counter()
        n_evaluated = self._hold_exactly(prompt)
        t1 = time.perf_counter()
        pending: list[int] = []  # tokens of text not shown yet, sent with the piece that shows it
        logprobs: list[TokenLogprob] = []  # with logprobs=N, every generated token's (else it stays empty)
        n_sent = 0  # of them, those the pieces so far carried
        steps = [sequence.step(self.context, -1, len(self.tokens))]
        while True:
            for step in steps:
                if step.token is not None:
                    pending.append(step.token)
                if step.logprob is not None:
                    logprobs.append(step.logprob)
                if step.finish is not None:
                    break
                if step.text:
                    yield Piece(step.text, pending, logprobs=tuple(logprobs[n_sent:]) if logprobs else ())
                    pending, n_sent = [], len(logprobs)
            if step.finish is not None:
                break
            assert step.token is not None  # (a step that goes on made a token)
            steps = self._next_steps(step.token, sequence)
        t2 = time.perf_counter()
        generated = sequence.generated
        completion = Completion(
            text=sequence.text.text, tokens=generated, finish_reason=step.finish,
            usage=Usage(len(prompt), len(generated), cached_tokens=len(prompt) - n_evaluated,
                        draft_tokens=sequence.drafted, draft_accepted=sequence.accepted),
            timings=Timings((t1 - t0) * 1e3, (t2 - t1) * 1e3, n_evaluated, len(generated)),
            logprobs=tuple(logprobs) if sequence.request.logprobs is not None else None)
        yield Piece(step.text, pending, step.finish, completion, logprobs=tuple(logprobs[n_sent:]))

    def _next_steps(self, token: int, sequence: GenerationSequence) -> list[Step]:
        """Decode `token` (and a draft after it, if the sequence guesses one) and run the steps that follow."""
        context = self.context
        if len(self.tokens) + 1 >= context.n_ctx_seq:  # (only with context shift: else the step ended there)
            shift(context, 0, self.tokens, sequence.shift_keep)
        draft = sequence.draft(len(self.tokens) + 1)[:context.n_batch - 1]
        if not draft:
            self._decode([token])
            return [sequence.step(context, -1, len(self.tokens))]
        if self._batch is None:
            self._batch = Batch(context.n_batch)
        self._batch.clear()
        self._batch.add([token, *draft], len(self.tokens), 0, logits="all")
        context.decode(self._batch)
        self.tokens.append(token)
        self._logits_stale = False
        steps = sequence.verify(context, 0, len(self.tokens), draft)
        self.tokens.extend(draft[:len(steps) - 1])  # the drafted tokens kept: the rest's cells are dropped
        if not context.trim_sequence(0, len(self.tokens)):  # pragma: no cover - never for a KV cache
            raise LlamaError("llama.cpp could not drop the cells of a rejected draft")
        return steps

    def _fitting_tokens(self, tokens: Sequence[int], after: int) -> list[int]:
        """`tokens` as a list, checked to be valid ids that fit the context after `after` cached ones."""
        tokens = self.context.model.check_token_ids(tokens)
        if not tokens:
            raise InvalidArgumentError("tokens is empty")
        n_ctx = self.context.n_ctx_seq
        if after + len(tokens) > n_ctx:
            raise ContextOverflowError(f"{after} cached + {len(tokens)} new tokens do not fit n_ctx={n_ctx}")
        return tokens

    def eval(self, tokens: Sequence[int]) -> None:
        """Model.eval: decode `tokens` after the cached ones."""
        tokens = self._fitting_tokens(tokens, len(self.tokens))
        for start in range(0, len(tokens), self.context.n_batch):
            self._decode(tokens[start:start + self.context.n_batch])
        self.context.synchronize()

    def last_logits(self) -> np.ndarray:
        """Model.last_logits: a copy of the logits after the last cached token."""
        if not self.tokens:
            raise LlamaError("nothing was evaluated yet")
        if self._logits_stale:  # (after truncate or load the context holds another token's logits)
            last = self.tokens.pop()
            if not self.context.trim_sequence(0, len(self.tokens)):  # pragma: no cover - never for a KV cache
                raise LlamaError("llama.cpp could not truncate the cache")
            self._decode([last])
        return np.copy(self.context.logits_row(-1))

    def truncate(self, n_tokens: int) -> None:
        """Model.truncate: keep only the first `n_tokens` cached tokens."""
        if n_tokens >= len(self.tokens):
            return
        if not self.context.trim_sequence(0, n_tokens):  # pragma: no cover - never for a KV cache
            raise LlamaError("llama.cpp could not truncate the cache")
        del self.tokens[n_tokens:]
        self._logits_stale = True

    def logits(self, tokens: Sequence[int]) -> np.ndarray:
        """Model.logits: evaluate `tokens` from an empty cache; the logits after every one."""
        context = self.context
        tokens = self._fitting_tokens(tokens, 0)
        context.clear()
        self.tokens.clear()
        out = np.empty((len(tokens), context.model.n_vocab), dtype=np.float32)
        with Batch(context.n_batch) as batch:
            for start in range(0, len(tokens), context.n_batch):
                chunk = tokens[start:start + context.n_batch]
                batch.clear()
                batch.add(chunk, start, 0, logits="all")
                context.decode(batch)
                self.tokens.extend(chunk)
                for i in range(len(chunk)):
                    out[start + i] = context.logits_row(i)
        self._logits_stale = False
        return out

    def forget(self) -> None:
        """Hold no tokens: another use of the context (embeddings) empties its cells."""
        self.tokens.clear()

    def save(self, path: bytes, identity: StateIdentity, key: bytes | None) -> None:
        """Model.save_state: the context's state and the cached tokens to a state file."""
        write_state_file(path, identity, self.tokens, self.context.state_bytes(), key)

    def load(self, path: bytes, identity: StateIdentity, limits: StateLimits, key: bytes | None) -> None:
        """Model.load_state: the cells and tokens of a state file (restore_state, which keeps the tokens true
        whatever happens)."""
        self._logits_stale = True  # (a state holds the cells, not the logits; also when it is refused)
        restore_state(self.context, path, identity, limits, self.tokens, key)
