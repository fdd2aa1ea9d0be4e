"""Placement on one GPU (issue 23's part that one GPU allows): split_mode, main_gpu and n_gpu_layers reach
llama.cpp, seen in the buffers it reports per device; with the quantized K/V cache of each layer where the layer
is; and a partial offload's logits agree with the whole one's (CPU and GPU kernels round differently)."""
from __future__ import annotations

import numpy as np
import pytest

import pyllama90a as pl
from pyllama90a.tools.synthetic import Shape, synthetic_model
from support.gpu import gpu_device, requires_gpu
from support.native_lines import buffer_mib, native_info_lines

pytestmark = requires_gpu

SHAPE = Shape("placement-8l", n_embd=512, n_layer=8, n_head=8, n_head_kv=2, n_ff=1024, n_vocab=2048)
SETTINGS = {"ctk": "q4_0", "ctv": "q4_0", "flash_attn": "off", "n_ctx": 1024}


@pytest.fixture(scope="module")
def model_file():
    return synthetic_model(SHAPE, weight_type="q4_0")


PROMPT = [(7 * i + 3) % SHAPE.n_vocab for i in range(48)]


def _buffers(model_file, **placement) -> tuple[dict[str, float], dict[str, float], np.ndarray]:
    with native_info_lines() as lines, pl.Model(model_file, **SETTINGS, **placement) as m:
        logits = m.logits(PROMPT)[-1]
    return buffer_mib(lines, "model"), buffer_mib(lines, "KV"), logits


def test_every_layer_and_its_kv_cache_on_the_gpu(model_file):
    gpu = gpu_device()
    weights, kv, _ = _buffers(model_file, n_gpu_layers=-1, split_mode="none", main_gpu=0)
    assert weights.get(gpu, 0) > 3 * weights.get("CPU_Mapped", weights.get("CPU", 0)), weights
    assert set(kv) == {gpu}, kv


def test_a_partial_offload_splits_weights_and_kv_cache_by_layer_and_computes_the_same(model_file):
    gpu = gpu_device()
    _, _, whole = _buffers(model_file, n_gpu_layers=-1)
    n_gpu_layers = SHAPE.n_layer // 2
    weights, kv, half = _buffers(model_file, n_gpu_layers=n_gpu_layers)
    # llama.cpp counts the output layer among n_gpu_layers: the last n_gpu_layers - 1 blocks go to the GPU, each
    # with its K and V
    offloaded = (n_gpu_layers - 1) / SHAPE.n_layer
    assert kv[gpu] / (kv[gpu] + kv["CPU"]) == pytest.approx(offloaded, abs=0.02), kv
    assert weights[gpu] > 0 and weights.get("CPU_Mapped", weights.get("CPU", 0)) > 0, weights
    assert np.abs(half - whole).max() < 3e-2 * (whole.max() - whole.min())


def test_main_gpu_beyond_the_one_gpu_is_refused(model_file):
    with pytest.raises(pl.InvalidArgumentError, match="main_gpu=1 names a device that does not exist") as e:
        pl.Model(model_file, split_mode="none", main_gpu=1, **SETTINGS)
    assert e.value.param == "main_gpu"
    with pytest.raises(pl.InvalidArgumentError, match="tensor_split has 2 shares, but the model has 1 device"):
        pl.Model(model_file, tensor_split=[1, 1], **SETTINGS)
