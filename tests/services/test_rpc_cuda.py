"""A CUDA worker (issue 22): `python -m pyllama90a.worker --device CUDA0` on this host serves its GPU, and the main
process keeps the first layers on its CPU. Split so, a model gives the greedy tokens and logits of the same split in
one process (the GPU local), for FA off, on and hybrid; the remote GPU runs the quantized attention paths (nodes in
the worker's buffers), and the hybrid mode's fused decode, which a device offers through its own backend registry,
falls back to the non-flash decode on an RPC device instead of failing."""
from __future__ import annotations

import numpy as np
import pytest

import pyllama90a as pl
from pyllama90a.core.model.attention_paths import AttentionPaths
from pyllama90a.tools.synthetic import Shape, synthetic_model
from pyllama90a.tools.worker_process import WorkerProcess
from support.gpu import gpu_device, requires_gpu
from support.graph_probe import phase_nodes
from support.native_lines import buffer_mib, native_info_lines

pytestmark = requires_gpu

SHAPE = Shape("test-rpc-cuda", n_embd=256, n_layer=4, n_head=4, n_head_kv=2, n_ff=512, n_vocab=512)
# the last 2 blocks and the output layer offloaded, the first 2 blocks on the main process's CPU
N_GPU_LAYERS = 3
# ubatches under 32 tokens: the scheduler then never offloads a CPU layer's product to the GPU, so both runs
# compute each layer on the same device
SETTINGS = {"n_ctx": 512, "n_batch": 16, "n_ubatch": 16, "n_threads": 4,
            "n_gpu_layers": N_GPU_LAYERS}
PROMPT = [1, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310]
N_STEPS = 16


@pytest.fixture(scope="module")
def model_file():
    return synthetic_model(SHAPE, weight_type="f16")


@pytest.fixture(scope="module")
def cuda_worker():
    with WorkerProcess(threads=4, extra=("--device", gpu_device())) as worker:
        yield worker


def _greedy(model: pl.Model) -> tuple[list[int], np.ndarray]:
    model.eval(PROMPT)
    tokens, logits = [], []
    for _ in range(N_STEPS):
        row = model.last_logits()
        logits.append(row)
        tokens.append(int(np.argmax(row)))
        model.eval(tokens[-1:])
    return tokens, np.array(logits)


@pytest.mark.parametrize(("flash_attn", "kv"), [("off", "f16"), ("off", "q4_0"), ("on", "q4_0"),
                                               ("hybrid", "q4_0")])
def test_a_split_over_a_cuda_worker_gives_the_local_split(model_file, cuda_worker, flash_attn, kv):
    """The greedy tokens are the local split's. The logits: within 1e-4 of their spread over an f16 cache (H200,
    2026-12-02: passed); over q4_0 within a tenth of it (measured 0.061): a rounding difference between the two
    processes' GPU work (not traced further) can move a K or V value's 4-bit code by a whole step, and each such
    step moves the later logits. A layer computed wrongly, or on the wrong device's data, is off by the spread."""
    # (default attention paths: hybrid's decode is the non-flash path in both runs, see the test below)
    with pl.Model(model_file, flash_attn=flash_attn, ctk=kv, ctv=kv, **SETTINGS) as local:
        want_tokens, want_logits = _greedy(local)
    with native_info_lines() as lines:  # the worker's GPU is device 0 (workers' devices come first)
        split = pl.Model(model_file, flash_attn=flash_attn, ctk=kv, ctv=kv, rpc=[cuda_worker.endpoint],
                         split_mode="none", main_gpu=0, **SETTINGS)
    with split:
        got_tokens, got_logits = _greedy(split)
    weights, kv = buffer_mib(lines, "model"), buffer_mib(lines, "KV")
    remote = f"RPC0[{cuda_worker.endpoint}]"
    assert weights.get(remote, 0) > 0 and kv.get(remote, 0) > 0 and not any(b.startswith("CUDA") for b in weights)
    assert got_tokens == want_tokens
    spread = float(np.abs(want_logits - want_logits.mean(axis=-1, keepdims=True)).max())
    assert np.abs(got_logits - want_logits).max() <= (1e-4 if kv == "f16" else 0.1) * spread


def test_the_remote_gpu_runs_the_quantized_decode_paths(model_file, cuda_worker):
    """Hybrid q4_0 with the fused kernel asked for: prefill's FLASH_ATTN_EXT and decode's non-flash path (OUT_PROD
    over the q4_0 V cache) both run in the worker's buffers for the offloaded layers; the fused kernel is not
    reachable through ggml-rpc, so no decode node carries its mark."""
    prefill, decode = phase_nodes(model_file, PROMPT, ctk="q4_0", ctv="q4_0", flash_attn="hybrid", n_ctx=512,
                                  n_gpu_layers=N_GPU_LAYERS, paths=AttentionPaths(fused_decode=True),
                                  rpc=[cuda_worker.endpoint])
    offloaded = N_GPU_LAYERS - 1
    remote = f"RPC0[{cuda_worker.endpoint}]"
    assert sum(n.op == "FLASH_ATTN_EXT" and n.buffer == remote for n in prefill) == offloaded
    out_prods = [n for n in decode if n.op == "OUT_PROD"]
    assert len(out_prods) == SHAPE.n_layer and sum(n.buffer == remote for n in out_prods) == offloaded
    assert not any(n.op == "FLASH_ATTN_EXT" for n in decode)
