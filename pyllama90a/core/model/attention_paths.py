"""Which of pyllama90a's attention kernels a context may use: llama-pyllama90a.h's llama_pyl_attn_params.

All paths but fused_decode are on by default. A path switched off takes the way upstream llama.cpp
goes (for fused_decode: patch 0012's non-flash decode), so that the bench and the tests compare both in one
process: `Model(..., attention_paths=AttentionPaths(kq_grouped=False))`.
llama.cpp reads them once per graph build of that context; no kernel reads the environment.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from ...errors import InvalidArgumentError

# the bits of enum llama_pyl_attn_path, in the order of the fields below
_BITS = {"vquant_direct": 1 << 0, "kq_grouped": 1 << 1, "kv_cublas": 1 << 2, "ck_fa": 1 << 3, "fused_decode": 1 << 5,
         "fold_rotations": 1 << 6}
# (1 << 7, fused_q8, was retired by patch 0036 with the F32-q kernel it chose when off; 1 << 8, lane_quant, by
# patch 0030 with the slower K/V store)


@dataclass(frozen=True)
class AttentionPaths:
    vquant_direct: bool = True  # a quantized V read in place (CPU, CUDA/HIP); off: dequantize + mul_mat (patch 0002)
    kq_grouped: bool = True     # decode K^T q once per group of query heads with GQA (patch 0005)
    kv_cublas: bool = True      # CUDA/HIP prefill K^T Q over a quantized K: F16 copy + cuBLAS (patch 0007); off: MMQ
    ck_fa: bool = True          # gfx90a builds with CK: FLASH_ATTN_EXT through CK's fmha_fwd (patch 0009)
    fused_decode: bool = False  # flash_attn="hybrid" on CUDA/HIP: one-token decode in one fused kernel per layer
                                # (patch 0013; opt-in, and what flash_attn="auto" takes on CUDA)
    fold_rotations: bool = True # with fused_decode over a rotated quantized cache: the kernels rotate q, the
                                # output and the stored K/V rows, no rotation nodes in the decode graph (0015)

    def __post_init__(self) -> None:
        for f in fields(self):
            if not isinstance(getattr(self, f.name), bool):
                raise InvalidArgumentError(f"AttentionPaths.{f.name} must be True or False, "
                                           f"got {getattr(self, f.name)!r}")

    @property
    def bits(self) -> int:
        """The llama_pyl_attn_path bits for llama_pyl_set_attn_params."""
        return sum(bit for name, bit in _BITS.items() if getattr(self, name))

    @classmethod
    def from_bits(cls, bits: int) -> AttentionPaths:
        return cls(**{name: bool(bits & bit) for name, bit in _BITS.items()})

    def off(self) -> list[str]:
        """The names of the default paths switched off (an opt-in path left off is not among them)."""
        default = AttentionPaths()
        return [name for name in _BITS if not getattr(self, name) and getattr(default, name)]

    @classmethod
    def checked(cls, value: object, *, none_ok: bool = False) -> AttentionPaths:
        """`value` if it is an AttentionPaths (None: the default paths, where `none_ok`); else
        InvalidArgumentError. The one check of every place that takes attention paths, so a dict or a bits int
        never reaches set_attention_paths."""
        if value is None and none_ok:
            return cls()
        if not isinstance(value, cls):
            raise InvalidArgumentError(f"attention_paths must be an AttentionPaths, got {type(value).__name__}")
        return value


__all__ = ["AttentionPaths"]
