"""A BatchEngine slot's KV cells in a state file, and back (the server's /slots/{id}?action=save|restore).

The file format and every check are Model.save_state's (state_file.py), for one sequence: llama.cpp's state of
that sequence alone (llama_state_seq_get_data) and the tokens it holds. The identity's n_seq_max is 0, which no
context has, so a slot's file and a Model's state file are never taken for each other; any slot of an engine
with the same model file, KV types, slot size and LoRA adapters takes it. The file records the adapter scales
its cells were computed with (the slot's request's), and the slot restored runs with them: its cells serve only
a request with that set (lora_turns.py).

A slot's file is refused from its size when it is larger than a full slot's: its K and V rows for n_ctx_slot
cells (kv_budget, from the model's header; the whole context's for a model kv_budget does not size).
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, TypeVar

from ...errors import BusyError, LlamaError, ModelFormatError, StateFileError, fs_path, int_in_range
from ...native import ContextHandle
from ..model.kv_budget import kv_bytes
from ..model.state_bounds import context_kv_bytes, memory_state_bound, n_layer
from ..model.state_file import StateIdentity, StateLimits, check_key, file_name, read_state_file, write_state_file
from .slots import Slot

if TYPE_CHECKING:  # pragma: no cover
    from ..model.model import Model

ONE_SEQUENCE = 0  # the identity's n_seq_max of a slot's file
T = TypeVar("T")


class BetweenSteps(Protocol):
    """The engine's way to run a task on its thread between two decode steps, returning its result."""

    def __call__(self, task: Callable[[], T], /) -> T: ...


def slot_identity(model: Model, n_ctx_slot: int, lora_scales: tuple[float, ...] | None) -> StateIdentity:
    """A slot's file of `model` (its weights, KV types and adapters) with cells computed with `lora_scales`
    (None, in what a restore expects: any)."""
    return StateIdentity(model.fingerprint, model.ctk, model.ctv, n_ctx_slot, ONE_SEQUENCE, model.lora.fingerprint,
                         lora_scales)


def slot_limits(model: Model, context: ContextHandle, n_ctx_slot: int) -> StateLimits:
    """The limits of a slot's file: a sequence of at most `n_ctx_slot` cells of `context`."""
    kv = context_kv_bytes(context)
    # a slot's K and V rows, where kv_budget sizes the model's cache (one full-attention cache); else (sliding-window
    # layers, or the file is gone) the whole context's bound it
    with contextlib.suppress(ModelFormatError):
        kv = min(kv, kv_bytes(model.path, n_ctx_slot, model.ctk, model.ctv).total_bytes)
    payload = memory_state_bound(kv, n_ctx_slot, 1, context.n_seq_max, n_layer(context))
    return StateLimits(n_ctx_slot, context.model.n_vocab, payload, len(model.lora))


def save_slot(context: ContextHandle, seq: int, tokens: list[int], path: bytes, identity: StateIdentity,
              key: bytes | None = None, admit: Callable[[int], None] | None = None) -> int:
    """Write sequence `seq` (holding `tokens`) to `path` (write_state_file's `key` and `admit`); the bytes of
    llama.cpp's state written."""
    payload = context.sequence_state_bytes(seq)
    write_state_file(path, identity, tokens, payload, key, admit)
    return len(payload)


def restore_slot(context: ContextHandle, seq: int, path: bytes, identity: StateIdentity, limits: StateLimits,
                 cached: list[int], key: bytes | None = None) -> tuple[tuple[float, ...], int]:
    """Give sequence `seq` the cells in the file at `path` (read_state_file's checks first); the LoRA scales they
    were computed with and the bytes of llama.cpp's state read. `cached`, the tokens in its cells, is kept true:
    the file's, or empty when llama.cpp refuses the payload (the sequence is emptied first; StateFileError says
    so), or unchanged when a check refuses the file."""
    tokens, payload, lora_scales = read_state_file(path, identity, limits, key)
    context.clear_sequence(seq)
    cached.clear()
    try:
        context.set_sequence_state(seq, payload)
    except LlamaError as refusal:
        context.clear_sequence(seq)
        raise StateFileError(f"llama.cpp refused the slot state in {file_name(path)}; the slot is empty now",
                             refusal.native_log) from None
    cached[:] = tokens
    return lora_scales, len(payload)


class SlotFiles:
    """A BatchEngine's slot files: each action runs on the engine thread between two decode steps (through
    `between_steps`, the engine's), on an idle slot of `slots`."""

    def __init__(self, model: Model, context: ContextHandle, slots: Sequence[Slot], n_ctx_slot: int,
                 between_steps: BetweenSteps) -> None:
        self._model, self._context, self._slots, self._n_ctx_slot = model, context, slots, n_ctx_slot
        self._between_steps = between_steps
        self._limits: StateLimits | None = None  # what a restored file may hold (from the model's header, once)

    def save(self, slot: int, path: str | os.PathLike[str], *, key: bytes | None = None,
             admit: Callable[[int], None] | None = None) -> tuple[int, int]:
        """BatchEngine.save_slot: (tokens saved, bytes of llama.cpp's state)."""
        raw, key = fs_path("path", path), check_key(key)

        def save() -> tuple[int, int]:
            s = self._idle_slot(slot, "save")
            return len(s.cached), save_slot(self._context, s.seq, s.cached, raw, self._identity(s.lora), key, admit)
        return self._between_steps(save)

    def restore(self, slot: int, path: str | os.PathLike[str], *, key: bytes | None = None) -> tuple[int, int]:
        """BatchEngine.restore_slot: (tokens restored, bytes read)."""
        raw, key = fs_path("path", path), check_key(key)

        def restore() -> tuple[int, int]:
            s = self._idle_slot(slot, "restore")
            if self._limits is None:
                self._limits = slot_limits(self._model, self._context, self._n_ctx_slot)
            s.lora, n_bytes = restore_slot(self._context, s.seq, raw, self._identity(None), self._limits, s.cached,
                                           key)
            return len(s.cached), n_bytes
        return self._between_steps(restore)

    def erase(self, slot: int) -> int:
        """BatchEngine.erase_slot: how many tokens the slot held."""
        def erase() -> int:
            s = self._idle_slot(slot, "erase")
            n = len(s.cached)
            self._context.clear_sequence(s.seq)
            s.cached.clear()
            return n
        return self._between_steps(erase)

    def _identity(self, lora_scales: tuple[float, ...] | None) -> StateIdentity:
        return slot_identity(self._model, self._n_ctx_slot, lora_scales)

    def _idle_slot(self, slot: int, action: str) -> Slot:  # engine thread
        int_in_range("slot", slot, 0, len(self._slots) - 1)
        if self._slots[slot].job is not None:
            raise BusyError(f"cannot {action} slot {slot}: it is generating")
        return self._slots[slot]
