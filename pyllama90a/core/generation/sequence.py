"""`GenerationSequence`: one generation, one token per step. The step (rules, sample, accept, end of generation, text,
stop strings, length) is the same whether Model.generate runs one sequence alone or BatchEngine runs many
in one batch; each caller only decodes the token a step returns. With speculation (speculative.py) the caller
decodes a draft after that token and `verify` runs the steps over the draft's logits rows."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ...native import ContextHandle, ModelHandle, SamplerChain
from ..constrained import OutputRules
from .output_checks import refuse_total_ban, require_choice, require_finite
from .post_sampling import kept_probabilities
from .request import GenerationRequest
from .speculative import Drafter
from .text_stream import TextStream
from .thinking import ThinkingTracker


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token's log-probability (natural log) under the distribution it was sampled from, with the
    `top` most likely tokens of that step when logprobs=N asked for N > 0."""
    token: int
    piece: bytes
    logprob: float
    top: tuple[tuple[int, bytes, float], ...]  # the most likely tokens at this step: (id, bytes, logprob)


@dataclass(frozen=True)
class Step:
    """What one step made. token: the generated token, None when the model ended the generation (its
    end-of-generation token is not output). text: the text now safe to show (at the end, with what was held
    back). finish: "stop", "length" or None while it goes on."""

    token: int | None
    text: str
    finish: Literal["stop", "length"] | None = None
    logprob: TokenLogprob | None = None


class GenerationSequence:
    """One request's generation on a sequence of a context. Built in the caller's thread (the sampler chain and
    the constraint's grammar are made here, so a bad one fails the request, not a decode step)."""

    def __init__(self, request: GenerationRequest, vocab: ModelHandle, n_ctx_seq: int,
                 drafter: Drafter | None = None, shift_keep: int | None = None) -> None:
        self.request = request
        self.vocab = vocab
        self.n_ctx_seq = n_ctx_seq  # cells of the sequence: the generation ends one short of them
        # with context shift: the tokens a shift keeps (context_shift.py), and the caller shifts where the
        # generation would end for lack of cells; None: it ends there ("length")
        self.shift_keep = shift_keep
        self.rules = OutputRules.for_request(vocab, request.constraint, request.logit_bias, request.ignore_eos)
        refuse_total_ban(self.rules, vocab.n_vocab)
        self.sampler = SamplerChain(request.sampling, vocab.n_vocab)
        self.text = TextStream(request.stops)
        self.generated: list[int] = []
        self.thinking = ThinkingTracker(request.thinking, vocab) if request.thinking is not None else None
        self.drafter = drafter  # None: no speculation
        self.drafted = 0  # draft tokens decoded for verification
        self.accepted = 0  # of those, the ones sampled as drafted

    def draft(self, n_cached: int) -> list[int]:
        """The tokens to decode after the last sampled one (which makes `n_cached` tokens cached), guessed to be
        what the next steps sample; none without speculation. Never past the tokens the request may still
        generate, nor past the cells plain decoding would use."""
        if self.drafter is None:
            return []
        room = min(self.request.max_tokens - len(self.generated), self.n_ctx_seq - n_cached) - 1
        return self.drafter.draft(room) if room > 0 else []

    def verify(self, context: ContextHandle, index: int, n_cached: int, draft: Sequence[int]) -> list[Step]:
        """The steps over the logits rows from batch `index` on: the last sampled token's, then each of `draft`'s
        (decoded after it, with `n_cached` tokens cached up to that token). A drafted token is kept while each
        step samples it; the steps end at the first that samples another (or ends the generation). So every
        step but the last made its drafted token, and the cells of the drafted tokens after those are stale.
        Without a draft: one step."""
        steps = [self.step(context, index, n_cached)]
        for i, token in enumerate(draft):
            if steps[-1].token != token or steps[-1].finish is not None:
                break
            steps.append(self.step(context, index + i + 1, n_cached + i + 1))
        accepted = sum(s.token == t for s, t in zip(steps, draft, strict=False))
        self.drafted += len(draft)
        self.accepted += accepted
        if draft and self.drafter is not None:
            self.drafter.feedback(len(draft), accepted)
        return steps

    def step(self, context: ContextHandle, index: int, n_cached: int) -> Step:
        """Sample the next token from the logits at batch `index`, the sequence holding `n_cached` tokens.
        Raises NonFiniteOutputError (broken weights, seen at the first step) or ConstraintError."""
        request, rules, thinking = self.request, self.rules, self.thinking
        forced = thinking.forced() if thinking is not None else None
        constrained = rules is not None and (thinking is None or not thinking.defers_constraint)
        row = None
        if rules is not None or forced is not None or request.logprobs is not None or not self.generated:
            row = context.logits_row(index)  # llama.cpp's own row, which the chain reads next
            if not self.generated:  # broken weights give NaN logits, not text
                require_finite(row, "the logits of the prompt's last token")
            if forced is not None:  # the thinking block's end: the chain can pick nothing else
                row.fill(-np.inf)
                row[forced] = 0.0
            elif rules is not None:  # bias and mask the row in place (in a thinking block: the bias only)
                rules.apply(row, constrain=constrained)
                require_choice(row)
        token = self.sampler.sample(context, index)
        if thinking is not None:
            if forced is None and rules is not None and rules.matcher is not None:  # (a constraint waits)
                token = thinking.replacement(token, self.vocab.token_piece(token), self.vocab.is_eog(token))
            thinking.accept(self.vocab.token_piece(token), forced is not None)
        if constrained:
            assert rules is not None
            rules.accept(token)
        if not request.ignore_eos and self.vocab.is_eog(token):
            return Step(None, self.text.flush(), "stop")
        self.generated.append(token)
        if self.drafter is not None:
            self.drafter.add(token)
        piece = self.vocab.token_piece(token)
        text = self.text.add(piece)
        logprob = self._logprob(row, token, piece) if row is not None and request.logprobs is not None else None
        if self.text.stopped:
            return Step(token, self.text.flush(), "stop", logprob)
        if len(self.generated) >= request.max_tokens or (n_cached + 1 >= self.n_ctx_seq and self.shift_keep is None):
            # a character cut off here is dropped, not shown as U+FFFD (its tokens stay generated)
            return Step(token, text + self.text.flush(), "length", logprob)
        return Step(token, text, None, logprob)

    def _logprob(self, logits: np.ndarray, token: int, piece: bytes) -> TokenLogprob:
        n_top = self.request.logprobs or 0
        if self.request.post_sampling_probs:  # (the log of each kept candidate's probability; 0: -inf)
            ids, p = kept_probabilities(logits, self.request.sampling)
            chosen = p[ids == token]
            return TokenLogprob(token, piece, math.log(chosen[0]) if len(chosen) else -math.inf,
                                tuple((int(t), self.vocab.token_piece(int(t)), math.log(q))
                                      for t, q in zip(ids[:n_top], p[:n_top], strict=True)))
        top_logit = float(logits.max())
        log_z = top_logit + math.log(float(np.exp(logits - top_logit).sum()))  # log of the softmax's denominator
        top = np.argpartition(-logits, n_top)[:n_top] if n_top else np.empty(0, dtype=np.int64)
        # tokens a constraint or a -inf logit_bias forbids are no alternatives (and -inf is not JSON)
        top = top[np.isfinite(logits[top])]
        top = top[np.argsort(-logits[top])]
        return TokenLogprob(token, piece, float(logits[token]) - log_z,
                            tuple((int(t), self.vocab.token_piece(int(t)), float(logits[t]) - log_z) for t in top))
