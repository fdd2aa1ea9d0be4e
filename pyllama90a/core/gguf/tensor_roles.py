"""Tensor types per role: a GGUF whose weights ggml cannot compute with is refused before llama.cpp loads it.

llama.cpp checks a tensor's shape, not its type against what it is used for: a Q8_1 `attn_q` (no dot product),
a Q8_K or I64 `token_embd` (no row dequantization) or an F16 `attn_norm` (ggml's binary ops take an F32 weight
only) loads, then ends the process at the first decode (SIGSEGV or SIGABRT in a compute thread). The roles:

- "matrix" (MUL_MAT, MUL_MAT_ID, the default for a tensor's `weight`): F32, or a type whose ggml type traits
  have `to_float`. In ggml-cpu exactly these types have a `vec_dot` (Q8_1, Q8_K, I8-I64, F64 have neither);
  the CPU is the floor because every weight a GPU cannot take falls back to it.
- "rows" (GET_ROWS: token and position embeddings): F32, or a type with `to_float` (ggml-cpu dequantizes rows
  with it; an I32 table is copied as if it were F32: silent garbage).
- "f32" (MUL, ADD, DIV, SCALE, ROPE, SSM_CONV, SSM_SCAN, RWKV_WKV6: norms, biases, scales, frequency factors,
  and every tensor whose suffix is not `weight`, which llama.cpp adds or multiplies): F32 only.
- "any": index tables (GET_ROWS of ids) and tensors of convolutions or of no op, left to llama.cpp.

`_ELEMENTWISE`, `_ROWS` and `_ANY` are llama.cpp's LLM_TENSOR_INFOS (src/llama-arch.cpp) grouped by role;
tests/core/test_tensor_roles.py derives them again from the pinned source and compares.
LoRA adapters (check_adapter_tensors): llama.cpp multiplies by `lora_a` and `lora_b` as by the weight they adapt
(MUL_MAT, MUL_MAT_ID for experts), so both take the "matrix" role, except a `token_embd` adapter's `lora_a`, whose
rows it reads ("rows"). Its loader checks two dimensions of each against the model's weight and nothing else.
The architectures whose RoPE is multi-section (`_MROPE_ARCHS`, from `llama_model_rope_type`) need
`{arch}.rope.dimension_sections`: without it ggml-cpu's rope asserts at the first decode.
"""
from __future__ import annotations

import math
import re
from typing import Literal

from ...errors import LlamaError, LoraAdapterError, ModelLoadError, _short
from ...native.ggml import type_info
from .header import ArraySummary, GGUFHeader, TensorInfo

Role = Literal["matrix", "rows", "f32", "any"]

_ELEMENTWISE = frozenset("""
    blk.%d.altup_correct_scale blk.%d.altup_router_norm blk.%d.attn_compressor_norm blk.%d.attn_conv_base
    blk.%d.attn_k_norm blk.%d.attn_kv_a_norm blk.%d.attn_norm blk.%d.attn_norm_2 blk.%d.attn_output_norm
    blk.%d.attn_q_a_norm blk.%d.attn_q_norm blk.%d.attn_res_score blk.%d.attn_sinks blk.%d.attn_sub_norm
    blk.%d.channel_mix_lerp_k blk.%d.channel_mix_lerp_r blk.%d.exp_probs_b blk.%d.exp_probs_b_vl blk.%d.ffn.act
    blk.%d.ffn_conv_base blk.%d.ffn_norm blk.%d.ffn_norm_exps blk.%d.ffn_res_score blk.%d.ffn_routed_norm
    blk.%d.ffn_sub_norm blk.%d.hc_attn_base blk.%d.hc_attn_norm blk.%d.hc_attn_scale blk.%d.hc_ffn_base
    blk.%d.hc_ffn_norm blk.%d.hc_ffn_scale blk.%d.indexer.k_norm blk.%d.indexer.q_norm
    blk.%d.indexer_compressor_ape blk.%d.indexer_compressor_norm blk.%d.laurel_post_norm
    blk.%d.layer_output_norm blk.%d.layer_output_scale blk.%d.nextn.enorm blk.%d.nextn.hnorm
    blk.%d.nextn.shared_head_norm blk.%d.ple_conv1d blk.%d.ple_norm_conv blk.%d.ple_norm_key
    blk.%d.ple_norm_query blk.%d.post_attention_norm blk.%d.post_ffw_norm blk.%d.post_ffw_norm_1
    blk.%d.post_ffw_norm_2 blk.%d.post_norm blk.%d.pre_ffw_norm_2 blk.%d.shortconv.conv blk.%d.ssm_a
    blk.%d.ssm_b_norm blk.%d.ssm_c_norm blk.%d.ssm_conv1d blk.%d.ssm_conv1d_k blk.%d.ssm_conv1d_q
    blk.%d.ssm_conv1d_v blk.%d.ssm_d blk.%d.ssm_dt_norm blk.%d.ssm_norm blk.%d.time_mix_a0 blk.%d.time_mix_decay
    blk.%d.time_mix_first blk.%d.time_mix_k_a blk.%d.time_mix_k_k blk.%d.time_mix_lerp_fused
    blk.%d.time_mix_lerp_g blk.%d.time_mix_lerp_k blk.%d.time_mix_lerp_r blk.%d.time_mix_lerp_v
    blk.%d.time_mix_lerp_w blk.%d.time_mix_lerp_x blk.%d.time_mix_ln blk.%d.time_mix_r_k blk.%d.time_mix_v0
    blk.%d.time_mix_w0 cls.norm convnext.%d.gamma convnext.%d.norm dec.blk.%d.attn_norm dec.blk.%d.cross_attn_norm
    dec.blk.%d.ffn_norm dec.output_norm enc.blk.%d.attn_norm enc.blk.%d.ffn_norm enc.output_norm hrm.z_l_init
    output_hc_base output_hc_norm output_hc_scale output_norm output_res_score per_layer_proj_norm
    posnet.%d.attn_norm posnet.%d.norm posnet.%d.norm1 posnet.%d.norm2 rope_factors_long rope_factors_short
    rope_freqs token_embd_norm
""".split())
_ROWS = frozenset("""
    blk.%d.attn_compressor_ape blk.%d.nextn.embed_tokens dec.blk.%d.attn_rel_b enc.blk.%d.attn_rel_b markov_w1
    per_layer_token_embd position_embd selector_predecessor selector_successor token_embd token_types
""".split())
_ANY = frozenset("""
    blk.%d.ffn_gate_tid2eid d2t conv1d convnext.%d.dw posnet.%d.conv1 posnet.%d.conv2
    dec.blk.%d.cross_attn_rel_b masked_embd_centroids masked_embd_ordering
""".split())
_MROPE_ARCHS = frozenset({"qwen2vl", "paddleocr", "qwen3vl", "qwen3vlmoe", "qwen35", "qwen35moe", "qwen4exp",
                          "qwen3tts"})
_LAYER_INDEX = re.compile(r"(?<![^.])\d+(?![^.])")  # a whole dot-separated component of digits


def role_of(name: str) -> Role:
    """The role of tensor `name` (e.g. "blk.3.attn_norm.weight" -> "f32")."""
    base, _, suffix = name.rpartition(".")
    if not base:
        base, suffix = name, "weight"
    pattern = _LAYER_INDEX.sub("%d", base)
    if pattern in _ANY:
        return "any"
    if pattern in _ELEMENTWISE or suffix != "weight":  # bias, scale, input_scale: added, multiplied
        return "f32"
    if pattern in _ROWS:
        return "rows"
    return "matrix"


def type_problem(role: Role, ggml_type: int) -> str | None:
    """Why ggml cannot compute with a tensor of `ggml_type` in `role`, or None when it can."""
    if role == "any":
        return None
    info = type_info(ggml_type)
    if info is None:
        return f"ggml type {ggml_type} is not a type of this build"
    if ggml_type == 0:  # F32: every role
        return None
    if role == "f32":
        return f"{info.name}: ggml's element-wise ops (norm weights, biases, scales) take F32 only"
    if not info.to_float:
        verb = "multiply by" if role == "matrix" else "read embedding rows of"
        return f"{info.name}: ggml cannot {verb} it (no dequantization, no dot product for this type)"
    return None


def check_type(tensor: TensorInfo, role: Role, name: str, error: type[LlamaError]) -> None:
    """`error` naming `tensor` of the file `name` when its type does not fit `role` (type_problem)."""
    why = type_problem(role, tensor.type)
    if why is not None:
        raise error(f"{name}: tensor {tensor.name} has type {why} (its role: {role})")


def check_tensors(header: GGUFHeader, name: str) -> None:
    """ModelLoadError naming the first tensor whose type does not fit its role, or a multi-section RoPE model
    without usable sections; `name` names the file in the message."""
    for tensor in header.tensors:
        check_type(tensor, role_of(tensor.name), name, ModelLoadError)
    _check_rope_sections(header, name)


def _check_rope_sections(header: GGUFHeader, name: str) -> None:
    arch = header.architecture
    if not isinstance(arch, str):  # (not a name at all: llama.cpp's loader refuses it as an unknown architecture)
        return
    key = f"{arch}.rope.dimension_sections"
    sections = header.get(key)
    if sections is None:
        if arch in _MROPE_ARCHS:
            raise ModelLoadError(f"{name}: architecture {arch} uses multi-section RoPE but the file has no {key}")
        return
    if isinstance(sections, int) and not isinstance(sections, bool):
        sections = [sections]
    if isinstance(sections, ArraySummary) or not isinstance(sections, list) or len(sections) > 4 \
            or not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s < 2**31 for s in sections):
        raise ModelLoadError(f"{name}: {key} must be at most 4 integers >= 0, got {_short(sections)}")
    if arch in _MROPE_ARCHS and not any(sections[:3]):
        raise ModelLoadError(f"{name}: {key} = {sections}: architecture {arch} needs a section > 0 among the "
                             f"first three")
    n_head = header.get(f"{arch}.attention.head_count")
    n_embd = header.get(f"{arch}.embedding_length")
    n_rot = header.get(f"{arch}.rope.dimension_count")
    if not isinstance(n_rot, int) and isinstance(n_head, int) and n_head > 0 and isinstance(n_embd, int):
        n_rot = n_embd // n_head
    if isinstance(n_rot, int) and sum(sections) > n_rot:
        raise ModelLoadError(f"{name}: {key} = {sections} add up to {sum(sections)}, more than the "
                             f"{n_rot} rotated dimensions")


_LORA_SUFFIXES = (".lora_a", ".lora_b")
_NVFP4 = 40  # ggml's type: its per-tensor .scale and a LoRA on one weight end llama.cpp in an assert (build_ffn)
_GGUF_FLOAT32 = 6  # the GGUF value type llama.cpp reads adapter.lora.alpha as (an assert on any other)


def check_adapter_tensors(adapter: GGUFHeader, model: GGUFHeader, name: str) -> None:
    """LoraAdapterError naming the first tensor of the LoRA adapter `adapter` that llama.cpp would refuse, or
    take and then crash with at the first decode (SIGSEGV for a type it cannot multiply by, SIGABRT in
    ggml_can_mul_mat for a shape), against the weights of `model`; `name` names the adapter file."""
    alpha = adapter.get("adapter.lora.alpha")
    if alpha is not None and (adapter.value_types.get("adapter.lora.alpha") != _GGUF_FLOAT32
                              or not math.isfinite(alpha)):
        raise LoraAdapterError(f"{name}: adapter.lora.alpha must be a finite float32, got {_short(alpha)}")
    pairs: dict[str, dict[str, TensorInfo]] = {}
    for tensor in adapter.tensors:  # (llama.cpp's pairing: the suffix removed everywhere, the last one wins)
        suffix = next((s for s in _LORA_SUFFIXES if tensor.name.endswith(s)), None)
        if suffix is not None:
            pairs.setdefault(tensor.name.replace(suffix, ""), {})[suffix[1:]] = tensor
        elif not tensor.name.endswith("_norm.weight"):  # (norm vectors: llama.cpp skips them)
            raise LoraAdapterError(f"{name}: tensor {tensor.name} is neither a .lora_a nor a .lora_b")
    weights = {t.name: t for t in model.tensors}
    for target, pair in pairs.items():
        if len(pair) < 2:
            missing = "lora_b" if "lora_a" in pair else "lora_a"
            raise LoraAdapterError(f"{name}: tensor {target}.{missing} is missing (a LoRA pair needs both)")
        weight = weights.get(target)
        if weight is None:
            raise LoraAdapterError(f"{name}: tensor {target}.lora_a adapts {target}, which the model does not have "
                                   f"(an adapter for another model?)")
        _check_pair(pair["lora_a"], pair["lora_b"], weight, weights, name)


def _check_pair(a: TensorInfo, b: TensorInfo, weight: TensorInfo, weights: dict[str, TensorInfo], name: str) -> None:
    """One pair against the weight it adapts (one of the model's `weights`): roles, types, dimensions, shapes in
    ggml order ([n_in, rank] and [rank, n_out]; a token embedding's are [rank, n_vocab] and [rank, n_embd])."""
    embedding, own_output = weight.name == "token_embd.weight", "output.weight" in weights
    if weight.type == _NVFP4 and weight.name.removesuffix(".weight") + ".scale" in weights:
        raise LoraAdapterError(f"{name}: tensor {a.name} adapts {weight.name}, an NVFP4 weight with a .scale, to "
                               f"which llama.cpp cannot apply a LoRA (its feed-forward asserts)")
    if role_of(weight.name) != "matrix" and not embedding:
        raise LoraAdapterError(f"{name}: tensor {a.name} adapts {weight.name}, which llama.cpp applies no LoRA to "
                               f"(only weight matrices and token_embd)")
    if embedding and not own_output:
        raise LoraAdapterError(f"{name}: tensor {a.name} adapts token_embd.weight, which this model also uses as "
                               f"its output projection (no output.weight), where llama.cpp cannot apply it")
    check_type(a, "rows" if embedding else "matrix", name, LoraAdapterError)
    check_type(b, "matrix", name, LoraAdapterError)
    n_dims = len(weight.shape)
    if n_dims not in (2, 3) or (embedding and n_dims != 2):
        raise LoraAdapterError(f"{name}: tensor {a.name} adapts {weight.name} of shape {list(weight.shape)}, which "
                               f"is no weight matrix")
    for tensor in a, b:
        if len(tensor.shape) != n_dims:
            raise LoraAdapterError(f"{name}: tensor {tensor.name} has {len(tensor.shape)} dimensions "
                                   f"{list(tensor.shape)}; {weight.name} has {n_dims}, so it needs {n_dims}")
    want_a: tuple[int, ...]
    want_b: tuple[int, ...]
    if embedding:  # get_rows(a, tokens) then b times those rows
        want_a, want_b = (a.shape[0], weight.shape[1]), (a.shape[0], weight.shape[0])
        layout = "[rank, n_vocab] and [rank, n_embd]"
    else:  # b times (a times x): experts (a third dimension) as many as the weight's
        want_a, want_b = (weight.shape[0], a.shape[1], *weight.shape[2:]), (a.shape[1], *weight.shape[1:])
        layout = "[n_in, rank] and [rank, n_out]"
    for tensor, want in ((a, want_a), (b, want_b)):
        if tensor.shape != want:
            raise LoraAdapterError(f"{name}: tensor {tensor.name} has shape {list(tensor.shape)}, expected "
                                   f"{list(want)} for {weight.name} of shape {list(weight.shape)} (lora_a and "
                                   f"lora_b are {layout} in ggml's order, rank {a.shape[0 if embedding else 1]})")
