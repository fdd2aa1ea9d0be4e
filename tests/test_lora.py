"""LoRA adapters (issue 21, item 4) on the real library: a LoRA GGUF written for the synthetic tiny model
(pyllama90a.synthetic.write_synthetic_lora) changes the logits exactly as merging it into the weights by hand
does (W + s * alpha / rank * B @ A, computed with numpy, written as a second f32 model); scale 0 is the base
model; bad files and scales are LoraAdapterErrors saying why."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import pyllama90a as pl
from pyllama90a.errors import LoraAdapterError
from pyllama90a.synthetic import BOS_ID, GQA_SHAPES, write_synthetic, write_synthetic_lora

SHAPE, RANK, ALPHA = "tiny", 4, 8.0
# weight matrices of attention (Q, V), the feed-forward and the output projection
TARGETS = ("blk.0.attn_q.weight", "blk.1.attn_v.weight", "blk.2.ffn_down.weight", "output.weight")
PROMPT = [BOS_ID, 300, 301, 302, 310, 400, 450, 500, 270, 333]
# exact comparisons: f32 weights and KV, standard attention
EXACT = {"n_ctx": 256, "ctk": "f32", "ctv": "f32", "flash_attn": "off", "n_threads": 2}
TOLERANCE = 5e-4  # max abs logit difference between the adapter and the merged weights (float sums' order)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("lora")
    base = write_synthetic(SHAPE, d / "base.gguf", weight_type="f32")
    pairs = write_synthetic_lora(SHAPE, d / "a.gguf", TARGETS, rank=RANK, alpha=ALPHA, seed=1)
    write_synthetic_lora(SHAPE, d / "b.gguf", TARGETS[1:], rank=2, alpha=4.0, seed=2)
    return {"dir": d, "base": base, "a": d / "a.gguf", "b": d / "b.gguf", "pairs": pairs}


def _merged(files: dict, scale: float) -> Path:
    """The base model with adapter a merged into its weights at `scale`, by numpy."""
    pairs = files["pairs"]

    def merge(name: str, w: np.ndarray) -> np.ndarray:
        if name not in pairs:
            return w
        a, b = pairs[name]
        return w + np.float32(scale * ALPHA / RANK) * (b @ a)
    return write_synthetic(SHAPE, files["dir"] / f"merged-{scale}.gguf", weight_type="f32", adjust=merge)


def _logits(path: Path, lora=()) -> np.ndarray:
    with pl.Model(path, lora=lora, **EXACT) as m:
        return m.logits(PROMPT)


@pytest.mark.parametrize("scale", [1.0, -0.5])
def test_adapter_logits_equal_merged_weights(files, scale) -> None:
    adapted = _logits(files["base"], [(files["a"], scale)])
    merged = _logits(_merged(files, scale))
    base = _logits(files["base"])
    assert np.abs(adapted - merged).max() < TOLERANCE
    assert np.abs(adapted - base).max() > 100 * TOLERANCE  # (the adapter's effect is far above the tolerance)


def test_scale_zero_is_the_base_model(files) -> None:
    assert np.array_equal(_logits(files["base"], [(files["a"], 0.0)]), _logits(files["base"]))


def test_model_reports_its_adapters(files) -> None:
    with pl.Model(files["base"], lora=[(files["a"], 0.5), files["b"]], **EXACT) as m:
        assert [(i.id, i.path, i.scale) for i in m.lora] == [(0, files["a"], 0.5), (1, files["b"], 1.0)]
    with pl.Model(files["base"], **EXACT) as m:
        assert list(m.lora) == []


def _bad_file(files: dict, kind: str) -> Path:
    d = files["dir"]
    if kind == "architecture":
        write_synthetic_lora(SHAPE, d / "qwen.gguf", TARGETS, architecture="qwen2")
        return d / "qwen.gguf"
    if kind == "alora":
        write_synthetic_lora(SHAPE, d / "alora.gguf", TARGETS, extra={"adapter.alora.invocation_tokens": [300, 301]})
        return d / "alora.gguf"
    if kind == "not-gguf":
        (d / "text.gguf").write_text("not gguf at all, just some text")
        return d / "text.gguf"
    return files["base"]  # a model, not an adapter


@pytest.mark.parametrize("kind, message", [
    ("architecture", r"architecture 'qwen2', but the model's is 'llama'"),
    ("alora", r"is an activated LoRA \(aLoRA"),
    ("a-model", r"is not a LoRA adapter: its general.type is None"),
    ("not-gguf", r"not a GGUF file"),
])
def test_bad_adapter_files_are_refused_before_loading(files, kind, message) -> None:
    with pytest.raises(LoraAdapterError, match=message) as e:
        pl.Model(files["base"], lora=[(_bad_file(files, kind), 1.0)], **EXACT)
    assert e.value.param == "lora"
    assert not e.value.native_log  # (refused by pyllama90a: llama.cpp never read it)


def test_an_adapter_of_other_dimensions_is_refused_by_llama_cpp(files) -> None:
    other = files["dir"] / "wide.gguf"
    write_synthetic_lora(GQA_SHAPES["gqa4-hd64"], other, ("blk.0.attn_q.weight",))  # n_embd 512 against tiny's 256
    with pytest.raises(LoraAdapterError, match="could not load the LoRA adapter") as e:
        pl.Model(files["base"], lora=[(other, 1.0)], **EXACT)
    assert any("incorrect shape" in line for line in e.value.native_log)


@pytest.mark.parametrize("lora, message", [
    ("a.gguf", "list of \\(path, scale\\) pairs"),
    ([("X", float("nan"))], "finite number"),
    ([("X", "1")], "finite number"),
    ([("X", 1.0, 2.0)], r"lora\[0\] must be a \(path, scale\) pair"),
])
def test_bad_lora_arguments(files, lora, message) -> None:
    lora = lora if isinstance(lora, str) else [(files["a"], *spec[1:]) for spec in lora]
    with pytest.raises(LoraAdapterError, match=message):
        pl.Model(files["base"], lora=lora, **EXACT)
