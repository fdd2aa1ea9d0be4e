"""A model's attention shape from its GGUF header: what its KV cache is made of (kv_budget sizes it, a calibration
is keyed by it)."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from ...errors import ModelFormatError
from ..gguf.header import GGUFHeader


@dataclass(frozen=True)
class AttentionShape:
    """What a model's KV cache is made of, from its header: layers, KV heads and the K and V head dims."""
    n_layer: int
    n_head_kv: int
    head_k: int
    head_v: int


def attention_shape(header: GGUFHeader, path: str | os.PathLike[str]) -> AttentionShape:
    """The header's attention shape; ModelFormatError when it lacks one (`path` names the file)."""
    arch = header.architecture

    def get(key: str, default: Any = None) -> Any:  # the header's "<arch>.<key>"
        return header.get(f"{arch}.{key}", default)

    n_layer, n_embd, n_head = get("block_count"), get("embedding_length"), get("attention.head_count")
    n_head_kv = get("attention.head_count_kv", n_head)
    if not all(isinstance(x, int) and x > 0 for x in (n_layer, n_embd, n_head, n_head_kv)):
        raise ModelFormatError(f"{path}: the header lacks the attention shape ({arch}.block_count, ...)")
    return AttentionShape(n_layer, n_head_kv, get("attention.key_length", n_embd // n_head),
                          get("attention.value_length", n_embd // n_head))
