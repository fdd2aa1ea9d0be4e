"""Attention paths checked against a CPU reference.

A path is (device, flash_attn, K type, V type, variant); its reference is the CPU backend with flash attention ON
and the same K/V types: upstream's CPU FA kernel reads quantized K and V itself. On the CPU, reference and path
hold the same cache contents and differ only in the attention algorithm; the bound is a multiple of the noise
between two algorithms nobody patched (CPU FA-on f16 against this device's FA-off f16).

On a GPU the cache is written by the GPU: K and V differ from the CPU's in the last bits before they are
quantized, and a 4-bit cache rounds some of those to the other side (on the H200: 1.8e-2 relative error for
upstream's own FA over q4_0, against 1.5e-3 for f16). So a GPU path over a quantized cache is checked twice:
- against the CPU, within a multiple of the noise of upstream's FA over the same K/V types on this device
  (`+nock`: CK's dispatch off), which measures that rounding noise;
- against that upstream FA on the same device, which reads the very same cache, within the tight f16 bound:
  this is the check that finds a wrong block or scale in our kernels.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np

from ..bench.depths import Mode
from ..core.model.model import Model
from ..tools.synthetic import GQA_SHAPES, synthetic_model

CHECK_SHAPES = ("gqa1-hd64", "gqa4-hd128", "gqa8-hd128")  # GQA 1/4/8, head dims 64/128
N_PREFILL, N_DECODE = 300, 6  # a prefill past 256 cells (not a multiple of 256), then decode steps
NOISE_FACTOR = 3.0
# where two algorithms agree closer than this, rounding in a quantized cache may still differ by about that much
MIN_NOISE = 3e-3

# the device side of the noise pair: upstream's standard attention
NOISE_MODE = "fa-off:f16/f16"
# (mode, what it exercises); FA-on modes are the reference on the CPU and are checked on other devices only
PATH_MODES = (
    ("fa-on:f16/f16", "flash attention (upstream's, or CK's on gfx90a if built)"),
    ("fa-off:q8_0/q8_0", "quantized K and V without FA (0002, 0003/0004, 0005, 0006, 0007)"),
    ("fa-off:q4_0/q4_0", "quantized K and V without FA (0002, 0003/0004, 0005, 0006, 0007)"),
    ("fa-off:iq4_nl/iq4_nl", "quantized K and V without FA, non-linear 4-bit"),
    ("fa-off:q4_0/f16", "quantized K only (0005, 0006, 0007)"),
    ("fa-off:f16/q4_0", "quantized V only (0002, 0003/0004)"),
    ("fa-off:q4_0/q4_0+deq", "quantized V through 0002's dequantize + mul_mat"),
    ("fa-off:q4_0/q4_0+ungrouped", "quantized K^T q broadcast over GQA heads (0005 off)"),
)
CUDA_ONLY_MODES = (("fa-off:q4_0/q4_0+mmq", "quantized K prefill on MMQ (0007 off)"),)
# on AMD, FA over a quantized cache may go to CK (staged as F16); elsewhere it is the calibration itself (below)
HIP_ONLY_MODES = (
    ("fa-on:q8_0/q8_0", "FA over a quantized cache: CK's if built (staged as F16), else the calibration's kernels"),
    ("fa-on:q4_0/q4_0", "FA over a quantized cache: CK's if built (staged as F16), else the calibration's kernels"),
)
# on a GPU, upstream's FA over this K/V pair, CK off: the calibration of rounding noise and the same-cache reference
UPSTREAM_VARIANT = "nock"


@dataclass(frozen=True)
class PathResult:
    device: str
    mode: str
    shape: str
    what: str
    prefill_error: float
    decode_error: float
    noise: float  # this device's FA-off f16 (and upstream FA over this K/V pair, on a GPU) against the CPU
    bound: float
    same_cache_error: float | None = None  # against upstream's FA on this device over the same cache (GPU)
    same_cache_bound: float | None = None

    @property
    def passed(self) -> bool:
        errors = [self.prefill_error, self.decode_error]
        if self.same_cache_error is not None:
            errors.append(self.same_cache_error)
        if not np.isfinite(errors).all() or max(self.prefill_error, self.decode_error) > self.bound:
            return False
        if self.same_cache_error is None:
            return True
        assert self.same_cache_bound is not None  # set together with same_cache_error
        return self.same_cache_error <= self.same_cache_bound


def relative_error(got: np.ndarray, ref: np.ndarray) -> float:
    """||got - ref|| / ||ref - mean||: the logit error relative to the logits' own spread."""
    spread = np.linalg.norm(ref - ref.mean(axis=-1, keepdims=True))
    return float(np.linalg.norm(got.astype(np.float64) - ref) / spread) if spread else float("inf")


def path_logits(model_path: Path, mode: Mode, n_gpu_layers: int, tokens: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(prefill logits of every prompt token, logits after each of the following single-token decode steps)."""
    mode.apply_environment()
    try:
        with Model(model_path, ctk=mode.ctk, ctv=mode.ctv, flash_attn=mode.flash_attn, n_ctx=512,
                   n_gpu_layers=n_gpu_layers, n_threads=None, attention_paths=mode.attention_paths) as m:
            prefill = m.logits(tokens[:N_PREFILL])
            steps = []
            for token in tokens[N_PREFILL:]:
                m.eval([token])
                steps.append(m.last_logits())
            return prefill, np.array(steps)
    finally:
        Mode("off", "f16", "f16").apply_environment()  # no variant switch left set


References = dict[tuple[str, str, str], tuple[np.ndarray, np.ndarray]]  # (shape, ctk, ctv) -> logits


def shape_inputs(shape_name: str) -> tuple[Path, list[int]]:
    model_path = synthetic_model(GQA_SHAPES[shape_name], weight_type="f16")
    tokens = np.random.default_rng(1).integers(10, GQA_SHAPES[shape_name].n_vocab, size=N_PREFILL + N_DECODE)
    return model_path, tokens.tolist()


def reference_logits(shapes: tuple[str, ...], kv_pairs: set[tuple[str, str]]) -> References:
    """The CPU's FA-on logits for every shape and K/V pair (f16/f16 always: the noise pair's reference)."""
    refs: References = {}
    for shape_name in shapes:
        model_path, tokens = shape_inputs(shape_name)
        for ctk, ctv in sorted(kv_pairs | {("f16", "f16")}):
            refs[shape_name, ctk, ctv] = path_logits(model_path, Mode("on", ctk, ctv), 0, tokens)
    return refs


def _error(got: tuple[np.ndarray, np.ndarray], ref: tuple[np.ndarray, np.ndarray]) -> tuple[float, float]:
    return relative_error(got[0], ref[0]), relative_error(got[1], ref[1])


def check_device(device: str, n_gpu_layers: int, modes: tuple[tuple[str, str], ...], references: References,
                 shapes: tuple[str, ...] = CHECK_SHAPES, noise_factor: float = NOISE_FACTOR,
                 progress: TextIO | None = None) -> list[PathResult]:
    on_gpu = n_gpu_layers != 0
    results = []
    for shape_name in shapes:
        model_path, tokens = shape_inputs(shape_name)
        f16_noise = max(_error(path_logits(model_path, Mode.parse(NOISE_MODE), n_gpu_layers, tokens),
                               references[shape_name, "f16", "f16"]))
        tight_bound = noise_factor * max(f16_noise, MIN_NOISE)
        upstream: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
        for text, what in modes:
            mode = Mode.parse(text)
            if mode.flash_attn == "on" and not on_gpu:
                continue  # that is the reference itself
            kv = (mode.ctk, mode.ctv)
            ref = references[shape_name, mode.ctk, mode.ctv]
            got = path_logits(model_path, mode, n_gpu_layers, tokens)
            noise, same_cache_error, same_cache_bound = f16_noise, None, None
            if on_gpu and kv != ("f16", "f16"):
                if kv not in upstream:
                    upstream[kv] = path_logits(model_path, Mode("on", *kv, UPSTREAM_VARIANT), n_gpu_layers, tokens)
                noise = max(f16_noise, *_error(upstream[kv], ref))
                same_cache_error, same_cache_bound = max(_error(got, upstream[kv])), tight_bound
            prefill_error, decode_error = _error(got, ref)
            result = PathResult(device, text, shape_name, what, prefill_error, decode_error, noise,
                                noise_factor * max(noise, MIN_NOISE), same_cache_error, same_cache_bound)
            if progress:
                same = ("" if same_cache_error is None
                        else f", same cache {same_cache_error:.2e} (bound {tight_bound:.2e})")
                print(f"{device} {shape_name} {text}: prefill {prefill_error:.2e} decode {decode_error:.2e} (bound "
                      f"{result.bound:.2e}){same} {'ok' if result.passed else 'FAIL'}", file=progress, flush=True)
            results.append(result)
    return results


def kv_pairs_of(modes: tuple[tuple[str, str], ...]) -> set[tuple[str, str]]:
    return {(m.ctk, m.ctv) for m in (Mode.parse(text) for text, _ in modes)}
