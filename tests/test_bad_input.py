"""Bad input gives a clear exception from pyllama90a.errors: never a crash, hang or abort."""
from __future__ import annotations

import shutil
import struct

import pytest

import pyllama90a as pl
from pyllama90a.errors import ModelFormatError, StateFileError


def test_missing_file(tmp_path) -> None:
    with pytest.raises(ModelFormatError, match="no such file"):
        pl.Model(tmp_path / "nope.gguf")


def test_directory(tmp_path) -> None:
    with pytest.raises(ModelFormatError, match="is a directory"):
        pl.Model(tmp_path)


def test_not_gguf(tmp_path) -> None:
    p = tmp_path / "x.gguf"
    p.write_bytes(b"this is not a model at all" * 10)
    with pytest.raises(ModelFormatError, match="not a GGUF file"):
        pl.Model(p)


@pytest.mark.parametrize("keep_bytes", [100_000, 50_000_000])  # cut in the header; cut in the tensor data
def test_truncated_gguf(model_path, tmp_path, keep_bytes: int) -> None:
    p = tmp_path / "cut.gguf"
    with open(model_path, "rb") as src, open(p, "wb") as dst:
        dst.write(src.read(keep_bytes))
    with pytest.raises(ModelFormatError, match="truncated"):
        pl.Model(p)


def test_absurd_tensor_count(model_path, tmp_path) -> None:
    p = tmp_path / "absurd.gguf"
    shutil.copy(model_path, p)
    with open(p, "r+b") as f:
        f.seek(8)
        f.write(struct.pack("<Q", 1 << 60))
    with pytest.raises(ModelFormatError, match="tensor_count|absurd"):
        pl.Model(p)


def test_unknown_kv_type_lists_the_valid_ones(model_path) -> None:
    with pytest.raises(pl.InvalidArgumentError, match="q4_0.*iq4_nl"):
        pl.Model(model_path, ctv="q3_k")
    with pytest.raises(pl.InvalidArgumentError, match="unknown K cache type"):
        pl.Model(model_path, ctk=8)


def test_block_size_must_divide_head_dim(tmp_path) -> None:
    from pyllama90a.synthetic import Shape, write_synthetic

    # head_dim 48 is not a multiple of the 32-value blocks of q4_0
    path = write_synthetic(Shape("hd48", n_embd=192, n_layer=1, n_head=4, n_head_kv=2, n_ff=256, n_vocab=300),
                           tmp_path / "hd48.gguf", weight_type="f16")
    with pytest.raises(pl.InvalidArgumentError, match="do not divide this model's head dimension 48"):
        pl.Model(path, ctk="f16", ctv="q4_0", flash_attn="off")
    with pl.Model(path, ctk="f16", ctv="f16", n_ctx=64) as m:  # f16 is fine (random weights: any output)
        assert m.generate("hi", max_tokens=2, temperature=0).finish_reason in ("stop", "length")


@pytest.mark.parametrize("bad", [0, -1, 1.5, "512", True])
def test_bad_n_ctx(model_path, bad) -> None:
    with pytest.raises(pl.InvalidArgumentError, match="n_ctx"):
        pl.Model(model_path, n_ctx=bad)


def test_n_ctx_over_training_context_warns(model_path) -> None:
    with pytest.warns(UserWarning, match="over the 8192 tokens"):
        with pl.Model(model_path, n_ctx=8192 + 256) as m:
            assert m.n_ctx >= 8192 + 256


def test_bad_flash_attn(model_path) -> None:
    with pytest.raises(pl.InvalidArgumentError, match="flash_attn"):
        pl.Model(model_path, flash_attn="yes")


def test_prompt_longer_than_context_names_both_numbers(model_path) -> None:
    with pl.Model(model_path, n_ctx=256) as m:
        prompt = "word " * 400
        n = len(m.tokenize(prompt))
        with pytest.raises(pl.ContextOverflowError, match=f"{n} tokens.*n_ctx={m.n_ctx}"):
            m.generate(prompt)
        # the model is still usable afterwards
        assert m.generate("Hi", max_tokens=2, temperature=0).usage.completion_tokens == 2


def test_generation_stops_at_the_end_of_the_context(model_path) -> None:
    with pl.Model(model_path, n_ctx=256) as m:
        counting = ", ".join(str(i) for i in range(1, 50)) + ","  # greedy decoding keeps counting
        out = m.generate(counting, max_tokens=200, temperature=0)
        assert out.finish_reason == "length"
        assert out.usage.completion_tokens < 200
        assert out.usage.total_tokens == m.n_ctx


def test_empty_and_non_str_prompts(model) -> None:
    with pytest.raises(pl.InvalidArgumentError, match="empty"):
        model.generate("")
    for bad in (None, 42, b"bytes", ["list"], [], [1.5]):
        with pytest.raises(pl.InvalidArgumentError, match="must be a str or a list of token ids"):
            model.generate(bad)


@pytest.mark.parametrize("kwargs", [
    {"temperature": -1}, {"temperature": float("nan")}, {"top_p": 1.5}, {"top_k": -3}, {"min_p": 2},
    {"repeat_penalty": 0}, {"max_tokens": 0}, {"max_tokens": -5}, {"max_tokens": 2.5}, {"seed": -1},
    {"stop": [""]}, {"stop": [3]}, {"temperature": "hot"},
])
def test_invalid_sampling_values(model, kwargs) -> None:
    with pytest.raises(pl.InvalidArgumentError):
        model.generate("Hello", **kwargs)


def test_embed_needs_an_embedding_model(model) -> None:
    with pytest.raises(pl.InvalidArgumentError, match="embedding=True"):
        model.embed("hello")


def test_bad_chat_messages(model) -> None:
    for bad in ([], "hi", [{"role": "user"}], [{"role": 1, "content": "x"}], [["user", "hi"]]):
        with pytest.raises(pl.InvalidArgumentError):
            model.chat(bad)


def test_bad_tokens(model) -> None:
    with pytest.raises(pl.InvalidArgumentError, match="tokens must be integers"):
        model.detokenize([10**9])
    with pytest.raises(pl.InvalidArgumentError):
        model.logits([-1])


def test_load_state_errors(model_path, tmp_path) -> None:
    with pl.Model(model_path, n_ctx=128) as m:
        with pytest.raises(StateFileError, match="no such file"):
            m.load_state(tmp_path / "missing.bin")
        junk = tmp_path / "junk.bin"
        junk.write_bytes(b"\0" * 100)
        with pytest.raises(StateFileError, match="not a pyllama90a state file"):
            m.load_state(junk)
        assert m.generate("Hi", max_tokens=2, temperature=0).usage.completion_tokens == 2
