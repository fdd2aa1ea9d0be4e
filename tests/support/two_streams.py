"""Several sequences decoded in one context, a KV stream each (n_seq_max = number of sequences, kv_unified off),
against each sequence decoded alone: the attention ops then see n_stream > 1 in one ubatch. This drives
llama.cpp directly through the bindings, as the server's engine does."""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

import pyllama90a as pl
from pyllama90a.native._ffi import ffi, lib
from pyllama90a.native.ggml import ggml_type


def decode_items(ctx: Any, batch: Any, n_vocab: int, items: list[tuple[int, int, int, bool]]) -> list[np.ndarray]:
    """One llama_decode of items (token, position, sequence, wants logits) through a raw context and batch; returns
    the logits asked for, in order."""
    batch.n_tokens = len(items)
    for i, (token, pos, seq, out) in enumerate(items):
        batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, pos, 1, out
        batch.seq_id[i][0] = seq
    assert lib.llama_decode(ctx, batch) == 0
    return [np.frombuffer(ffi.buffer(lib.llama_get_logits_ith(ctx, i), 4 * n_vocab), np.float32).copy()
            for i, item in enumerate(items) if item[3]]


def decode_alone(model_path: Path, prompt: list[int], n_steps: int, *, ctk: str, ctv: str,
                 n_gpu_layers: int = -1) -> tuple[np.ndarray, list[int]]:
    """Logits after the prompt and after each of n_steps greedy tokens, and those tokens."""
    with pl.Model(model_path, ctk=ctk, ctv=ctv, flash_attn="off", n_ctx=512, n_threads=2,
                  n_gpu_layers=n_gpu_layers) as m:
        m.eval(prompt)
        rows, tokens = [m.last_logits()], []
        for _ in range(n_steps):
            tokens.append(int(rows[-1].argmax()))
            m.eval(tokens[-1:])
            rows.append(m.last_logits())
    return np.array(rows), tokens


def decode_together(model_path: Path, prompts: list[list[int]], continuations: list[list[int]], *, ctk: str,
                    ctv: str, n_gpu_layers: int = -1) -> list[np.ndarray]:
    """All prompts in one batch, then one token of each sequence's continuation per step (all sequences in
    one batch again); logits after each prompt and each step, per sequence."""
    n_seq = len(prompts)
    mparams = lib.llama_model_default_params()
    mparams.n_gpu_layers = n_gpu_layers
    model = lib.llama_model_load_from_file(str(model_path).encode(), mparams)
    assert model != ffi.NULL
    cparams = lib.llama_context_default_params()
    cparams.n_ctx, cparams.n_seq_max, cparams.kv_unified = 512 * n_seq, n_seq, False
    cparams.type_k, cparams.type_v = ggml_type(ctk), ggml_type(ctv)
    cparams.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
    cparams.n_threads = cparams.n_threads_batch = 2
    ctx = lib.llama_init_from_model(model, cparams)
    batch = lib.llama_batch_init(sum(map(len, prompts)) + n_seq, 0, 1)
    n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model))
    try:
        assert ctx != ffi.NULL

        decode = functools.partial(decode_items, ctx, batch, n_vocab)

        items = [(t, pos, seq, pos == len(p) - 1) for seq, p in enumerate(prompts) for pos, t in enumerate(p)]
        rows = [[r] for r in decode(items)]
        for step in range(len(continuations[0])):
            items = [(continuations[seq][step], len(prompts[seq]) + step, seq, True) for seq in range(n_seq)]
            for seq, r in enumerate(decode(items)):
                rows[seq].append(r)
        return [np.array(r) for r in rows]
    finally:
        lib.llama_batch_free(batch)
        if ctx != ffi.NULL:
            lib.llama_free(ctx)
        lib.llama_model_free(model)
