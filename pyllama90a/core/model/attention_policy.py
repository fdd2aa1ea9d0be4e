"""What flash_attn="auto" means: FA on, off or hybrid (per phase) per backend and KV types, from measured results.

| backend            | KV types                        | choice              | evidence                                                |
|--------------------|---------------------------------|---------------------|---------------------------------------------------------|
| CPU                | quantized V                     | off                 | benchmarks/results/cpu-smollm2-depth4096 (FA-off with   |
|                    |                                 |                     | patch 0003 decodes and prefills faster than FA-on);     |
|                    |                                 |                     | cpu-smollm2-hybrid: hybrid prefills as FA (0.18x off's) |
| CPU                | f16/bf16/f32 V                  | llama.cpp decides   | upstream behaviour                                      |
| CUDA               | f16/f16, bf16/bf16              | on                  | benchmarks/results/h200-{1b-hd64,8b-hd128}: FA-on       |
|                    |                                 |                     | prefills 1.2-3.4x faster than FA-off, decodes 0.91-1.10x|
| CUDA               | q4_0/q4_0                       | hybrid, with the    | benchmarks/results/h200-8b-hd128-hybrid: prefill 0.99x  |
|                    |                                 | fused decode kernel | FA-on's at 0/8K/32K, FA's compute buffer;               |
|                    |                                 |                     | h200-8b-hd128-0054 (the series through 0054, H200):     |
|                    |                                 |                     | decode 0.99x / 0.99x / 1.05x / 1.21x FA-on f16 at       |
|                    |                                 |                     | 0/2K/8K/32K, 1.15x at 32 sequences of 8K, 1.42x at      |
|                    |                                 |                     | equal KV memory (100 GB at 8K: 256 sequences, the       |
|                    |                                 |                     | most llama.cpp takes, against f16's 90); H100           |
|                    |                                 |                     | (h100-8b-hd128-0053): 1.38x at 32 sequences, 1.75x      |
|                    |                                 |                     | at equal KV memory (64 GB). FA-on q4_0: 0.63x f16's     |
|                    |                                 |                     | at 32K (H200); 0.30-0.86x hybrid's at 1-32 sequences    |
|                    |                                 |                     | of 2K-32K, 7b-gqa7 included (H100, h100-8b-hd128-0052)  |
| CUDA               | q8_0, q4_1, q5_0, q5_1 (K = V)  | hybrid, with the    | h100-8b-hd128-calibrate/calibration-full.md: decode     |
|                    |                                 | fused decode kernel | 1.04-1.15x FA-on's and 1.10-1.25x FA-off's at depths 0  |
|                    |                                 |                     | and 1024, prefill 0.98-1.02x FA-on's (H100)             |
| CUDA               | iq4_nl, or K != V               | off                 | FA has no CUDA kernel for iq4_nl (it falls back to the  |
|                    |                                 |                     | CPU: 40 tok/s prefill at depth 1024, H100); K != V not  |
|                    |                                 |                     | measured. FA-off reads them on the GPU (0004-0007)      |
| HIP, gfx90a (MI210)| any                             | off                 | shared/seeds: FA 2.6x slower prefill, 6.7x slower decode|
| HIP, other         | any                             | llama.cpp decides   | no measurement                                          |

Before this table, "auto" follows a calibration of this device, build and model shape when one exists
(calibration.py, written by `python -m pyllama90a calibrate`): per phase, the path it measured fastest at the
depths up to n_ctx, when it measured deep enough for that n_ctx (calibration.REACH). Without one, it logs once per
device that the table is a guess there.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from ...native.kv_types import KV_TYPES, QUANTIZED_KV_TYPES
from .calibration import calibration_key, choose_flash_attn, lookup, reach
from .shape import AttentionShape

logger = logging.getLogger("pyllama90a")

# the cache types CUDA's FA has kernels for (ggml-cuda's ggml_cuda_fattn_kv_type_supported at the pinned commit);
# FA over any other runs on the CPU
CUDA_FA_KV_TYPES = frozenset(KV_TYPES) - {"iq4_nl"}
# of their pairs, those measured on CUDA: FA's prefill wins for all, and for the quantized ones (K = V) the fused
# decode wins too (hybrid)
CUDA_HYBRID_PAIRS = {(t, t) for t in QUANTIZED_KV_TYPES if t in CUDA_FA_KV_TYPES}
CUDA_FA_PAIRS = {("f16", "f16"), ("bf16", "bf16")} | CUDA_HYBRID_PAIRS
# the device kinds the table above was measured on: elsewhere (ROCm, Vulkan, ...) it is a guess worth a warning
MEASURED_KINDS = frozenset({"cpu", "cuda"})


@dataclass(frozen=True)
class AttentionChoice:
    flash_attn: str  # what the context is made with: "on", "off", "hybrid", or "auto" (llama.cpp decides)
    backend: str     # the device attention runs on, e.g. "CPU" or "CUDA0 (NVIDIA H200)"
    reason: str
    fused_decode: bool = False  # "auto" also takes the fused decode kernel (when no attention_paths are given)
    calibration: str | None = None  # the calibration file "auto" followed; None: the built-in table (or requested)


def device_kind(name: str, description: str) -> str:
    """The policy's kind of a ggml GPU device, from its name and description: "cuda", "gfx90a", "hip" or "gpu"."""
    if name.startswith("CUDA"):
        return "cuda"
    if name.startswith(("ROCm", "HIP")):
        return "gfx90a" if "gfx90a" in description.lower() or "mi210" in description.lower() else "hip"
    return "gpu"


def attention_device(n_gpu_layers: int) -> tuple[str, str]:
    """(kind, label) of the first GPU when layers are offloaded, else the CPU."""
    from ...native.ggml import devices

    if n_gpu_layers != 0:
        for dev in devices():
            if dev.is_gpu:
                return device_kind(dev.name, dev.description), f"{dev.name} ({dev.description})"
    return "cpu", "CPU"


def choose(requested: str, ctk: str, ctv: str, n_gpu_layers: int, workers: Sequence[object] = (),
           shape: AttentionShape | None = None, n_ctx: int = 0) -> AttentionChoice:
    """The choice for a model with n_gpu_layers offloaded; with RPC `workers` ("host:port") those layers run on a
    worker, of a kind not known here. With the model's `shape`, "auto" first follows a matching calibration."""
    if workers and n_gpu_layers != 0:
        return decide(requested, ctk, ctv, "gpu", "RPC workers " + ", ".join(map(str, workers)))
    kind, label = attention_device(n_gpu_layers)
    if requested == "auto" and shape is not None:
        calibrated = calibrated_choice(ctk, ctv, kind, label, shape, n_ctx)
        if calibrated is not None:
            return calibrated
    return decide(requested, ctk, ctv, kind, label)


def calibrated_choice(ctk: str, ctv: str, kind: str, label: str, shape: AttentionShape,
                      n_ctx: int) -> AttentionChoice | None:
    """What this device's calibration says for this K/V pair and n_ctx, if it has one that measured the pair."""
    found = lookup(calibration_key(label, shape), table_measured=kind in MEASURED_KINDS)
    if found is None:
        return None
    calibration, path = found
    picked = choose_flash_attn(calibration, ctk, ctv, n_ctx)
    if picked is None:
        logger.info("calibration %s did not measure K %s / V %s: flash_attn=auto follows the table", path, ctk, ctv)
        return None
    if n_ctx > reach(calibration, ctk, ctv):  # (a --quick file's shallow depths say little about a long context)
        logger.info("calibration %s measured K %s / V %s to depths that speak for n_ctx up to %d, not %d: "
                    "flash_attn=auto follows the table; calibrate with --n-ctx %d", path, ctk, ctv,
                    reach(calibration, ctk, ctv), n_ctx, n_ctx)
        return None
    choice = AttentionChoice(picked.flash_attn, label, picked.reason, picked.fused_decode, str(path))
    logger.info("flash_attn=auto -> %s on %s: %s (%s)", choice.flash_attn, label, choice.reason, path)
    return choice


def decide(requested: str, ctk: str, ctv: str, kind: str, label: str) -> AttentionChoice:
    """The table above for a device of `kind` (attention_device's: "cpu", "cuda", "gfx90a", "hip", "gpu")."""
    if requested != "auto":
        return AttentionChoice(requested, label, "requested")
    quantized_v = ctv not in ("f16", "bf16", "f32")
    if kind == "cpu":
        if quantized_v:
            choice = AttentionChoice("off", label, "CPU with quantized V: the non-FA path with patch 0003 is faster")
        else:
            choice = AttentionChoice("auto", label, "CPU with unquantized V: llama.cpp decides")
    elif kind == "cuda":
        if (ctk, ctv) in CUDA_HYBRID_PAIRS:
            choice = AttentionChoice("hybrid", label, "CUDA with quantized V: FA prefill, the fused quantized "
                                                      "decode (1.18x FA-on f16's at 32K for q4_0), FA's compute "
                                                      "buffer (H100, H200)", fused_decode=True)
        elif (ctk, ctv) in CUDA_FA_PAIRS:
            choice = AttentionChoice("on", label, "CUDA: FA-on prefills much faster for these types (H200)")
        elif not {ctk, ctv} <= CUDA_FA_KV_TYPES:
            choice = AttentionChoice("off", label, f"CUDA has no FA kernel for K {ctk} / V {ctv} (FA would run on "
                                                   "the CPU); the non-FA path reads them on the GPU")
        else:
            choice = AttentionChoice("off", label, f"CUDA: K {ctk} / V {ctv} not measured with FA; the non-FA "
                                                   "path reads them on the GPU")
    elif kind == "gfx90a":
        choice = AttentionChoice("off", label, "gfx90a: FA is 2.6x slower at prefill, 6.7x at decode (MI210)")
    else:
        choice = AttentionChoice("auto", label, "no measurement for this backend: llama.cpp decides")
    logger.info("flash_attn=auto -> %s on %s: %s", choice.flash_attn, choice.backend, choice.reason)
    return choice
