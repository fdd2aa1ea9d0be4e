"""A BatchEngine slot's KV cells in a state file, and back (the server's /slots/{id}?action=save|restore).

The file format and every check are Model.save_state's (state_file.py), for one sequence: llama.cpp's state of
that sequence alone (llama_state_seq_get_data) and the tokens it holds. The identity's n_seq_max is 0, which no
context has, so a slot's file and a Model's state file are never taken for each other; any slot of an engine
with the same model file, KV types and slot size takes it.
"""
from __future__ import annotations

import os

from .errors import LlamaError, StateFileError
from .native import ContextHandle
from .state_file import StateIdentity, read_state_file, write_state_file

ONE_SEQUENCE = 0  # the identity's n_seq_max of a slot's file


def slot_identity(model_sha256: bytes, type_k: str, type_v: str, n_ctx_slot: int) -> StateIdentity:
    return StateIdentity(model_sha256, type_k, type_v, n_ctx_slot, ONE_SEQUENCE)


def save_slot(context: ContextHandle, seq: int, tokens: list[int], path: bytes, identity: StateIdentity) -> int:
    """Write sequence `seq` (holding `tokens`) to `path`; the bytes of llama.cpp's state written."""
    payload = context.sequence_state_bytes(seq)
    write_state_file(path, identity, tokens, payload)
    return len(payload)


def restore_slot(context: ContextHandle, seq: int, path: bytes, identity: StateIdentity) -> tuple[list[int], int]:
    """Give sequence `seq` the cells in the file at `path` (read_state_file's checks first); its tokens and the
    bytes of llama.cpp's state read. The sequence is emptied first; when llama.cpp refuses the payload it stays
    empty and StateFileError says so."""
    tokens, payload = read_state_file(path, identity, identity.n_ctx, context.model.n_vocab)
    context.clear_sequence(seq)
    try:
        context.set_sequence_state(seq, payload)
    except LlamaError as refusal:
        context.clear_sequence(seq)
        raise StateFileError(f"llama.cpp refused the slot state in {os.fsdecode(path)}; the slot is empty now",
                             refusal.native_log) from None
    return tokens, len(payload)
