"""Which nodes llama.cpp's scheduler ran for a decode step: the tests use it to see the path a patch took.

A raw context (as tests/support/two_streams.py makes) with the scheduler's eval callback set; the callback
records each node's op, name and shape when the scheduler asks about it, and never asks for data.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyllama90a.core.model.attention_paths import AttentionPaths
from pyllama90a.native import ModelHandle
from pyllama90a.native._ffi import ffi, lib
from pyllama90a.native.ggml import ggml_type
from pyllama90a.native.kv_types import FLASH_ATTN_MODES
from pyllama90a.native.placement import Placement


@dataclass(frozen=True)
class Node:
    op: str
    name: str
    ne: tuple[int, int, int, int]
    src_types: tuple[int, ...]
    mark: int = 0  # pyllama90a's mark (ggml-pyllama90a.h)
    src_names: tuple[str, ...] = ()
    buffer: str = ""  # the name of the buffer holding the node ("" for none yet)


def decode_nodes(model_path: Path, tokens: list[int], *, ctk: str, ctv: str, paths: AttentionPaths | None = None,
                 n_gpu_layers: int = 0, n_ctx: int = 1024, flash_attn: str = "off") -> list[Node]:
    """Decode tokens[:-1] as a prompt, then the last token alone (the context taking `paths`); returns the nodes
    of that last step."""
    return phase_nodes(model_path, tokens, ctk=ctk, ctv=ctv, paths=paths, n_gpu_layers=n_gpu_layers, n_ctx=n_ctx,
                       flash_attn=flash_attn)[1]


def phase_nodes(model_path: Path, tokens: list[int], *, ctk: str, ctv: str, paths: AttentionPaths | None = None,
                n_gpu_layers: int = 0, n_ctx: int = 1024, flash_attn: str = "off",
                rpc: list[str] | None = None) -> tuple[list[Node], list[Node]]:
    """The nodes of the prompt step (tokens[:-1] in one ubatch) and of the decode step (the last token);
    flash_attn "on", "off" or "hybrid" (on, with patch 0012's per-phase bit). rpc: workers whose first device
    takes the offloaded layers."""
    nodes: list[Node] = []

    @ffi.callback("bool(struct ggml_tensor *, bool, void *)")
    def on_node(t, ask, _user):
        if ask:
            srcs = [t.src[i] for i in range(10) if t.src[i] != ffi.NULL]
            buffer = ffi.string(lib.ggml_backend_buffer_name(t.buffer)).decode() if t.buffer != ffi.NULL else ""
            nodes.append(Node(ffi.string(lib.ggml_op_desc(t)).decode(), ffi.string(t.name).decode(),
                              tuple(t.ne), tuple(s.type for s in srcs), lib.ggml_pyl_get_mark(t),
                              tuple(ffi.string(s.name).decode() for s in srcs), buffer))
        return False

    placement = Placement.checked(rpc=rpc, split_mode="none", main_gpu=0) if rpc else None
    model = ModelHandle(model_path, n_gpu_layers=n_gpu_layers, placement=placement)
    cparams = lib.llama_context_default_params()
    cparams.n_ctx = n_ctx
    cparams.n_batch = cparams.n_ubatch = max(len(tokens), 32)
    cparams.type_k, cparams.type_v = ggml_type(ctk), ggml_type(ctv)
    cparams.flash_attn_type = getattr(lib, FLASH_ATTN_MODES[flash_attn])
    cparams.n_threads = cparams.n_threads_batch = 2
    cparams.cb_eval = on_node
    ctx = lib.llama_init_from_model(model.ptr, cparams)
    try:
        assert ctx != ffi.NULL
        params = lib.llama_pyl_attn_default_params()
        params.paths = (paths or AttentionPaths()).bits | (lib.LLAMA_PYL_ATTN_HYBRID if flash_attn == "hybrid" else 0)
        assert lib.llama_pyl_set_attn_params(ctx, params)
        prompt = ffi.new("llama_token[]", tokens[:-1])
        nodes.clear()
        assert lib.llama_decode(ctx, lib.llama_batch_get_one(prompt, len(tokens) - 1)) == 0
        prompt_step = list(nodes)
        nodes.clear()
        last = ffi.new("llama_token[]", tokens[-1:])
        assert lib.llama_decode(ctx, lib.llama_batch_get_one(last, 1)) == 0
        return prompt_step, list(nodes)
    finally:
        if ctx != ffi.NULL:
            lib.llama_free(ctx)
