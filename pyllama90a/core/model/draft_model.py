"""Speculative decoding with a draft model (llama-server's --model-draft, spec type draft-simple): a smaller model
with the target's vocabulary runs greedily in a context of its own and guesses the tokens that follow; the target
verifies the guess in one batch (GenerationSequence.verify), so the output is the target's own.

    Model(path, speculative=Speculation(draft="small.gguf"))   # or draft=<a loaded Model>: its weights, a new context

DraftModel owns the draft's context: the target context's n_ctx and sequences (a Model drafts on sequence 0, a
BatchEngine's slot on its own sequence) and the tokens each sequence's cells hold. A DraftModelDrafter is one
generation's drafter, with NgramDrafter's interface (add, feedback, draft). Each draft first brings its
sequence's cells to the generation's history, reusing the longest cached prefix: the cells of drafted tokens the
target rejected are dropped, the kept ones stay, and only the tokens since (the target's own token after a
rejection, or after a draft kept whole) are decoded. Then it decodes one token at a time, each the draft's
argmax, up to the draft length. BatchEngine's slots draft one after another on the engine thread, each on its
sequence (llama-server drafts all slots in one batch per position: simpler here, and correct first).

A draft that fails to decode drafts nothing (the generation goes on one token per step) rather than failing the
request; a history longer than the draft's cells (a shifted context) drafts nothing either.
"""
from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ...errors import DecodeError, DraftModelError
from ...native import Batch, ContextHandle, ContextParams, ModelHandle
from ..generation.prefix_cache import keep_cached_prefix
from ..generation.speculative import Drafter, DraftLength, Speculation

log = logging.getLogger(__name__)

VOCAB_MAX_SIZE_DIFFERENCE = 128  # llama.cpp's SPEC_VOCAB_MAX_SIZE_DIFFERENCE
VOCAB_CHECK_START_TOKEN_ID = 5  # llama.cpp's SPEC_VOCAB_CHECK_START_TOKEN_ID: the first ids (control tokens) may differ


def check_vocabularies(target: ModelHandle, draft: ModelHandle, name: str) -> None:
    """llama.cpp's rules for a draft (common/speculative.cpp): the same vocabulary type, the same BOS and EOS
    (whether added, and which), sizes within 128 tokens, the same tokens from id 5 on (compared as their pieces,
    control tokens rendered). DraftModelError naming the first difference."""
    kinds = target.metadata("tokenizer.ggml.model"), draft.metadata("tokenizer.ggml.model")
    if kinds[0] != kinds[1]:
        raise DraftModelError(f"{name}: its vocabulary type is {kinds[1]!r}, the target's {kinds[0]!r}")
    special = {"BOS": ((target.add_bos, target.bos), (draft.add_bos, draft.bos)),
               "EOS": ((target.add_eos, target.eos), (draft.add_eos, draft.eos))}
    for what, ((added, token), (draft_added, draft_token)) in special.items():
        if added != draft_added or (added and token != draft_token):
            raise DraftModelError(f"{name}: its {what} differs from the target's (added: {draft_added}, token "
                                  f"{draft_token}; the target's: {added}, token {token})")
    if abs(target.n_vocab - draft.n_vocab) > VOCAB_MAX_SIZE_DIFFERENCE:
        raise DraftModelError(f"{name}: its vocabulary has {draft.n_vocab} tokens, the target's {target.n_vocab} "
                              f"(at most {VOCAB_MAX_SIZE_DIFFERENCE} apart)")
    for token_id in range(VOCAB_CHECK_START_TOKEN_ID, min(target.n_vocab, draft.n_vocab)):
        ours, theirs = target.token_piece(token_id, special=True), draft.token_piece(token_id, special=True)
        if ours != theirs:
            raise DraftModelError(f"{name}: its token {token_id} is {theirs!r}, the target's {ours!r}")


class LoadedModel(Protocol):
    """What a draft is, here: a Model (model.py, which hands its class in: it imports this module)."""

    path: Path

    def __init__(self, path: str | os.PathLike[str], *, n_gpu_layers: int, **settings: Any) -> None: ...

    @property
    def handle(self) -> ModelHandle: ...

    def with_context(self, **settings: Any) -> LoadedModel: ...

    def hold_context(self, holder: str) -> contextlib.AbstractContextManager[ContextHandle]: ...

    def close(self) -> None: ...


def _open(speculation: Speculation, target: ContextParams, model_class: type[LoadedModel]) -> LoadedModel:
    """The draft as a Model with a context sized as the target's (`target`: its params), with its flash_attn: loaded
    from its path, or a new context on the weights of the Model given."""

    # (the target's other settings, as llama-server's draft takes them)
    sizes: dict[str, Any] = {"n_ctx": target.n_ctx, "n_seq_max": target.n_seq_max, "flash_attn": target.flash_attn,
                             "ctk": speculation.draft_ctk, "ctv": speculation.draft_ctv,
                             "n_threads": speculation.draft_threads or target.n_threads}
    draft = speculation.draft
    if isinstance(draft, model_class):
        return draft.with_context(**sizes)
    if speculation.draft_path is None:
        raise DraftModelError(f"draft must be a GGUF path or a Model, got {type(draft).__name__}")
    return model_class(speculation.draft_path, n_gpu_layers=speculation.draft_n_gpu_layers, **sizes)


class DraftModel:
    """The draft model's context beside a target context, and the tokens each of its sequences holds."""

    def __init__(self, speculation: Speculation, target: ModelHandle, params: ContextParams,
                 model_class: type[LoadedModel]) -> None:
        self.speculation = speculation
        self.model = _open(speculation, params, model_class)
        self._hold = contextlib.ExitStack()
        try:
            check_vocabularies(target, self.model.handle, f"the draft model {self.model.path}")
            # (the target's holder alone drafts on it: every other use of the draft's context is refused)
            self.context = self._hold.enter_context(self.model.hold_context("a target Model's drafts"))
        except BaseException:
            self.model.close()
            raise
        self._cached: list[list[int]] = [[] for _ in range(self.context.n_seq_max)]  # per sequence: its cells
        self._batch = Batch(self.context.n_batch)

    def drafter(self, prompt: Sequence[int], seq: int) -> DraftModelDrafter:
        """The drafter of one generation after `prompt` on sequence `seq` of the target's context."""
        return DraftModelDrafter(self, prompt, seq)

    def draft(self, seq: int, history: list[int], limit: int) -> list[int]:
        """Up to `limit` tokens the draft model guesses after `history` (greedy), on sequence `seq`."""
        context, cached = self.context, self._cached[seq]
        if len(history) + limit > context.n_ctx_seq:
            return []
        try:
            keep = keep_cached_prefix(context, seq, cached, history)  # (rejected drafted tokens go here)
            for start in range(keep, len(history), context.n_batch):
                self._decode(seq, history[start:start + context.n_batch])
            guess: list[int] = []
            while True:
                guess.append(int(np.argmax(context.logits_row(-1))))
                if len(guess) >= limit or context.model.is_eog(guess[-1]):
                    return guess
                self._decode(seq, guess[-1:])
        except DecodeError:  # the generation goes on without this draft; the sequence starts over next time
            log.warning("the draft model's decode failed: no draft this step", exc_info=True)
            context.clear_sequence(seq)
            cached.clear()
            return []

    def _decode(self, seq: int, tokens: list[int]) -> None:
        """Decode `tokens` after sequence `seq`'s cached ones; the last one's logits are ready afterwards."""
        cached, batch = self._cached[seq], self._batch
        batch.clear()
        batch.add(tokens, len(cached), seq, logits="last")
        self.context.decode(batch)
        cached.extend(tokens)

    def close(self) -> None:
        """Free the draft's context, and its weights unless the caller's Model (draft=<a Model>) still has them."""
        self._batch.close()
        self._hold.close()
        self.model.close()


class DraftModelDrafter(DraftLength):
    """One generation's history (prompt, then each generated token) and the draft model that guesses what
    follows it on the generation's sequence."""

    def __init__(self, owner: DraftModel, prompt: Sequence[int], seq: int) -> None:
        super().__init__(owner.speculation)
        self.owner, self.seq = owner, seq
        self.history = list(prompt)

    def add(self, token: int) -> None:
        self.history.append(token)

    def draft(self, limit: int) -> list[int]:
        guess = self.owner.draft(self.seq, self.history, min(limit, self.limit))
        return guess if len(guess) >= max(self.settings.draft_min, 1) else []


class Drafting:
    """A Model's speculation: each generation's drafter, by prompt lookup or from the draft model (opened with
    the Model, closed with it)."""

    def __init__(self, speculation: Speculation, target: ModelHandle, params: ContextParams,
                 model_class: type[LoadedModel]) -> None:
        """`target`: the target's weights, `params`: its context's (the draft's context is sized as it);
        `model_class`: Model, which opens the draft."""
        self.speculation = speculation
        drafts = speculation.spec_type == "draft-simple"
        self.draft_model = DraftModel(speculation, target, params, model_class) if drafts else None

    def drafter(self, prompt: Sequence[int], seq: int = 0) -> Drafter | None:
        """The drafter of one generation after `prompt` on sequence `seq` of the target's context (None: this
        speculation drafts nothing)."""
        if self.draft_model is not None:
            return self.draft_model.drafter(prompt, seq)
        return self.speculation.drafter(prompt)

    def close(self) -> None:
        if self.draft_model is not None:
            self.draft_model.close()
