"""A random LoRA adapter GGUF for a synthetic model (pyllama90a.tools.synthetic), as llama.cpp's loader reads one.

    from pyllama90a.tools.synthetic_lora import write_synthetic_lora
    pairs = write_synthetic_lora("tiny", "a.gguf", ["blk.0.attn_q.weight"], rank=4, alpha=8.0)
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .synthetic import Shape, _resolve_shape, _tensor_plan, import_gguf

__all__ = ["write_synthetic_lora"]


def write_synthetic_lora(shape: str | Shape, path: str | os.PathLike[str], targets: Sequence[str], *, rank: int = 4,
                         alpha: float = 8.0, std: float = 0.05, seed: int = 0, architecture: str = "llama",
                         extra: Mapping[str, Any] | None = None) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Write a random LoRA adapter GGUF for the synthetic `shape` to `path`, adapting the weight matrices named
    in `targets` (e.g. "blk.0.attn_q.weight"), as llama.cpp's loader reads one: F32 `<name>.lora_a` of numpy
    shape (rank, n_in) and `<name>.lora_b` of (n_out, rank), noise of `std` (B @ A then changes the weights by
    about as much as they are: a visible effect), adapter.lora.alpha = `alpha`. A decode with scale s
    then computes with W + s * alpha / rank * B @ A. `architecture` and `extra` (metadata key -> value: str,
    float, int or a list of ints) make files a loader must refuse. Returns name -> (A, B)."""
    s = _resolve_shape(shape)
    shapes = dict(_tensor_plan(s))
    unknown = [t for t in targets if len(shapes.get(t, ())) != 2]
    if unknown:
        raise ValueError(f"not weight matrices of shape {s.name!r}: {', '.join(unknown)}")
    gguf = import_gguf()
    writer = gguf.GGUFWriter(Path(path), architecture)
    pairs: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    try:
        writer.add_type("adapter")
        writer.add_string("adapter.type", "lora")
        writer.add_float32("adapter.lora.alpha", float(alpha))
        for key, value in (extra or {}).items():
            if isinstance(value, list):
                writer.add_array(key, value)
            elif isinstance(value, str):
                writer.add_string(key, value)
            else:
                (writer.add_float32 if isinstance(value, float) else writer.add_uint32)(key, value)
        for index, name in enumerate(targets):
            n_out, n_in = shapes[name]
            rng = np.random.default_rng([seed, index])
            a = rng.standard_normal((rank, n_in), dtype=np.float32) * np.float32(std)
            b = rng.standard_normal((n_out, rank), dtype=np.float32) * np.float32(std)
            writer.add_tensor(f"{name}.lora_a", a)
            writer.add_tensor(f"{name}.lora_b", b)
            pairs[name] = (a, b)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    finally:
        writer.close()
    return pairs
