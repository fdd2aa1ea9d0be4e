"""The bench's attention modes: `fa-{on,off,auto}:{ctk}/{ctv}` or `hybrid:{ctk}/{ctv}`, with an optional
`+variant` that switches one of pyllama90a's attention paths. Shared by `python -m pyllama90a.bench` and its
`batched` mode (bench_batched.py), so that neither imports the other for it."""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

from ..core.model.attention_paths import AttentionPaths
from ..errors import InvalidArgumentError
from ..native.kv_types import check_kv_type

# variants switch one path off, so that a mode can be compared with and without it in one run (the Model's
# AttentionPaths; "+norot" is upstream's own environment switch):
# "+deq": the in-place quantized-V paths (0003 CPU, 0004 CUDA) off, i.e. patch 0002's dequantize + mul_mat;
# "+ungrouped": patch 0005 off, i.e. upstream's K^T q broadcast over the query heads of a GQA group;
# "+mmq": patch 0007 off, i.e. CUDA prefill's K^T Q over a quantized K cache on MMQ instead of cuBLAS;
# "+nock": patch 0009's CK FlashAttention off (gfx90a builds with CK);
# "+norot": upstream's Hadamard rotation of Q/K/V for quantized caches off (what it costs; it buys accuracy);
# "+fused": hybrid's decode through patch 0013's fused kernel instead of the non-flash path (CUDA/HIP);
# "+fused-unfolded": the same with patch 0015 off, i.e. upstream's four rotation nodes per layer around it
VARIANT_PATHS: dict[str, AttentionPaths] = {
    "": AttentionPaths(), "deq": AttentionPaths(vquant_direct=False), "ungrouped": AttentionPaths(kq_grouped=False),
    "mmq": AttentionPaths(kv_cublas=False), "nock": AttentionPaths(ck_fa=False), "norot": AttentionPaths(),
    "fused": AttentionPaths(fused_decode=True),
    "fused-unfolded": AttentionPaths(fused_decode=True, fold_rotations=False)}
VARIANT_ENV: dict[str, tuple[str, str]] = {"norot": ("LLAMA_ATTN_ROT_DISABLE", "1")}


# a mode's name -> Model's flash_attn ("hybrid": FA prefill and the quantized non-flash decode, patch 0012)
_MODE_NAMES = {"fa-on": "on", "fa-off": "off", "fa-auto": "auto", "hybrid": "hybrid"}


@dataclass(frozen=True)
class Mode:
    flash_attn: str
    ctk: str
    ctv: str
    variant: str = ""

    @classmethod
    def parse(cls, text: str) -> Mode:
        base, _, variant = text.partition("+")
        if variant not in VARIANT_PATHS:
            known = ", ".join("+" + v for v in VARIANT_PATHS if v)
            raise InvalidArgumentError(f"mode {text!r}: unknown variant +{variant} (known: {known})")
        try:
            fa, kv = base.split(":")
            ctk, ctv = kv.split("/")
            flash_attn = _MODE_NAMES[fa]
        except (ValueError, KeyError):
            raise InvalidArgumentError(
                f"mode {text!r} is not {{fa-on,fa-off,fa-auto,hybrid}}:CTK/CTV, e.g. fa-off:q4_0/q4_0") from None
        return cls(flash_attn, check_kv_type(ctk, "K"), check_kv_type(ctv, "V"), variant)

    def __str__(self) -> str:
        name = next(k for k, v in _MODE_NAMES.items() if v == self.flash_attn)
        return f"{name}:{self.ctk}/{self.ctv}" + (f"+{self.variant}" if self.variant else "")

    @property
    def attention_paths(self) -> AttentionPaths:
        return VARIANT_PATHS[self.variant]

    def apply_environment(self) -> None:
        """The variant's upstream environment switch (read by llama.cpp when it builds a context or graph): set
        it before each use, and clear the others'."""
        for name, _ in VARIANT_ENV.values():
            os.environ.pop(name, None)
        switch = VARIANT_ENV.get(self.variant)
        if switch:
            name, value = switch
            os.environ[name] = value


def add_source_arguments(ap: argparse.ArgumentParser, default_modes: list[str], synthetic_example: str) -> None:
    """The arguments both benches take alike: the model (--model or --synthetic), --modes and --baseline."""
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--model", help="GGUF path (default: the default model)")
    src.add_argument("--synthetic",
                     help=f"a random-weight model shape from pyllama90a.tools.synthetic (e.g. {synthetic_example})")
    ap.add_argument("--modes", nargs="+", default=default_modes)
    ap.add_argument("--baseline", help="mode the ratios refer to (default: the first)")


def parse_modes(ap: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[list[Mode], str]:
    """--modes and the baseline's name (--baseline, else the first mode), which must be one of them."""
    modes = [Mode.parse(m) for m in args.modes]
    baseline = str(Mode.parse(args.baseline)) if args.baseline else str(modes[0])
    if baseline not in map(str, modes):
        ap.error(f"--baseline {baseline} is not one of --modes")
    return modes, baseline


def model_file(args: argparse.Namespace) -> Path:
    """The model file of --synthetic (made on first use) or --model, else the default model."""
    if args.synthetic:
        from ..tools.synthetic import synthetic_model

        return synthetic_model(args.synthetic)
    from ..core.gguf.default_model import default_model

    return Path(args.model) if args.model else default_model()
