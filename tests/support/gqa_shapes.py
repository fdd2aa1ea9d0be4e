"""The small synthetic GQA shapes of the attention-path tests (tools/synthetic.py: GQA_SHAPES): GQA ratios 1, 3, 4
and 8, head dims 64 and 128. Tests that use the same shape share its cached model file."""
from __future__ import annotations

from pyllama90a.tools.synthetic import GQA_SHAPES, Shape


def gqa_shapes(*names: str) -> dict[str, Shape]:
    """The named shapes, in that order (parametrize over the dict's keys)."""
    return {name: GQA_SHAPES[name] for name in names}
