"""kv_bytes from the GGUF header equals what llama.cpp allocates (max_n_ctx: test_memory_plan.py)."""
from __future__ import annotations

import pytest

import pyllama90a as pl
from pyllama90a.tools.synthetic import Shape, synthetic_model


@pytest.mark.parametrize("n_ctx,ctk,ctv", [(512, "f16", "f16"), (1000, "q4_0", "q4_0"), (2048, "q8_0", "iq4_nl"),
                                           (300, "bf16", "q5_1")])
def test_kv_bytes_equals_the_loaded_model(model_path, n_ctx: int, ctk: str, ctv: str) -> None:
    predicted = pl.kv_bytes(model_path, n_ctx, ctk, ctv)
    with pl.Model(model_path, n_ctx=n_ctx, ctk=ctk, ctv=ctv, flash_attn="off") as m:
        real = m.kv_cache
    assert (predicted.n_ctx, predicted.k_bytes, predicted.v_bytes) == (real.n_ctx, real.k_bytes, real.v_bytes)


def test_kv_bytes_for_head_dim_128() -> None:
    path = synthetic_model(Shape("kvb-hd128", n_embd=512, n_layer=2, n_head=4, n_head_kv=2, n_ff=512, n_vocab=512),
                           weight_type="f16")
    with pl.Model(path, n_ctx=700, ctk="q8_0", ctv="q4_0", flash_attn="off") as m:
        real = m.kv_cache
    assert pl.kv_bytes(path, 700, "q8_0", "q4_0").total_bytes == real.total_bytes


def test_q4_0_is_0_28x_f16(model_path) -> None:
    assert pl.kv_bytes(model_path, 65536, "q4_0", "q4_0").total_bytes * 64 == \
        pl.kv_bytes(model_path, 65536).total_bytes * 18


def test_bad_arguments(model_path, tmp_path) -> None:
    with pytest.raises(pl.InvalidArgumentError):
        pl.kv_bytes(model_path, 0)
    with pytest.raises(pl.InvalidArgumentError, match="unknown V cache type"):
        pl.kv_bytes(model_path, 512, "f16", "q9")
    with pytest.raises(pl.ModelFormatError, match="no such file"):
        pl.kv_bytes(tmp_path / "missing.gguf", 512)
