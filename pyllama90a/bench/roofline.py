"""How far a decode step is from the memory-bandwidth bound: the bytes one step reads, and a copy bandwidth
measured on the same device in the same process.

A one-token decode step reads every weight matrix once (the token embedding only by one row) and the K and V of
every cell in the cache, so `decode_bytes / copy_bandwidth` is the shortest a step can take; the bench reports
the fraction of that bound each mode reaches.
"""
from __future__ import annotations

import os

from ..core.gguf.header import read_header
from ..native.ggml import copy_bandwidth as copy_bandwidth  # measured on the backend device, in the binding floor

_TOKEN_EMBEDDING = "token_embd.weight"
_OUTPUT = "output.weight"  # absent: the output layer reuses the token embedding, read whole


def weight_bytes_per_token(path: str | os.PathLike[str]) -> int:
    """Bytes of the weights a one-token decode step reads: all tensors, less the token embedding when a separate
    output matrix exists (the embedding is then only read by one row)."""
    tensors = {t.name: t.nbytes or 0 for t in read_header(path).tensors}
    total = sum(tensors.values())
    if _OUTPUT in tensors:
        total -= tensors.get(_TOKEN_EMBEDDING, 0)
    return total


def decode_bytes(weight_bytes: int, kv_bytes_per_cell: float, depth: int) -> int:
    """Bytes a one-token decode step reads on top of `depth` cached tokens (and its own)."""
    return int(weight_bytes + kv_bytes_per_cell * (depth + 1))
