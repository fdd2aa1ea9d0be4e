"""Small synthetic llama shapes for the attention-path tests: GQA ratios 1, 3, 4 and 8, head dims 64 and 128.

Two layers, so that layer 1 reads K and V quantized from layer 0's output. Tests that use the same shape share its
cached model file.
"""
from __future__ import annotations

from pyllama90a.synthetic import Shape


def _shape(name: str, n_embd: int, n_head: int, n_head_kv: int) -> Shape:
    return Shape(name, n_embd=n_embd, n_layer=2, n_head=n_head, n_head_kv=n_head_kv, n_ff=512, n_vocab=512)


GQA_SHAPES = {s.name: s for s in (
    _shape("gqa1-hd64", 256, 4, 4),
    _shape("gqa1-hd128", 256, 2, 2),
    _shape("gqa3-hd64", 384, 6, 2),
    _shape("gqa4-hd64", 512, 8, 2),
    _shape("gqa4-hd128", 512, 4, 1),
    _shape("gqa4-hd128-2kv", 1024, 8, 2),  # GQA 4 with two KV heads, for code that groups KV heads
    _shape("gqa8-hd64", 512, 8, 1),
    _shape("gqa8-hd128", 1024, 8, 1),
)}


def gqa_shapes(*names: str) -> dict[str, Shape]:
    """The named shapes, in that order (parametrize over the dict's keys)."""
    return {name: GQA_SHAPES[name] for name in names}
