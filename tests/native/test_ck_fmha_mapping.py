"""src/ck_fa: the mirror of CK's fmha_fwd API stays in sync with the fetched fmha_fwd.hpp; the mapping's
verdicts keep ineligible FLASH_ATTN_EXT nodes on ggml's kernels; its strides for llama.cpp's KV-cache views
are the expected ones; and every argument set it produces reaches a compiled CK instance."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from pyllama90a.native._ffi import ffi, lib
from support.ck_dispatch import namespace, parse_api, select, trait_parameters
from support.ck_fa_graph import Shape, build
from support.ck_mapping import Mapping, ck_mapping, ggml_ctx, struct_fields  # noqa: F401  (fixtures)
from support.ck_tree import ck_root, fmha_dir  # noqa: F401  (fixtures)
from support.repo_scripts import script_module

REPO = Path(__file__).resolve().parents[2]


def enum_values(header: str, name: str) -> dict[str, int]:
    body = re.search(rf"enum class {name}\s*\{{(.*?)\}};", header, re.S).group(1)
    values, next_value = {}, 0
    for item in filter(None, (i.strip() for i in re.sub(r"//[^\n]*", "", body).split(","))):
        label, _, value = (s.strip() for s in item.partition("="))
        next_value = int(value) if value else next_value
        values[label] = next_value
        next_value += 1
    return values


# what each CK type is in the C mirror
CK_TO_MIRROR = {"const void*": "const void*", "void*": "void*", "ck_tile::index_t": "int32_t", "int": "int",
                "float": "float", "bool": "bool", "std::string": "const char*", "mask_enum": "int", "bias_enum": "int",
                "std::variant<std::pair<uint64_t, uint64_t>, std::pair<const void*, const void*>>":
                    "struct pyllama90a_fmha_drop_seed_offset"}


@pytest.mark.parametrize("ck_struct,mirror", [("fmha_fwd_args", "pyllama90a_fmha_fwd_args"),
                                              ("fmha_fwd_traits", "pyllama90a_fmha_fwd_traits")])
def test_the_mirror_has_ck_fields_in_ck_order(ck_mapping: Mapping, fmha_dir: Path, ck_struct: str, mirror: str):
    ck = struct_fields((fmha_dir / "fmha_fwd.hpp").read_text(), ck_struct)
    ours = struct_fields((REPO / "src" / "ck_fa" / "fmha_args.h").read_text(), mirror)
    assert len(ck) > 10  # the parse really found the struct
    assert [f for _, f in ours] == [f for _, f in ck]
    assert [t for t, _ in ours] == [CK_TO_MIRROR[t] for t, _ in ck]
    # the header text read here is what the compiled mapping was declared with
    assert [name for name, _ in ck_mapping.ffi.typeof(f"struct {mirror}").fields] == [f for _, f in ck]


def test_index_t_and_the_enums_match_ck(ck_mapping: Mapping, ck_root: Path, fmha_dir: Path):
    integer = (ck_root / "include" / "ck_tile" / "core" / "numeric" / "integer.hpp").read_text()
    assert re.search(r"using index_t\s*=\s*int32_t;", integer)
    assert ck_mapping.ffi.sizeof("int32_t") == 4
    lib_ = ck_mapping.lib
    assert enum_values((fmha_dir / "mask.hpp").read_text(), "mask_enum") == {
        "no_mask": lib_.PYLLAMA90A_CK_MASK_NO_MASK, "mask_top_left": lib_.PYLLAMA90A_CK_MASK_TOP_LEFT,
        "mask_bottom_right": lib_.PYLLAMA90A_CK_MASK_BOTTOM_RIGHT,
        "window_generic": lib_.PYLLAMA90A_CK_MASK_WINDOW_GENERIC}
    assert enum_values((fmha_dir / "bias.hpp").read_text(), "bias_enum") == {
        "no_bias": lib_.PYLLAMA90A_CK_BIAS_NO_BIAS, "elementwise_bias": lib_.PYLLAMA90A_CK_BIAS_ELEMENTWISE,
        "alibi": lib_.PYLLAMA90A_CK_BIAS_ALIBI}


def test_strides_of_a_kv_cache_view(ck_mapping: Mapping, ggml_ctx):
    """Two streams, GQA 4, a cache of more cells than n_kv, Q copied to F16, K/V read in place."""
    shape = Shape(n_head=8, n_head_kv=2, head_dim=128, n_q=40, n_kv=300, n_seq=2, mask="arbitrary")
    graph = build(ggml_ctx, shape, np.random.default_rng(1))
    k = graph.node.src[1]
    capacity = k.nb[3] // k.nb[1]
    args, traits = ck_mapping.map(graph.node, 0x1000, 0x2000, 0x3000, 0x4000)
    assert (args.seqlen_q, args.seqlen_k, args.batch, args.max_seqlen_q) == (40, 300, 2, 40)
    assert (args.hdim_q, args.hdim_v, args.nhead_q, args.nhead_k) == (128, 128, 8, 2)
    assert args.scale_s == pytest.approx(graph.scale) and (args.scale_p, args.scale_o) == (1.0, 1.0)
    assert (args.stride_q, args.nhead_stride_q, args.batch_stride_q) == (128, 128 * 40, 128 * 40 * 8)  # F16 copy
    row = 2 * 128  # one cache row holds both KV heads
    for prefix in ("", "nhead_", "batch_"):
        assert getattr(args, prefix + "stride_k") == getattr(args, prefix + "stride_v")
    assert (args.stride_k, args.nhead_stride_k, args.batch_stride_k) == (row, 128, row * capacity)
    assert (args.stride_o, args.nhead_stride_o, args.batch_stride_o) == (8 * 128, 128, 40 * 8 * 128)
    mask = graph.node.src[3]
    assert int(ffi.cast("uintptr_t", mask.data)) == int(ck_mapping.ffi.cast("uintptr_t", args.bias_ptr))
    assert (args.stride_bias, args.nhead_stride_bias, args.batch_stride_bias) == (300, 0, 300 * mask.ne[1])
    assert (args.mask_type, args.window_size_left, args.window_size_right) == (0, -1, -1)
    assert int(ck_mapping.ffi.cast("uintptr_t", args.q_ptr)) == 0x1000 and args.lse_ptr == ck_mapping.ffi.NULL
    assert (traits.hdim_q, traits.bias_type, traits.mask_type, traits.is_v_rowmajor, traits.is_group_mode) == (
        128, 1, 0, True, False)


def eligible_node(ctx, **changes):
    fields = {"n_head": 8, "n_head_kv": 2, "head_dim": 64, "n_q": 32, "n_kv": 200}
    fields.update(changes)
    return build(ctx, Shape(**fields), np.random.default_rng(0)).node


def test_verdicts_keep_ineligible_nodes_on_ggml(ck_mapping: Mapping, ggml_ctx):
    check = ck_mapping.check
    assert check(eligible_node(ggml_ctx)) == "ok"
    assert check(eligible_node(ggml_ctx, kv_type="q4_0")) == "ok"  # dequantized to F16 first
    assert check(eligible_node(ggml_ctx, head_dim=80)) == "head_dim"
    assert check(eligible_node(ggml_ctx, head_dim=256)) == "head_dim"
    assert check(eligible_node(ggml_ctx, head_dim=128, head_dim_v=64)) == "head_dim"
    assert check(eligible_node(ggml_ctx, n_q=15)) == "decode_batch"
    assert check(eligible_node(ggml_ctx, n_q=1), min_queries=1) == "ok"
    rng = np.random.default_rng(0)
    assert check(build(ggml_ctx, Shape(8, 2, 64, 32, 200), rng, max_bias=8.0).node) == "alibi"
    assert check(build(ggml_ctx, Shape(8, 2, 64, 32, 200), rng, softcap=30.0).node) == "softcap"
    node = eligible_node(ggml_ctx)
    node.src[4] = lib.ggml_new_tensor_4d(ggml_ctx, lib.GGML_TYPE_F32, 8, 1, 1, 1)  # attention sinks
    assert check(node) == "sinks"
    node = eligible_node(ggml_ctx)
    node.src[1].type = lib.GGML_TYPE_BF16  # only the verdict is asked: no data is read
    assert check(node) == "type"
    node = eligible_node(ggml_ctx)
    node.src[3].ne[2] = 2  # a mask shared by groups of heads: no single CK head stride expresses it
    assert check(node) == "broadcast"
    node = eligible_node(ggml_ctx, n_seq=2)
    node.src[1].nb[3] = 1 << 33  # a stream stride beyond int32 elements
    assert check(node) == "strides"
    node = eligible_node(ggml_ctx, kv_type="q8_0")  # Q (F32), K and V (q8_0) copied, plus the output
    needed = 2 * (64 * 32 * 8 + 2 * 64 * 200 * 2 + 64 * 8 * 32)  # fp16 bytes of Q, K + V, O
    assert ck_mapping.lib.pyllama90a_ck_fa_staging_bytes(ck_mapping.node(node)) == needed
    assert check(node, max_staging_bytes=needed) == "ok"
    assert check(node, max_staging_bytes=needed - 1) == "staging"
    node = eligible_node(ggml_ctx)
    lib.ggml_pyl_set_mark(node, 0)  # a context whose attention paths leave CK out does not mark it
    assert check(node) == "disabled"


@pytest.fixture(scope="module")
def dispatcher(ck_root: Path, tmp_path_factory: pytest.TempPathFactory):
    codegen = script_module("ck_fmha_codegen")
    out = tmp_path_factory.mktemp("ck_fmha_dispatch")
    codegen.generate(ck_root, out)
    return parse_api((out / "fmha_fwd_api.cpp").read_text())


ARG_FIELDS = ["seqlen_q", "seqlen_k", "batch", "max_seqlen_q", "hdim_q", "hdim_v", "nhead_q", "nhead_k"]
TRAIT_FIELDS = ["hdim_q", "hdim_v", "is_group_mode", "is_v_rowmajor", "has_logits_soft_cap", "mask_type",
                "bias_type", "has_lse", "has_dropout", "do_fp8_static_quant", "skip_min_seqlen_q"]


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("n_q,n_kv", [(16, 17), (128, 256), (100, 515), (512, 4096), (33, 1000)])
@pytest.mark.parametrize("mask,causal", [("causal", False), ("causal", True), ("none", False)])
def test_every_mapped_argument_set_reaches_a_compiled_instance(ck_mapping: Mapping, ggml_ctx, dispatcher,
                                                               head_dim, n_q, n_kv, mask, causal):
    graph = build(ggml_ctx, Shape(4, 1, head_dim, n_q, n_kv, mask=mask), np.random.default_rng(n_kv))
    args, traits = ck_mapping.map(graph.node, 1, 1, 1, 1, causal_offset=graph.n_past if causal else None)
    t = namespace(traits, TRAIT_FIELDS)
    t.data_type = ck_mapping.ffi.string(traits.data_type).decode()
    trait = select(dispatcher, t, namespace(args, ARG_FIELDS))
    assert trait is not None, "fmha_fwd would return -1"
    params = trait_parameters(trait)
    assert params[0] == str(head_dim)
    assert params[12] == f"ck_tile::SimplifiedGenericAttentionMask<{'true' if causal else 'false'}>"
    assert params[13] == ("ck_tile::BlockAttentionBiasEnum::ELEMENTWISE_BIAS" if mask != "none"
                          else "ck_tile::BlockAttentionBiasEnum::NO_BIAS")
