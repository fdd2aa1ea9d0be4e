"""The well-formed GGUF files that fuzz cases mutate.

- "tiny": the synthetic tiny llama (SentencePiece-style vocabulary of 512 tokens, 4 layers; ~1.5 MB).
- "real-header": every metadata entry of the real default model (its gpt2 tokenizer of 49,152 tokens and
  48,900 merges, chat template, ...) over random tensors of a small shape with the same vocabulary
  size, so that the real tokenizer and metadata are exercised at ~10 MB per case instead of ~100 MB.
- "real-full": the real default model, header and tensors (~100 MB per case: keep these a minority).
"""
from __future__ import annotations

from functools import cache

from ..core.gguf.header import read_header
from ..tools.synthetic import Shape, synthetic_model
from .gguf_file import GGUFFile, read_gguf

SYNTHETIC_BASES = ("tiny",)
REAL_BASES = ("real-header", "real-full")
ALL_BASES = SYNTHETIC_BASES + REAL_BASES

# the keys that describe tensor shapes: taken from the small synthetic model, not from the real one
_SHAPE_KEYS = ("block_count", "embedding_length", "feed_forward_length", "attention.head_count",
               "attention.head_count_kv", "rope.dimension_count")


def _real_path():
    from ..core.gguf.default_model import default_model

    return default_model()


@cache
def load_base(name: str) -> GGUFFile:
    """The parsed base `name` (made on first use; synthetic files are cached on disk by pyllama90a.tools.synthetic)."""
    if name == "tiny":
        path = synthetic_model("tiny")
    elif name == "real-full":
        path = _real_path()
    elif name == "real-header":
        return _real_header_base()
    else:
        raise ValueError(f"unknown base {name!r}; known: {', '.join(ALL_BASES)}")
    read_header(path)  # a base must itself be valid
    return read_gguf(path)


def _real_header_base() -> GGUFFile:
    real = read_gguf(_real_path())
    arch = real.require("general.architecture").value.decode()
    n_vocab = len(real.require("tokenizer.ggml.tokens").value)
    # head_dim 64 like the real model; q4_0 rows need multiples of 32
    shape = Shape("fuzz-real-vocab", n_embd=128, n_layer=2, n_head=2, n_head_kv=1, n_ff=256, n_vocab=n_vocab)
    small = read_gguf(synthetic_model(shape))
    merged = small.copy()
    merged.entries = list(real.entries)
    for suffix in _SHAPE_KEYS:
        key = f"{arch}.{suffix}"
        merged.set(key, small.require(key))
    merged.set("general.file_type", small.require("general.file_type"))
    return merged


def available_bases(real_model: bool) -> tuple[str, ...]:
    return ALL_BASES if real_model else SYNTHETIC_BASES
