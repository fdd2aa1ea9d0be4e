"""Several sequences decoding together in one raw context (a KV stream each: n_seq_max = N, kv_unified off), as a
GPU server batches them, with the scheduler's eval callback recording the FLASH_ATTN_EXT nodes of the decode
steps: the batched-decode tests see which attention path the steps took (pyllama90a's marks) and their logits."""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from pyllama90a.core.model.attention_paths import AttentionPaths
from pyllama90a.native import ModelHandle
from pyllama90a.native._ffi import ffi, lib
from pyllama90a.native.ggml import ggml_type
from pyllama90a.native.kv_types import FLASH_ATTN_MODES
from support.two_streams import decode_items

N_BATCH = 512


def decode_streams(model_path: Path, prompts: list[list[int]], steps: list[list[int]], *, kv: str,
                   flash_attn: str, paths: AttentionPaths, n_gpu_layers: int = -1,
                   cells: int = 2048) -> tuple[list[np.ndarray], list[int]]:
    """Each prompt into its own sequence (batches of N_BATCH tokens), then per step one token of every sequence in
    one batch (steps[k][s]: sequence s's token at step k). Returns per sequence its logits after each step, shape
    (len(steps), n_vocab), and the marks of the FLASH_ATTN_EXT nodes the steps ran (pyllama90a's, in order)."""
    n_seq = len(prompts)
    marks: list[int] = []
    recording = [False]

    @ffi.callback("bool(struct ggml_tensor *, bool, void *)")
    def on_node(t, ask, _user):
        if ask and recording[0] and ffi.string(lib.ggml_op_desc(t)).decode() == "FLASH_ATTN_EXT":
            marks.append(lib.ggml_pyl_get_mark(t))
        return False

    model = ModelHandle(model_path, n_gpu_layers=n_gpu_layers)
    cparams = lib.llama_context_default_params()
    cparams.n_ctx, cparams.n_seq_max, cparams.kv_unified = cells * n_seq, n_seq, False
    cparams.n_batch = cparams.n_ubatch = N_BATCH
    cparams.type_k = cparams.type_v = ggml_type(kv)
    cparams.flash_attn_type = getattr(lib, FLASH_ATTN_MODES[flash_attn])
    cparams.n_threads = cparams.n_threads_batch = 2
    cparams.cb_eval = on_node
    ctx = lib.llama_init_from_model(model.ptr, cparams)
    batch = lib.llama_batch_init(N_BATCH, 0, 1)
    n_vocab = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(model.ptr))
    try:
        assert ctx != ffi.NULL
        params = lib.llama_pyl_attn_default_params()
        params.paths = paths.bits | (lib.LLAMA_PYL_ATTN_HYBRID if flash_attn == "hybrid" else 0)
        assert lib.llama_pyl_set_attn_params(ctx, params)

        decode = functools.partial(decode_items, ctx, batch, n_vocab)

        prompt_items = [(t, pos, seq, False) for seq, p in enumerate(prompts) for pos, t in enumerate(p)]
        for i in range(0, len(prompt_items), N_BATCH):
            decode(prompt_items[i:i + N_BATCH])
        rows: list[list[np.ndarray]] = [[] for _ in prompts]
        recording[0] = True
        for k, tokens in enumerate(steps):
            for seq, logits in enumerate(decode([(tokens[seq], len(prompts[seq]) + k, seq, True)
                                                 for seq in range(n_seq)])):
                rows[seq].append(logits)
        return [np.array(r) for r in rows], marks
    finally:
        lib.llama_batch_free(batch)
        if ctx != ffi.NULL:
            lib.llama_free(ctx)
