"""Batch: a llama_batch, filled with runs of tokens of several sequences and reused from one decode to the next."""
from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from ..errors import ClosedError, InvalidArgumentError, LlamaError, positive_int
from ._ffi import ffi, lib
from .log import NativeCall

if TYPE_CHECKING:  # pragma: no cover
    from .._native import CData  # (only in the stub, _native.pyi)


class Batch:
    """Room for `capacity` tokens, one sequence id each. clear(), add() runs of tokens, then
    ContextHandle.decode(batch). close() (or the context manager, or the finalizer) frees it."""

    def __init__(self, capacity: int) -> None:
        self.capacity = positive_int("capacity", capacity)  # an int32 in llama_batch_init
        with NativeCall() as call:
            native = lib.llama_batch_init(capacity, 0, 1)
        call.check(native.token != ffi.NULL, LlamaError, f"could not allocate a batch of {capacity} tokens")
        self._finalizer = weakref.finalize(self, lib.llama_batch_free, native)
        self._native = native
        native.n_tokens = 0

    @property
    def native(self) -> CData:  # the llama_batch struct
        """The llama_batch, for ContextHandle.decode; ClosedError once freed."""
        if not self._finalizer.alive:
            raise ClosedError("this batch is closed")
        return self._native

    @property
    def n_tokens(self) -> int:
        return int(self._native.n_tokens)

    def clear(self) -> None:
        self.native.n_tokens = 0

    def add(self, tokens: Sequence[int], start: int, seq: int, logits: Literal["last", "all", "none"]) -> None:
        """Append `tokens` of sequence `seq` at positions start, start + 1, ...; `logits`: which of them get a
        logits row after the decode (the last one of this run, all, or none)."""
        batch = self.native
        n = batch.n_tokens
        if n + len(tokens) > self.capacity:
            raise InvalidArgumentError(f"{n} + {len(tokens)} tokens do not fit a batch of {self.capacity}")
        every = logits == "all"
        for i, token in enumerate(tokens):  # (llama_decode checks the ids, positions and sequence)
            batch.token[n + i] = token
            batch.pos[n + i] = start + i
            batch.n_seq_id[n + i] = 1
            batch.seq_id[n + i][0] = seq
            batch.logits[n + i] = every
        n += len(tokens)
        if logits == "last" and tokens:
            batch.logits[n - 1] = True
        batch.n_tokens = n

    def close(self) -> None:
        """Free the batch. A second call does nothing."""
        self._finalizer()

    def __enter__(self) -> Batch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
