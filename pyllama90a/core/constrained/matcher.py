"""Per-sequence constrained decoding: mask a llama.cpp logits row in place, accept the sampled token.

Per step, for one sequence (slot):

    matcher.apply(row)          # row: float32 view of llama_get_logits_ith(ctx, i); disallowed -> -inf
    token = <sample from the row>
    matcher.accept(token)       # advances the grammar; raises ConstraintError if the token was not allowed
    if matcher.is_done(): ...   # the grammar is complete: only an end-of-generation token is allowed

In an engine step, per slot: after llama_decode, on the row of llama_get_logits_ith(ctx, i) as a float32 numpy
view (no copy), logit_bias first (LogitBias.apply), then matcher.apply, then the llama.cpp sampler chain
(llama_sampler_sample(chain, ctx, i)). The chain reads that same row from the context (llama_get_logits_ith) into
its candidate array, so masking the row in place is all it takes: penalties, top-k/p, min-p, temperature and
dist leave -inf at -inf, and greedy never picks it. (Only llama.cpp's backend samplers, which pyllama90a does not
configure, would sample before the row is read.) Then accept(token) on the matcher; when is_done() the next
token is forced to end-of-generation.

The token mask for the next step depends only on the tokens accepted so far, so `compute_mask()` (or
`compute_masks()` for several sequences at once, in parallel) may run before the logits exist, e.g. on a worker
thread while llama_decode runs; llguidance releases the GIL while it computes. `apply` then only writes -inf.
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import ConstraintError, InvalidArgumentError
from .spec import Constraint
from .vocab import HasWeights, Vocab, llguidance, vocab_for

NEG_INF = np.float32(-np.inf)


class Matcher:
    """The state of one sequence under a Constraint. Not thread-safe: one sequence, one thread at a time
    (compute_masks may run on another thread while nothing else touches these matchers)."""

    def __init__(self, constraint: Constraint, model: HasWeights | Vocab) -> None:
        if not isinstance(constraint, Constraint):
            raise InvalidArgumentError(f"constraint must be a Constraint, got {type(constraint).__name__}")
        self.constraint = constraint
        self.vocab = model if isinstance(model, Vocab) else vocab_for(model)
        self._m = constraint.template(self.vocab)
        n = self.vocab.n_vocab
        self._n_words = (n + 31) // 32
        self._mask = np.zeros(self._n_words, dtype=np.int32)  # bit t of word t // 32: token t is allowed
        self._mask_fresh = False
        self._ended = False       # force_end() was called
        self._finished = False    # an end-of-generation token was accepted
        self.n_accepted = 0

    # -- the mask ----------------------------------------------------------------------------------------------

    def compute_mask(self) -> np.ndarray:
        """Compute the next step's bitmask (int32 words, one bit per token) into this matcher; returns it."""
        if not self._mask_fresh:
            if self._ended or self._finished or self._m.is_stopped():
                self._eog_only()
            else:
                self._m.unsafe_compute_mask_ptr(self._mask.ctypes.data, self._mask.nbytes)
                if self._m.is_error():
                    raise ConstraintError(f"the constraint failed: {self._m.get_error()}")
            self._mask_fresh = True
        return self._mask

    def _eog_only(self) -> None:
        self._mask.fill(0)
        words = self._mask.view(np.uint32)
        for t in self.vocab.eog:
            words[t >> 5] |= np.uint32(1 << (t & 31))

    def apply(self, logits: np.ndarray) -> None:
        """Set the logit of every token the constraint does not allow next to -inf, in place.

        `logits` is a writable float32 array of n_vocab values, e.g. native.ContextHandle.logits_row(i), a numpy
        view of llama.cpp's own row."""
        n = self.vocab.n_vocab
        if not isinstance(logits, np.ndarray) or logits.dtype != np.float32 or logits.shape != (n,):
            raise InvalidArgumentError(f"logits must be a float32 numpy array of shape ({n},), got "
                                       f"{getattr(logits, 'dtype', type(logits).__name__)} "
                                       f"{getattr(logits, 'shape', '')}")
        if not logits.flags.writeable or not logits.flags.c_contiguous:
            raise InvalidArgumentError("logits must be a writable, contiguous array (apply masks them in place)")
        apply_bitmask(logits, self.compute_mask())

    # -- the sampled token -------------------------------------------------------------------------------------

    def accept(self, token: int) -> None:
        """Advance past the sampled `token`. An end-of-generation token ends the sequence (allowed only where
        the grammar is complete, or after force_end)."""
        if isinstance(token, bool) or not isinstance(token, (int, np.integer)) \
                or not 0 <= int(token) < self.vocab.n_vocab:
            raise InvalidArgumentError(f"token must be an id in [0, {self.vocab.n_vocab}), got {token!r}")
        token = int(token)
        self._mask_fresh = False
        if self._finished:
            raise ConstraintError("the sequence already ended (an end-of-generation token was accepted)")
        if self._ended:
            if token not in self.vocab.eog:
                raise ConstraintError(f"token {token} after force_end(); only end-of-generation is allowed")
            self._finished = True
            return
        if not self._m.consume_token(token):
            raise ConstraintError(f"token {token} ({self.vocab.piece(token)!r}) is not allowed by the constraint: "
                                  f"{self._m.get_error() or 'rejected'}")
        self.n_accepted += 1
        if token in self.vocab.eog:
            self._finished = True

    def forced_tokens(self) -> list[int]:
        """Tokens the grammar forces next (the only possible continuation), which may be decoded without
        sampling; accept() each of them. Empty when the next token is a choice."""
        if self._ended or self._finished:
            return []
        return list(self._m.compute_ff_tokens())

    # -- state -------------------------------------------------------------------------------------------------

    def is_done(self) -> bool:
        """True when generation must stop: the grammar is complete (only an end-of-generation token is allowed),
        force_end() was called, or an end-of-generation token was accepted."""
        return self._ended or self._finished or self._m.is_stopped()

    def is_accepting(self) -> bool:
        """True when the output so far is a complete match (ending here satisfies the constraint)."""
        return self._finished or self._m.is_accepting()

    def force_end(self) -> None:
        """Allow nothing but end-of-generation from now on (e.g. at max_tokens or a stop string). The output
        may then not satisfy the constraint; is_accepting() tells."""
        self._ended = True
        self._mask_fresh = False

    @property
    def finished(self) -> bool:
        """An end-of-generation token was accepted."""
        return self._finished

    def reset(self) -> None:
        """Back to the start state (a new generation under the same constraint)."""
        self._m.reset()
        self._ended = self._finished = self._mask_fresh = False
        self.n_accepted = 0

    def allowed(self) -> np.ndarray:
        """The ids the constraint allows next (for tests and debugging; apply() is the fast path)."""
        bits = np.unpackbits(self.compute_mask().view(np.uint8), bitorder="little")[: self.vocab.n_vocab]
        return np.flatnonzero(bits)


_SHIFTS = np.arange(32, dtype=np.int32)
_NEG_INF_BITS = np.float32(-np.inf).view(np.int32)  # 0xFF800000
_scratch = threading.local()


def _scratch_rows(n_rows: int) -> np.ndarray:
    """A per-thread int32 work array of (n_rows, 32), reused across calls (allocated once per thread)."""
    buf = getattr(_scratch, "buf", None)
    if buf is None or buf.shape[0] < n_rows:
        buf = _scratch.buf = np.empty((n_rows, 32), dtype=np.int32)
    return buf[:n_rows]


def apply_bitmask(logits: np.ndarray, mask: np.ndarray) -> None:
    """logits[t] = -inf for every t whose bit in `mask` (int32 words, bit t & 31 of word t >> 5) is 0, in place.

    Branch-free on the float bits, 32 tokens per word: keep = -(bit), logits = (logits & keep) | (-inf & ~keep).
    Its time does not depend on the pattern of the mask (about 30 us for 49,152 tokens on one core, where a
    boolean-indexed store takes 25-140 us depending on how mixed the mask is). The only other array is a
    per-thread int32 work buffer reused across calls; `logits` must be C-contiguous (a llama.cpp row is)."""
    n = logits.shape[0]
    full = n >> 5
    if full:
        keep = _scratch_rows(full)
        bits = logits[: full * 32].view(np.int32).reshape(full, 32)
        np.right_shift(mask[:full, None], _SHIFTS, out=keep)
        np.bitwise_and(keep, 1, out=keep)
        np.negative(keep, out=keep)                 # -1: allowed, 0: banned
        np.bitwise_and(bits, keep, out=bits)         # banned -> +0.0
        np.invert(keep, out=keep)                    # 0: allowed, -1: banned
        np.bitwise_and(keep, _NEG_INF_BITS, out=keep)
        np.bitwise_or(bits, keep, out=bits)          # banned -> -inf
    tail = n - full * 32
    if tail:
        word = int(mask[full])
        for i in range(tail):
            if not (word >> i) & 1:
                logits[full * 32 + i] = NEG_INF


_executor: Any = None
_executor_lock = threading.Lock()


def compute_masks(matchers: Sequence[Matcher]) -> None:
    """Compute the next masks of several sequences at once, in parallel on llguidance's threads (the GIL is
    released); each matcher's apply() then only writes -inf."""
    todo = [m for m in matchers if not m._mask_fresh]
    if not todo:
        return
    plain = [m for m in todo if not (m._ended or m._finished or m._m.is_stopped())]
    for m in todo:
        if m not in plain:
            m.compute_mask()
    if len(plain) < 2:
        for m in plain:
            m.compute_mask()
        return
    n_words = plain[0]._n_words
    if any(m._n_words != n_words for m in plain):
        raise InvalidArgumentError("compute_masks takes matchers of one vocabulary")
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = llguidance().LLExecutor()
    batch = np.empty((len(plain), n_words), dtype=np.int32)
    _executor.unsafe_compute_mask_ptr([(m._m, i) for i, m in enumerate(plain)], batch.ctypes.data,
                                      n_words * 4, len(plain))
    for i, m in enumerate(plain):
        if m._m.is_error():
            raise ConstraintError(f"the constraint failed: {m._m.get_error()}")
        m._mask[:] = batch[i]
        m._mask_fresh = True
