"""plan_memory: llama.cpp's simulated allocations equal what a loaded Model reserves, per attention path; and
max_n_ctx, which counts the compute buffers with them."""
from __future__ import annotations

import pytest

import pyllama90a as pl
from pyllama90a.native import ContextHandle, ContextParams, ModelHandle
from pyllama90a.tools.synthetic import Shape, synthetic_model
from support.gpu import on_gpu

MODES = [("off", "q4_0"), ("off", "f16"), ("on", "q4_0"), ("hybrid", "q4_0"), ("auto", "q4_0")]


@pytest.mark.parametrize("flash_attn,kv", MODES)
def test_the_plan_equals_the_loaded_model(model_path, flash_attn: str, kv: str) -> None:
    settings = {"n_ctx": 3000, "ctk": kv, "ctv": kv, "flash_attn": flash_attn, "n_ubatch": 256}
    plan = pl.plan_memory(model_path, **settings)
    with pl.Model(model_path, **settings) as m:
        assert plan.cache == m.kv_cache
        assert plan.cache.compute_bytes == m.compute_buffer_bytes > 0
        assert plan.attention == m.attention
        assert plan.weights_bytes == m.handle.weights_bytes > 50 * 2**20


def test_the_non_flash_compute_buffer_grows_with_the_context_and_fa_s_does_not(model_path) -> None:
    def compute(flash_attn: str, n_ctx: int) -> int:
        plan = pl.plan_memory(model_path, n_ctx=n_ctx, ctk="q4_0", ctv="q4_0", flash_attn=flash_attn)
        return plan.cache.compute_bytes

    assert compute("off", 32768) > 4 * compute("off", 4096)  # n_ctx x n_ubatch scores per head
    assert compute("on", 32768) < 1.5 * compute("on", 4096)
    assert compute("hybrid", 32768) < 1.5 * compute("on", 32768)


@pytest.mark.parametrize("flash_attn", ["off", "on"])
def test_max_n_ctx_counts_the_compute_buffer(model_path, flash_attn: str) -> None:
    budget = 100 * 2**20
    n = pl.max_n_ctx(model_path, budget, "q4_0", "q4_0", flash_attn=flash_attn)
    assert n > 0 and n % 256 == 0

    def memory(n_ctx: int) -> int:
        return pl.plan_memory(model_path, n_ctx=n_ctx, ctk="q4_0", ctv="q4_0", flash_attn=flash_attn).cache.memory_bytes

    assert memory(n) <= budget < memory(n + 256)
    if flash_attn == "off":  # K and V alone would allow far more: the scores' buffer is what limits it
        assert pl.kv_bytes(model_path, 2 * n, "q4_0", "q4_0").total_bytes < budget
    assert pl.max_n_ctx(model_path, 0, "q4_0", "q4_0", flash_attn=flash_attn) == 0


def test_max_n_ctx_with_several_sequences_starts_at_their_smallest_n_ctx(model_path) -> None:
    # the bisection tried n_ctx under 256 cells a sequence and raised about an n_ctx the caller never gave
    def memory(n_ctx: int) -> int:
        return pl.plan_memory(model_path, n_ctx=n_ctx, n_seq_max=4).cache.memory_bytes

    assert pl.max_n_ctx(model_path, memory(1024), n_seq_max=4) == 1024
    assert pl.max_n_ctx(model_path, memory(1024) - 1, n_seq_max=4) == 0
    assert pl.max_n_ctx(model_path, memory(2048), n_seq_max=4) == 2048


def test_plans_are_bounded_in_host_memory(model_path) -> None:
    # a simulated context keeps llama.cpp's bookkeeping of its cells: n_ctx 1e8 took 4.9 GiB, and max_n_ctx of a
    # 2**45-byte budget ended the process (OOM); 2**70 was a ContextError (std::bad_alloc)
    from pyllama90a.core.model.memory_plan import MAX_PLAN_N_CTX

    with pytest.raises(pl.InvalidArgumentError, match="simulates n_ctx up to 16777216"):
        pl.plan_memory(model_path, n_ctx=10**8)
    assert pl.max_n_ctx(model_path, 2**70, "q4_0", "q4_0", flash_attn="on") == MAX_PLAN_N_CTX


def test_a_plan_refuses_what_a_model_refuses(model_path) -> None:
    with pytest.raises(pl.InvalidArgumentError, match="unknown V cache type"):
        pl.plan_memory(model_path, ctv="q9")
    with pytest.raises(pl.InvalidArgumentError, match="max_n_ctx finds n_ctx"):
        pl.max_n_ctx(model_path, 2**30, n_ctx=1024)


def test_a_simulated_context_cannot_decode(model_path) -> None:
    context = ContextHandle(ModelHandle(model_path, simulate=True), ContextParams(n_ctx=512))
    try:
        with pytest.raises(pl.LlamaError, match="simulated"):
            context.decode_tokens([1, 2, 3])
    finally:
        context.close()


@on_gpu
@pytest.mark.parametrize("flash_attn", ["off", "on", "hybrid", "auto"])
def test_the_plan_equals_the_loaded_model_on_the_gpu(flash_attn: str) -> None:
    path = synthetic_model(Shape("plan-gpu", n_embd=512, n_layer=4, n_head=8, n_head_kv=2, n_ff=1024, n_vocab=2048))
    settings = {"n_ctx": 8192, "ctk": "q4_0", "ctv": "q4_0", "flash_attn": flash_attn, "n_gpu_layers": -1}
    plan = pl.plan_memory(path, **settings)
    with pl.Model(path, **settings) as m:
        assert (plan.cache, plan.attention) == (m.kv_cache, m.attention)
