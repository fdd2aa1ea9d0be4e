"""Attention paths checked against a CPU reference.

A path is (device, flash_attn, K type, V type, variant); its reference is the CPU backend with flash attention ON
and the same K/V types: upstream's CPU FA kernel reads quantized K and V itself, so reference and path hold the
same cache contents and differ only in the attention algorithm. The bound is relative to the noise between two
algorithms nobody patched: CPU FA-on f16 against this device's FA-off f16 (measured on CPU: about 1.2e-2 relative
logit error; our quantized paths vs CPU FA-on: 1e-3 to 6e-3).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..bench import Mode
from ..model import Model
from ..synthetic import GQA_SHAPES, synthetic_model

CHECK_SHAPES = ("gqa1-hd64", "gqa4-hd128", "gqa8-hd128")  # GQA 1/4/8, head dims 64/128
N_PREFILL, N_DECODE = 300, 6  # a prefill past 256 cells (not a multiple of 256), then decode steps
NOISE_FACTOR = 3.0
# where two algorithms agree closer than this, rounding in a quantized cache may still differ by about that much
MIN_NOISE = 3e-3

# the device side of the noise pair: upstream's standard attention
NOISE_MODE = "fa-off:f16/f16"
# (mode, what it exercises); FA-on modes are the reference on the CPU and are checked on other devices only
PATH_MODES = (
    ("fa-on:f16/f16", "upstream's flash attention"),
    ("fa-on:q8_0/q8_0", "upstream's flash attention over a quantized cache"),
    ("fa-on:q4_0/q4_0", "upstream's flash attention over a quantized cache"),
    ("fa-off:q8_0/q8_0", "quantized K and V without FA (0001, 0003/0005, 0006, 0007, 0008)"),
    ("fa-off:q4_0/q4_0", "quantized K and V without FA (0001, 0003/0005, 0006, 0007, 0008)"),
    ("fa-off:iq4_nl/iq4_nl", "quantized K and V without FA, non-linear 4-bit"),
    ("fa-off:q4_0/f16", "quantized K only (0006, 0007, 0008)"),
    ("fa-off:f16/q4_0", "quantized V only (0001, 0003/0005)"),
    ("fa-off:q4_0/q4_0+deq", "quantized V through 0001's dequantize + mul_mat"),
    ("fa-off:q4_0/q4_0+ungrouped", "quantized K^T q broadcast over GQA heads (0006 off)"),
)
CUDA_ONLY_MODES = (("fa-off:q4_0/q4_0+mmq", "quantized K prefill on MMQ (0008 off)"),)


@dataclass(frozen=True)
class PathResult:
    device: str
    mode: str
    shape: str
    what: str
    prefill_error: float
    decode_error: float
    noise: float  # this device's FA-off f16 against the CPU's FA-on f16
    bound: float

    @property
    def passed(self) -> bool:
        return bool(np.isfinite([self.prefill_error, self.decode_error]).all()) and max(
            self.prefill_error, self.decode_error) <= self.bound


def relative_error(got: np.ndarray, ref: np.ndarray) -> float:
    """||got - ref|| / ||ref - mean||: the logit error relative to the logits' own spread."""
    spread = np.linalg.norm(ref - ref.mean(axis=-1, keepdims=True))
    return float(np.linalg.norm(got.astype(np.float64) - ref) / spread) if spread else float("inf")


def path_logits(model_path: Path, mode: Mode, n_gpu_layers: int, tokens: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(prefill logits of every prompt token, logits after each of the following single-token decode steps)."""
    mode.apply_environment()
    try:
        with Model(model_path, ctk=mode.ctk, ctv=mode.ctv, flash_attn=mode.flash_attn, n_ctx=512,
                   n_gpu_layers=n_gpu_layers, n_threads=None) as m:
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


def check_device(device: str, n_gpu_layers: int, modes: tuple[tuple[str, str], ...], references: References,
                 shapes: tuple[str, ...] = CHECK_SHAPES, noise_factor: float = NOISE_FACTOR,
                 progress=None) -> list[PathResult]:  # noqa: ANN001
    results = []
    for shape_name in shapes:
        model_path, tokens = shape_inputs(shape_name)
        ref_pre, ref_dec = references[shape_name, "f16", "f16"]
        noise_pre, noise_dec = path_logits(model_path, Mode.parse(NOISE_MODE), n_gpu_layers, tokens)
        noise = max(relative_error(noise_pre, ref_pre), relative_error(noise_dec, ref_dec))
        bound = noise_factor * max(noise, MIN_NOISE)
        for text, what in modes:
            mode = Mode.parse(text)
            if mode.flash_attn == "on" and n_gpu_layers == 0:
                continue  # that is the reference itself
            got_pre, got_dec = path_logits(model_path, mode, n_gpu_layers, tokens)
            ref_pre, ref_dec = references[shape_name, mode.ctk, mode.ctv]
            result = PathResult(device, text, shape_name, what, relative_error(got_pre, ref_pre),
                                relative_error(got_dec, ref_dec), noise, bound)
            if progress:
                print(f"{device} {shape_name} {text}: prefill {result.prefill_error:.2e} decode "
                      f"{result.decode_error:.2e} (bound {bound:.2e}) {'ok' if result.passed else 'FAIL'}",
                      file=progress, flush=True)
            results.append(result)
    return results


def kv_pairs_of(modes: tuple[tuple[str, str], ...]) -> set[tuple[str, str]]:
    return {(m.ctk, m.ctv) for m in (Mode.parse(text) for text, _ in modes)}
