"""The facts of a loaded GGUF file that every Model on its weights shares, and the checks of its header
values against a context's settings before llama.cpp reads them."""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

from ...errors import InvalidArgumentError, ModelFormatError
from ...native import ContextParams
from ...native.kv_types import block_size
from ..gguf.header import GGUFHeader


@dataclass(frozen=True)
class ModelFile:
    """What Model.with_context shares with the Model it is made from."""
    path: Path
    header: GGUFHeader
    sha256: bytes       # of the GGUF header: what a state file must have been saved by (state_file.py)
    n_gpu_layers: int


def check_header(file: ModelFile, params: ContextParams) -> None:
    """Every check of the GGUF's values before llama.cpp reads them (hyperparameter validation goes here)."""
    header = file.header
    arch = header.get("general.architecture")
    if not isinstance(arch, str):
        raise ModelFormatError(f"{file.path}: no general.architecture in the GGUF metadata")
    n_head = header.get(f"{arch}.attention.head_count")
    n_embd = header.get(f"{arch}.embedding_length")
    default_head = n_embd // n_head if isinstance(n_head, int) and n_head and isinstance(n_embd, int) else None
    for which, name, key in (("K", params.type_k, "key_length"), ("V", params.type_v, "value_length")):
        head_dim = header.get(f"{arch}.attention.{key}", default_head)
        if isinstance(head_dim, int) and head_dim % block_size(name):
            raise InvalidArgumentError(
                f"{which} cache type {name} has blocks of {block_size(name)} values, which do not divide "
                f"this model's head dimension {head_dim}; use f16, bf16 or f32")
    n_ctx_train = header.get(f"{arch}.context_length")
    if isinstance(n_ctx_train, int) and params.n_ctx > n_ctx_train:
        warnings.warn(f"n_ctx={params.n_ctx} is over the {n_ctx_train} tokens this model was trained on; "
                      f"expect worse output past {n_ctx_train}", stacklevel=3)


def pooling_for(header: GGUFHeader) -> str:
    """How an embedding context pools: as the model says, else (a causal LM says nothing) the mean over tokens."""
    arch = header.get("general.architecture")
    return "model" if header.get(f"{arch}.pooling_type") is not None else "mean"
