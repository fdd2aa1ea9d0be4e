"""Tests of pyllama90a.tools.synthetic: random-weight llama GGUFs that llama.cpp loads and runs."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import pyllama90a
from pyllama90a.core.gguf.header import ArraySummary, read_header
from pyllama90a.tools.synthetic import (
    FIM_TEXTS,
    SHAPES,
    Rope,
    Shape,
    cached_path,
    file_size_estimate,
    fim_token_ids,
    synthetic_model,
    write_synthetic,
)

TINY = SHAPES["tiny"]
N_CTX = 256
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0 = 0, 1, 2, 8


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    return write_synthetic("tiny", tmp_path_factory.mktemp("synthetic") / "tiny.gguf")


def test_shapes():
    assert {"tiny", "smollm-135m", "1b-hd64", "8b-hd128", "7b-gqa7"} <= set(SHAPES)
    assert SHAPES["8b-hd128"].head_dim == 128 and SHAPES["1b-hd64"].head_dim == 64
    assert SHAPES["7b-gqa7"].head_dim == 128 and SHAPES["7b-gqa7"].n_head // SHAPES["7b-gqa7"].n_head_kv == 7
    assert SHAPES["smollm-135m"].head_dim == 64 and TINY.head_dim == 64
    for shape in SHAPES.values():
        assert shape.n_embd == shape.n_head * shape.head_dim
    with pytest.raises(ValueError):
        Shape("bad", n_embd=250, n_layer=1, n_head=4, n_head_kv=2, n_ff=512, n_vocab=512)
    with pytest.raises(ValueError):
        write_synthetic("no-such-shape", "unused.gguf")


def test_header(tiny_path):
    h = read_header(tiny_path)
    assert h.architecture == "llama"
    expected = {
        "llama.block_count": TINY.n_layer, "llama.embedding_length": TINY.n_embd,
        "llama.feed_forward_length": TINY.n_ff, "llama.attention.head_count": TINY.n_head,
        "llama.attention.head_count_kv": TINY.n_head_kv, "llama.rope.dimension_count": TINY.head_dim,
        "llama.context_length": TINY.n_ctx_train, "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0, "general.file_type": 2,
    }
    for key, value in expected.items():
        assert h.get(key) == value, key
    assert h.get("llama.attention.layer_norm_rms_epsilon") == pytest.approx(1e-5)
    assert h.get("llama.rope.freq_base") == pytest.approx(TINY.rope_theta)

    tokens = h.get("tokenizer.ggml.tokens")
    assert not isinstance(tokens, ArraySummary) and len(tokens) == TINY.n_vocab
    assert len(set(tokens)) == TINY.n_vocab
    assert tokens[:4] == ["<unk>", "<s>", "</s>", "<0x00>"] and tokens[258] == "<0xFF>"
    types = h.get("tokenizer.ggml.token_type")
    assert types[:3] == [2, 3, 3] and set(types[3:259]) == {6} and set(types[259:]) == {1}
    assert len(h.get("tokenizer.ggml.scores")) == TINY.n_vocab

    infos = {t.name: t for t in h.tensors}
    assert len(infos) == 3 + 9 * TINY.n_layer
    e, kv, f, v = TINY.n_embd, TINY.n_embd_kv, TINY.n_ff, TINY.n_vocab
    assert infos["token_embd.weight"].shape == (e, v) and infos["output.weight"].shape == (e, v)
    assert infos["output_norm.weight"].shape == (e,) and infos["output_norm.weight"].type == GGML_F32
    assert infos["blk.0.attn_q.weight"].shape == (e, e)
    assert infos["blk.3.attn_k.weight"].shape == (e, kv) and infos["blk.3.attn_v.weight"].shape == (e, kv)
    assert infos["blk.1.ffn_gate.weight"].shape == (e, f) and infos["blk.1.ffn_down.weight"].shape == (f, e)
    assert infos["blk.2.ffn_norm.weight"].type == GGML_F32
    assert {t.type for t in h.tensors if len(t.shape) == 2} == {GGML_Q4_0}
    data = sum(t.nbytes for t in h.tensors)
    assert file_size_estimate("tiny") <= data + 32 * len(h.tensors)
    assert h.file_size >= h.data_offset + data


@pytest.mark.parametrize("kv_type", ["f16", "q4_0"])
def test_generate(tiny_path, kv_type):
    with pyllama90a.Model(tiny_path, n_ctx=N_CTX, ctk=kv_type, ctv=kv_type, flash_attn="off") as model:
        completion = model.generate("hello world", max_tokens=8, temperature=0)
        assert completion.usage.completion_tokens == 8 or completion.finish_reason == "stop"
        assert completion.usage.completion_tokens >= 1

        logits = model.logits(model.tokenize("hello world"))
        assert logits.shape[1] == TINY.n_vocab
        assert np.isfinite(logits).all() and np.abs(logits).max() < 1e3

        kv = model.kv_cache
        assert model.n_ctx == N_CTX
        if kv_type == "f16":
            assert kv.k_bytes == TINY.n_layer * N_CTX * TINY.n_head_kv * TINY.head_dim * 2 == TINY.kv_bytes_f16(N_CTX)
        else:
            assert kv.k_bytes == TINY.n_layer * N_CTX * TINY.n_embd_kv // 32 * 18
        assert kv.v_bytes == kv.k_bytes


@pytest.mark.parametrize("weight_type,method,ggml_type", [("q8_0", "fast", GGML_Q8_0),
                                                          ("f16", "fast", GGML_F16),
                                                          ("q4_0", "quantize", GGML_Q4_0)])
def test_weight_types(tmp_path, weight_type, method, ggml_type):
    path = write_synthetic("tiny", tmp_path / "m.gguf", weight_type=weight_type, method=method, seed=3)
    h = read_header(path)
    assert {t.type for t in h.tensors if len(t.shape) == 2} == {ggml_type}
    with pyllama90a.Model(path, n_ctx=N_CTX, ctk="q8_0", ctv="q8_0", flash_attn="off") as model:
        logits = model.logits(model.tokenize("hello world"))
        assert np.isfinite(logits).all()
        completion = model.generate("hello", max_tokens=4, temperature=0)
        assert completion.usage.completion_tokens == 4 or completion.finish_reason == "stop"


def test_seed_is_deterministic(tmp_path):
    a = write_synthetic("tiny", tmp_path / "a.gguf", seed=1).read_bytes()
    b = write_synthetic("tiny", tmp_path / "b.gguf", seed=1).read_bytes()
    c = write_synthetic("tiny", tmp_path / "c.gguf", seed=2).read_bytes()
    assert a == b and a != c and len(a) == len(c)


def test_synthetic_model_cache(tmp_path):
    path = synthetic_model("tiny", cache_dir=tmp_path)
    assert path.parent == tmp_path and path.is_file()
    mtime = os.stat(path).st_mtime_ns
    assert synthetic_model("tiny", cache_dir=tmp_path) == path
    assert os.stat(path).st_mtime_ns == mtime  # not written again
    assert synthetic_model("tiny", weight_type="q8_0", cache_dir=tmp_path) != path
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary files left
    assert read_header(path).get("llama.block_count") == TINY.n_layer


def test_fim_tokens(tmp_path):
    """fim=...: the vocabulary ends with FIM control tokens, named in the metadata; the files without keep their
    cache names (the key grows only when FIM tokens are asked for)."""
    path = write_synthetic("tiny", tmp_path / "fim.gguf", fim=("mid", "pre", "suf"))  # (any order)
    h = read_header(path)
    ids = fim_token_ids(TINY.n_vocab, ("pre", "suf", "mid"))
    assert ids == {"pre": TINY.n_vocab - 3, "suf": TINY.n_vocab - 2, "mid": TINY.n_vocab - 1}
    assert {k: h.get(f"tokenizer.ggml.fim_{k}_token_id") for k in FIM_TEXTS} == {**dict.fromkeys(FIM_TEXTS), **ids}
    tokens, types = h.get("tokenizer.ggml.tokens"), h.get("tokenizer.ggml.token_type")
    assert tokens[-3:] == [FIM_TEXTS["pre"], FIM_TEXTS["suf"], FIM_TEXTS["mid"]] and types[-3:] == [3, 3, 3]
    assert len(set(tokens)) == TINY.n_vocab and set(types[259:-3]) == {1}
    assert read_header(write_synthetic("tiny", tmp_path / "plain.gguf")).get("tokenizer.ggml.fim_pre_token_id") is None
    plain = cached_path("tiny", cache_dir=tmp_path)
    assert "fim" not in plain.name and cached_path("tiny", cache_dir=tmp_path, fim=()) == plain
    with_fim = cached_path("tiny", cache_dir=tmp_path, fim=("pre", "suf", "mid"))
    assert with_fim != plain and with_fim == cached_path("tiny", cache_dir=tmp_path, fim=("suf", "mid", "pre"))
    for bad in (("prefix",), "pre"):
        with pytest.raises(ValueError):
            write_synthetic("tiny", tmp_path / "bad.gguf", fim=bad)
    assert not (tmp_path / "bad.gguf").exists()


def test_rope_kinds(tmp_path):
    """rope=Rope(...): NEOX pairs (an EXAONE file), Llama 3.1's frequency factors (a rope_freqs tensor, the other
    tensors' weights unchanged) and YaRN scaling; llama.cpp loads each, each changes the logits of the same weights,
    and the plain files keep their cache names."""
    kinds = {"neox": Rope(neox=True), "ff": Rope(freq_factors=True), "yarn": Rope(yarn_factor=4.0)}
    paths = {name: write_synthetic("tiny", tmp_path / f"{name}.gguf", rope=rope) for name, rope in kinds.items()}
    assert read_header(paths["neox"]).get("general.architecture") == "exaone"
    ff = {t.name: t for t in read_header(paths["ff"]).tensors}["rope_freqs.weight"]
    assert ff.shape == (TINY.head_dim // 2,)
    yarn = read_header(paths["yarn"])
    assert yarn.get("llama.rope.scaling.type") == "yarn" and yarn.get("llama.rope.scaling.factor") == 4.0
    plain = write_synthetic("tiny", tmp_path / "plain.gguf")
    tokens = list(range(1, 40))
    logits = {}
    for name, path in {"plain": plain, **paths}.items():
        with pyllama90a.Model(path, n_ctx=N_CTX, flash_attn="off") as model:
            logits[name] = model.logits(tokens)[-1]
    for name in kinds:  # (the same weights and ops give the same logits bit for bit: any change is the RoPE's)
        assert np.abs(logits[name] - logits["plain"]).max() > 1e-3, name
    assert "rope" not in cached_path("tiny", cache_dir=tmp_path).name
    assert cached_path("tiny", cache_dir=tmp_path, rope=kinds["ff"]) != cached_path("tiny", cache_dir=tmp_path,
                                                                                     rope=kinds["yarn"])
    for bad in (-1.0, 0.5, float("nan"), True, "4"):
        with pytest.raises(ValueError, match="yarn_factor"):
            Rope(yarn_factor=bad)


def test_failed_write_leaves_nothing(tmp_path):
    bad = Shape("odd-ff", n_embd=256, n_layer=1, n_head=4, n_head_kv=2, n_ff=500, n_vocab=512)
    with pytest.raises(ValueError):
        write_synthetic(bad, tmp_path / "x.gguf", weight_type="q4_0")
    assert list(tmp_path.iterdir()) == []


CHECK_IMPORTS = """
import os, sys, tempfile
path = list(sys.path)
from pyllama90a.tools.synthetic import write_synthetic
write_synthetic("tiny", os.path.join(tempfile.mkdtemp(), "tiny.gguf"))
assert sys.path == path, "sys.path changed"
for name in ("gguf", "yaml"):  # the file writer and its own dependency: installed packages, not stand-ins
    spec = sys.modules[name].__spec__
    assert spec is not None and spec.origin and os.path.isfile(spec.origin), (name, spec)
"""


def test_writing_a_model_uses_installed_packages_only() -> None:
    """synthetic.py once put llama.cpp's gguf-py on sys.path and planted a fake `yaml` in sys.modules for it."""
    out = subprocess.run([sys.executable, "-c", CHECK_IMPORTS], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
