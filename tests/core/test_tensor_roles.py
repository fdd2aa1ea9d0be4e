"""Tensor types per role (issue 18, item 3): a weight ggml cannot compute with is a ModelLoadError naming it.

Each bad file loaded before and ended the process at the first decode (SIGSEGV in a mat-mul, SIGABRT in get_rows
or binary_op, a rope sections assert). Cases run in a child (the fuzz runner), so a regression fails the test
instead of ending the test run. The role table is compared with the pinned llama.cpp source.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import pyllama90a as pl
from pyllama90a.core.gguf.header import GGML_TYPE_SIZES
from pyllama90a.core.gguf.tensor_roles import _ANY, _ELEMENTWISE, _MROPE_ARCHS, _ROWS, role_of
from pyllama90a.fuzz.bases import load_base
from pyllama90a.fuzz.gguf_file import ARRAY, STRING
from pyllama90a.fuzz.gguf_file import I32 as I32_VALUE
from pyllama90a.fuzz.gguf_mutations import encode_value, typed, write_case
from pyllama90a.fuzz.model_case import case_job
from pyllama90a.fuzz.runner import run_one
from pyllama90a.native.ggml import type_info

F32, F16, Q4_0, Q8_0, Q8_1, Q4_K, Q8_K, I8, I16, I32, I64, F64, BF16 = 0, 1, 2, 8, 9, 12, 15, 24, 25, 26, 27, 28, 30


def _retyped(*ops: tuple[str, int, int]) -> dict:
    return {"base": "tiny", "mutations": [{"cls": "test", "ops": [
        {"op": "retype", "name": name, "type": ggml_type, "fill": fill} for name, ggml_type, fill in ops]}]}


def _run(spec: dict, tmp_path: Path):
    return run_one(case_job(spec, tmp_path / "case.gguf"), timeout=60)


@pytest.mark.parametrize(("tensor", "ggml_type", "named"), [
    ("blk.0.attn_q.weight", Q8_1, "has type q8_1"),        # SIGSEGV before: no vec_dot
    ("blk.1.ffn_down.weight", Q8_K, "has type q8_K"),
    ("blk.0.attn_k.weight", I8, "has type i8"),
    ("blk.2.attn_v.weight", I16, "has type i16"),
    ("output.weight", I32, "has type i32"),
    ("blk.3.ffn_up.weight", I64, "has type i64"),
    ("blk.0.attn_output.weight", F64, "has type f64"),
    ("token_embd.weight", Q8_K, "has type q8_K"),          # SIGABRT before: get_rows
    ("token_embd.weight", I64, "has type i64"),
    ("token_embd.weight", F64, "has type f64"),
    ("token_embd.weight", I32, "has type i32"),            # before: rows copied as if F32, garbage
    ("blk.0.attn_norm.weight", F16, "has type f16"),       # SIGABRT before: binary_op unsupported types
    ("blk.2.ffn_norm.weight", BF16, "has type bf16"),
    ("output_norm.weight", Q8_0, "has type q8_0"),
])
def test_unusable_type_for_its_role_is_a_load_error(tmp_path, tensor: str, ggml_type: int, named: str) -> None:
    outcome = _run(_retyped((tensor, ggml_type, 0)), tmp_path)
    assert (outcome.kind, outcome.stage, outcome.error_type) == ("clean", "load", "pyllama90a.errors.ModelLoadError"), \
        outcome
    assert f"tensor {tensor} {named}" in outcome.message, outcome.message


@pytest.mark.parametrize(("tensor", "ggml_type"), [
    ("blk.0.attn_q.weight", F32), ("blk.0.attn_q.weight", F16), ("blk.0.attn_q.weight", BF16),
    ("blk.0.attn_q.weight", Q8_0), ("blk.0.attn_q.weight", Q4_K), ("token_embd.weight", F16),
    ("token_embd.weight", Q4_K), ("blk.0.attn_norm.weight", F32),
])
def test_usable_types_still_load_and_generate(tmp_path, tensor: str, ggml_type: int) -> None:
    """The check refuses what crashes, not what works: these retyped files run to the end."""
    outcome = _run(_retyped((tensor, ggml_type, 0)), tmp_path)
    assert (outcome.kind, outcome.stage) == ("ok", "close"), outcome


def _as_architecture(arch: str, sections: list[int] | None) -> dict:
    """The tiny llama's keys renamed to `arch` (general.architecture too), with rope sections if given."""
    base = load_base("tiny")
    ops: list[dict] = [{"op": "set", "key": "general.architecture", "value": typed(STRING, arch)}]
    for e in base.entries:
        if e.key.startswith("llama."):
            ops.append({"op": "delete", "key": e.key})
            ops.append({"op": "set", "key": arch + e.key[len("llama"):], "value": encode_value(e.decoded())})
    if sections is not None:
        ops.append({"op": "set", "key": f"{arch}.rope.dimension_sections", "value": typed(ARRAY, sections, I32_VALUE)})
    return {"base": "tiny", "mutations": [{"cls": "test", "ops": ops}]}


@pytest.mark.parametrize(("sections", "named"), [
    (None, "has no paddleocr.rope.dimension_sections"),    # SIGABRT before: ggml-cpu's rope asserts on sections
    ([0, 0, 0, 0], "needs a section > 0"),
    ([64, 64, 64, 0], "more than the 64 rotated dimensions"),
])
def test_multi_section_rope_without_usable_sections_is_a_load_error(tmp_path, sections, named: str) -> None:
    outcome = _run(_as_architecture("paddleocr", sections), tmp_path)
    assert (outcome.kind, outcome.stage, outcome.error_type) == ("clean", "load", "pyllama90a.errors.ModelLoadError"), \
        outcome
    assert named in outcome.message, outcome.message


def test_multi_section_rope_with_sections_runs(tmp_path) -> None:
    outcome = _run(_as_architecture("paddleocr", [8, 12, 12, 0]), tmp_path)
    assert (outcome.kind, outcome.stage) == ("ok", "close"), outcome


# -- NaN / inf weights: an error, not text ---------------------------------------------------------------------

NAN_CHILD = r"""
import sys, pyllama90a as pl
m = pl.Model(sys.argv[1], n_ctx=256, n_threads=1, embedding=sys.argv[2] == "embed")
try:
    if sys.argv[2] == "embed":
        print("EMBEDDED", m.embed("hello")[:2])
    elif sys.argv[2] == "engine":
        m.close()
        with pl.BatchEngine(sys.argv[1], n_ctx=512, parallel=2, n_threads=1) as e:
            print("TEXT", repr("".join(c.text for c in e.stream("hello", max_tokens=4, temperature=0))))
    else:
        print("TEXT", repr(m.generate("hello", max_tokens=4, temperature=0).text))
except pl.NonFiniteOutputError as e:
    print("REFUSED", str(e).splitlines()[0])
"""


@pytest.mark.parametrize("how", ["generate", "engine", "embed"])
@pytest.mark.parametrize("fill", [0xff, 0x7f])  # NaN, and huge finite values that overflow to inf
def test_nan_or_inf_weights_are_an_error_not_text(tmp_path, how: str, fill: int) -> None:
    path = tmp_path / "nan.gguf"
    write_case(load_base("tiny"), _retyped(("blk.1.attn_output.weight", F16, fill))["mutations"], path)
    out = subprocess.run([sys.executable, "-c", NAN_CHILD, str(path), how], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "REFUSED the model computed" in out.stdout and "NaN or infinite" in out.stdout, out.stdout


# -- the tables against ggml and the pinned llama.cpp source -----------------------------------------------------

def test_type_sizes_are_ggmls() -> None:
    """gguf_header's size table (used before llama.cpp opens a file) is ggml's for every type of this build."""
    for t in range(64):
        info = type_info(t)
        assert GGML_TYPE_SIZES.get(t) == (None if info is None else (info.block_size, info.type_size)), t


def test_roles() -> None:
    assert role_of("blk.12.attn_norm.weight") == "f32"
    assert role_of("blk.0.attn_q.bias") == "f32"
    assert role_of("blk.0.attn_q.weight") == "matrix"
    assert role_of("token_embd.weight") == "rows"
    assert role_of("blk.3.ffn_gate_tid2eid.weight") == "any"
    assert role_of("rope_freqs.weight") == "f32"


def _source() -> Path:
    out = subprocess.run([sys.executable, str(Path(__file__).parents[2] / "vendor" / "prepare_source.py")],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        pytest.skip(f"the pinned llama.cpp source is not available here: {out.stderr[-300:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def test_role_table_is_llama_cpps() -> None:
    """_ELEMENTWISE, _ROWS and _ANY are LLM_TENSOR_INFOS of the pinned source, grouped by the op's needs."""
    src = (_source() / "src" / "llama-arch.cpp").read_text()
    names = dict(re.findall(r'\{\s*(LLM_TENSOR_\w+),\s*"([^"]+)"\s*\}', src))
    infos = re.findall(r'\{\s*(LLM_TENSOR_\w+),\s*\{\s*LLM_TENSOR_LAYER_\w+,\s*GGML_OP_(\w+)\s*\}\s*\}', src)
    ops: dict[str, set[str]] = {}
    for tensor, op in infos:
        ops.setdefault(names[tensor], set()).add(op)
    f32_ops = {"MUL", "ADD", "DIV", "SCALE", "ROPE", "SSM_CONV", "SSM_SCAN", "RWKV_WKV6"}
    index_tables = {"blk.%d.ffn_gate_tid2eid", "d2t"}  # GET_ROWS of ids
    expected_f32 = {n for n, o in ops.items() if o & f32_ops}
    expected_rows = {n for n, o in ops.items() if o == {"GET_ROWS"}} - index_tables
    expected_any = {n for n, o in ops.items() if o <= {"IM2COL", "NONE"}} | index_tables
    assert (set(_ELEMENTWISE), set(_ROWS), set(_ANY)) == (expected_f32, expected_rows, expected_any)
    assert all(o <= {"MUL_MAT", "MUL_MAT_ID"} for n, o in ops.items() if n not in expected_f32 | expected_rows
               | expected_any)


def test_multi_section_rope_architectures_are_llama_cpps() -> None:
    """_MROPE_ARCHS: the architectures whose rope type is always M-RoPE/IM-RoPE/vision in llama_model_rope_type."""
    src = _source()
    arch_names = dict(re.findall(r'\{\s*(LLM_ARCH_\w+),\s*"([^"]+)"\s*\}',
                                 (src / "src" / "llama-arch.cpp").read_text()))
    model = (src / "src" / "llama-model.cpp").read_text()
    body = model[model.index("llama_rope_type llama_model_rope_type("):]
    body = body[:body.index("\n}\n")]
    found = set()
    for cases in re.findall(r'((?:\s*case LLM_ARCH_\w+:)+)\s*return LLAMA_ROPE_TYPE_(?:MROPE|IMROPE|VISION);', body):
        found |= {arch_names[a] for a in re.findall(r"LLM_ARCH_\w+", cases)}
    assert found == _MROPE_ARCHS


def test_default_model_passes(model_path) -> None:
    with pl.Model(model_path, n_ctx=256) as m:
        assert m.generate("The capital of France is", max_tokens=2, temperature=0).tokens
