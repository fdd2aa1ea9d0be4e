"""Two sequences in one context with a stream each (n_seq_max=2, kv_unified off): the CPU in-place V op
(patch 0003) then sees n_stream = 2. Each sequence must decode as it does alone."""
from __future__ import annotations

import numpy as np

import pyllama90a as pl
from support.two_streams import decode_alone, decode_together

PROMPTS = ["The capital of France is", "Once upon a time, in a small village, there lived"]
N_STEPS = 5


def test_two_streams_decode_like_one(model_path) -> None:
    with pl.Model(model_path, n_ctx=256) as tok:
        prompts = [tok.tokenize(p) for p in PROMPTS]
    alone = [decode_alone(model_path, p, N_STEPS, ctk="q4_0", ctv="q4_0") for p in prompts]
    together = decode_together(model_path, prompts, [tokens for _, tokens in alone], ctk="q4_0", ctv="q4_0")
    for (ref, _), got in zip(alone, together, strict=True):
        assert got.shape == ref.shape == (N_STEPS + 1, ref.shape[1])
        # same greedy choices, and logits equal up to rounding amplified by re-quantized caches
        assert (got.argmax(axis=1) == ref.argmax(axis=1)).all()
        spread = np.abs(ref - ref.mean(axis=1, keepdims=True)).max()
        assert np.abs(got - ref).max() <= 0.05 * spread
