"""Two sequences in one context with a stream each (n_seq_max=2, kv_unified off): the CPU in-place V op
(patch 0003) then sees n_stream = 2. Each sequence must decode as it does alone. This drives llama.cpp
directly through the bindings, as the server's engine will."""
from __future__ import annotations

import numpy as np

import pyllama90a as pl
from pyllama90a._ffi import ffi, lib

PROMPTS = ["The capital of France is", "Once upon a time, in a small village, there lived"]
N_STEPS = 5


def _alone(model_path, prompt: str) -> np.ndarray:
    with pl.Model(model_path, ctk="q4_0", ctv="q4_0", flash_attn="off", n_ctx=512, n_threads=2) as m:
        m.eval(m.tokenize(prompt))
        rows = [m.last_logits()]
        for _ in range(N_STEPS):
            m.eval([int(rows[-1].argmax())])
            rows.append(m.last_logits())
    return np.array(rows)


def _together(model_path) -> list[np.ndarray]:
    with pl.Model(model_path, n_ctx=256) as tok:
        prompts = [tok.tokenize(p) for p in PROMPTS]
    model = lib.llama_model_load_from_file(str(model_path).encode(), lib.llama_model_default_params())
    assert model != ffi.NULL
    cparams = lib.llama_context_default_params()
    cparams.n_ctx, cparams.n_seq_max, cparams.kv_unified = 1024, 2, False
    cparams.type_k = cparams.type_v = lib.GGML_TYPE_Q4_0
    cparams.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
    cparams.n_threads = cparams.n_threads_batch = 2
    ctx = lib.llama_init_from_model(model, cparams)
    batch = lib.llama_batch_init(64, 0, 1)
    n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model))
    try:
        assert ctx != ffi.NULL

        def decode(items: list[tuple[int, int, int, bool]]) -> list[np.ndarray]:
            """items: (token, position, sequence, wants logits); returns the logits asked for, in order."""
            batch.n_tokens = len(items)
            for i, (token, pos, seq, out) in enumerate(items):
                batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, pos, 1, out
                batch.seq_id[i][0] = seq
            assert lib.llama_decode(ctx, batch) == 0
            rows = [i for i, item in enumerate(items) if item[3]]
            return [np.frombuffer(ffi.buffer(lib.llama_get_logits_ith(ctx, i), 4 * n_vocab), np.float32).copy()
                    for i in rows]

        items = [(t, pos, seq, pos == len(p) - 1) for seq, p in enumerate(prompts) for pos, t in enumerate(p)]
        rows = [[r] for r in decode(items)]
        for _ in range(N_STEPS):
            step = [(int(rows[seq][-1].argmax()), len(prompts[seq]) + len(rows[seq]) - 1, seq, True)
                    for seq in range(2)]
            for seq, r in enumerate(decode(step)):
                rows[seq].append(r)
        return [np.array(r) for r in rows]
    finally:
        lib.llama_batch_free(batch)
        if ctx != ffi.NULL:
            lib.llama_free(ctx)
        lib.llama_model_free(model)


def test_two_streams_decode_like_one(model_path) -> None:
    together = _together(model_path)
    for seq, prompt in enumerate(PROMPTS):
        alone = _alone(model_path, prompt)
        assert together[seq].shape == alone.shape
        # same greedy continuation, and logits equal up to rounding amplified by re-quantized caches
        assert (together[seq].argmax(axis=1) == alone.argmax(axis=1)).all()
        spread = np.abs(alone - alone.mean(axis=1, keepdims=True)).max()
        assert np.abs(together[seq] - alone).max() <= 0.05 * spread
