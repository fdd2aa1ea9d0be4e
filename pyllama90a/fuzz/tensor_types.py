"""The fuzz class "tensor types per role": one weight of a well-formed file gets another ggml type, with data of
the size that type needs (so the file passes the header checks and reaches llama.cpp and the first decode).

The op `{"op": "retype", "name": n, "type": t, "fill": byte}` gives tensor n new data, bytes of `fill` (0x00:
zeros, 0xff: NaN in F32/F16/BF16 and in quantization scales, 0x7f: huge finite values that overflow to inf).
Roles are those of pyllama90a.core.gguf.tensor_roles: matrices, embedding rows, norms.
"""
from __future__ import annotations

import random
from dataclasses import replace

from ..core.gguf.header import GGML_TYPE_SIZES
from ..core.gguf.tensor_roles import role_of
from .gguf_file import GGUFFile

# every ggml type id, removed ones (4, 5, 31-33, 36-38), one past the end
ALL_TYPES = list(range(44))
FILLS = [0x00, 0x00, 0xff, 0x7f]


def _nbytes(dims: list[int], ggml_type: int) -> int:
    n_elements = 1
    for d in dims:
        n_elements *= max(d, 0)
    block, block_bytes = GGML_TYPE_SIZES.get(ggml_type, (1, 0))
    return n_elements // block * block_bytes


def retype(f: GGUFFile, name: str, ggml_type: int, fill: int) -> None:
    """Give tensor `name` of `f` the type `ggml_type` and new data of that type's size, filled with `fill`; the
    data section is laid out again (ggml wants each tensor right after the one before it, aligned)."""
    i = f.tensor_index(name)
    if i is None:
        return
    if f.layout is None:
        f.layout = [(t.offset, _nbytes(t.dims, t.ggml_type), 0) for t in f.tensors]
    if len(f.layout) != len(f.tensors):  # another op dropped a tensor: nothing sensible to lay out
        return
    f.tensors[i] = replace(f.tensors[i], ggml_type=ggml_type)
    f.layout[i] = (None, _nbytes(f.tensors[i].dims, ggml_type), fill)
    at = 0
    for j, (_, nbytes, _) in enumerate(f.layout):
        f.tensors[j] = replace(f.tensors[j], offset=at)
        at += nbytes + -nbytes % f.alignment


def role_type_ops(rng: random.Random, base: GGUFFile) -> list[dict]:
    """One retype op: a tensor of a random role, a type whose blocks divide its rows (mostly), a fill."""
    by_role: dict[str, list[str]] = {}
    for t in base.tensors:
        by_role.setdefault(role_of(t.name), []).append(t.name)
    role = rng.choice(sorted(r for r in by_role if r != "any"))
    name = rng.choice(by_role[role])
    row = next(t.dims[0] for t in base.tensors if t.name == name)
    fitting = [ty for ty in ALL_TYPES if ty in GGML_TYPE_SIZES and row % GGML_TYPE_SIZES[ty][0] == 0]
    ggml_type = rng.choice(fitting if rng.random() < 0.9 else ALL_TYPES)
    return [{"op": "retype", "name": name, "type": ggml_type, "fill": rng.choice(FILLS)}]
