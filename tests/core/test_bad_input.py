"""Bad input gives a clear exception from pyllama90a.errors: never a crash, hang or abort."""
from __future__ import annotations

import os
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


def test_fifo_is_refused_at_once(model_path, tmp_path) -> None:
    """A FIFO used to hang the header reader forever. Here it has a writer and the GGUF's first bytes waiting
    in it, so even a reader that opened it would not block: the test fails on a wrong answer, never hangs."""
    fifo = tmp_path / "model.gguf"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    try:
        with open(model_path, "rb") as f:
            os.write(writer, f.read(4096))
        with pytest.raises(ModelFormatError, match="is a FIFO, not a regular file"):
            pl.Model(fifo)
    finally:
        os.close(writer)


def test_device_is_refused(tmp_path) -> None:
    with pytest.raises(ModelFormatError, match="is a character device, not a regular file"):
        pl.Model("/dev/zero")


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
    with pytest.raises(ModelFormatError, match=r"tensor_count|absurd"):
        pl.Model(p)


def test_unknown_kv_type_lists_the_valid_ones(model_path) -> None:
    with pytest.raises(pl.InvalidArgumentError, match=r"q4_0.*iq4_nl"):
        pl.Model(model_path, ctv="q3_k")
    with pytest.raises(pl.InvalidArgumentError, match="unknown K cache type"):
        pl.Model(model_path, ctk=8)


def test_block_size_must_divide_head_dim(tmp_path) -> None:
    from pyllama90a.tools.synthetic import Shape, write_synthetic

    # head_dim 48 is not a multiple of the 32-value blocks of q4_0
    path = write_synthetic(Shape("hd48", n_embd=192, n_layer=1, n_head=4, n_head_kv=2, n_ff=256, n_vocab=300),
                           tmp_path / "hd48.gguf", weight_type="f16")
    with pytest.raises(pl.InvalidArgumentError, match="do not divide this model's head dimension 48"):
        pl.Model(path, ctk="f16", ctv="q4_0", flash_attn="off")
    with pl.Model(path, ctk="f16", ctv="f16", n_ctx=64) as m:  # f16 is fine (random weights: any output)
        assert m.generate("hi", max_tokens=2, temperature=0).finish_reason in ("stop", "length")


@pytest.mark.parametrize("bad", [0, -1, 1.5, "512", True, 2**40, 2**32, 2**31])
def test_bad_n_ctx(model_path, bad) -> None:
    with pytest.raises(pl.InvalidArgumentError, match="n_ctx"):
        pl.Model(model_path, n_ctx=bad)


@pytest.mark.parametrize("kwargs, match", [
    # values cffi cannot fit in the C fields (uint32/int32) raised OverflowError
    ({"n_threads": 2**31}, "n_threads"), ({"n_gpu_layers": 2**31}, "n_gpu_layers"),
    ({"n_gpu_layers": -2}, "n_gpu_layers"), ({"n_gpu_layers": "all"}, "n_gpu_layers"),
    ({"n_batch": 2**31}, "n_batch"), ({"n_ubatch": 0}, "n_ubatch"), ({"seed": 2**32}, "seed"),
    # more threads than CPUs only wait for each other (10,000 made a tiny generation take 38 s)
    ({"n_threads": (os.cpu_count() or 1) + 1}, "logical CPUs"),
    # llama.cpp aborted the process (n_outputs_max assert) or refused
    ({"n_ctx": 128, "n_seq_max": 256}, "n_ctx must be at least 65536"),
    ({"n_ctx": 4096, "n_seq_max": 32}, "n_ctx must be at least 8192"),
    ({"n_ctx": 2**20, "n_seq_max": 257}, "at most 256"),
    ({"n_ctx": 4096, "n_batch": 2, "n_seq_max": 4}, "n_batch=2 must be at least n_seq_max=4"),
    ({"n_seq_max": 0}, "n_seq_max"),
    # wrong kinds
    ({"flash_attn": []}, "flash_attn"), ({"embedding": "yes"}, "embedding"),
])
def test_bad_model_arguments(model_path, kwargs: dict, match: str) -> None:
    with pytest.raises(pl.InvalidArgumentError, match=match):
        pl.Model(model_path, **kwargs)


@pytest.mark.parametrize("path, match", [("/tmp/a\0b.gguf", "NUL"), (5, "os.PathLike"), ("", "empty")])
def test_bad_model_path(path, match: str) -> None:
    with pytest.raises(pl.InvalidArgumentError, match=match):
        pl.Model(path)


def test_several_sequences_within_the_limits_work(model_path) -> None:
    with pl.Model(model_path, n_ctx=1024, n_seq_max=4, n_batch=4) as m:
        assert m.n_ctx_seq == 256
        assert m.generate("Hi", max_tokens=2, temperature=0).usage.completion_tokens == 2


def test_n_ctx_over_training_context_warns(model_path) -> None:
    with pytest.warns(UserWarning, match="over the 8192 tokens"), pl.Model(model_path, n_ctx=8192 + 256) as m:
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
    {"temperature": float("inf")}, {"top_p": float("nan")}, {"min_p": float("-inf")}, {"top_k": 2**31},
    {"top_k": 10**30}, {"seed": 2**32}, {"seed": 2**64}, {"repeat_penalty": 10**400},
    {"frequency_penalty": float("nan")}, {"presence_penalty": 3}, {"max_tokens": 2**31}, {"max_tokens": 10**5000},
    {"stop": 5}, {"stop": [None]}, {"stop": "\udc00"}, {"stream": 1}, {"top_k": True},
])
def test_invalid_sampling_values(model, kwargs) -> None:
    with pytest.raises(pl.InvalidArgumentError, match=next(iter(kwargs))):
        model.generate("Hello", **kwargs)
    with pytest.raises(pl.InvalidArgumentError, match=next(iter(kwargs))):
        model.chat([{"role": "user", "content": "Hello"}], **kwargs)


def test_stop_none_means_no_stop_strings(model) -> None:
    none = model.generate("Count: 1, 2, 3,", max_tokens=6, temperature=0, stop=None)
    empty = model.generate("Count: 1, 2, 3,", max_tokens=6, temperature=0, stop=())
    assert none.tokens == empty.tokens and none.finish_reason == "length"


LONE_SURROGATE = "caf\udce9"  # what a bytes -> str decode with surrogateescape leaves behind

METHOD_CALLS = {
    # lone surrogates raised UnicodeEncodeError; NULs would be cut off silently by C
    "prompt surrogate": (lambda m: m.generate(LONE_SURROGATE, max_tokens=1), "not valid Unicode"),
    "tokenize surrogate": (lambda m: m.tokenize(LONE_SURROGATE), "not valid Unicode"),
    "chat content surrogate": (lambda m: m.chat([{"role": "user", "content": LONE_SURROGATE}]), "content"),
    "chat role surrogate": (lambda m: m.chat([{"role": LONE_SURROGATE, "content": "hi"}]), "role"),
    "chat content not text": (lambda m: m.apply_chat_template([{"role": "user", "content": 3}]), "content"),
    "metadata surrogate": (lambda m: m.metadata(LONE_SURROGATE), "not valid Unicode"),
    "metadata NUL": (lambda m: m.metadata("general.name\0x"), "NUL"),
    # wrong kinds raised TypeError or AttributeError
    "metadata int": (lambda m: m.metadata(5), "key must be a str"),
    "tokenize None": (lambda m: m.tokenize(None), "text must be a str"),
    "tokenize flag": (lambda m: m.tokenize("x", add_special="yes"), "add_special"),
    "detokenize None": (lambda m: m.detokenize(None), "tokens"),
    "detokenize bools": (lambda m: m.detokenize([True]), "tokens"),
    "detokenize flag": (lambda m: m.detokenize([5], special=None), "special"),
    "eval None": (lambda m: m.eval(None), "tokens"),
    "logits str": (lambda m: m.logits("abc"), "tokens"),
    "truncate str": (lambda m: m.truncate("1"), "n_tokens"),
    "truncate huge": (lambda m: m.truncate(2**70), "n_tokens"),
    "save_state None": (lambda m: m.save_state(None), "path"),
    "load_state int": (lambda m: m.load_state(5), "path"),
    "save_state NUL": (lambda m: m.save_state("/tmp/a\0b"), "NUL"),
}


@pytest.mark.parametrize("name", METHOD_CALLS)
def test_bad_method_arguments(model, name: str) -> None:
    call, match = METHOD_CALLS[name]
    with pytest.raises(pl.InvalidArgumentError, match=match):
        call(model)
    assert model.generate("Hi", max_tokens=2, temperature=0).usage.completion_tokens == 2


@pytest.fixture(scope="module")
def embedder(model_path):
    with pl.Model(model_path, embedding=True, n_ctx=256) as m:
        yield m


@pytest.mark.parametrize("bad", [None, 5, b"bytes", [], [""], ["ok", None], LONE_SURROGATE, ["ok", LONE_SURROGATE]])
def test_bad_embed_arguments(embedder, bad) -> None:
    with pytest.raises(pl.InvalidArgumentError, match=r"embed|text"):
        embedder.embed(bad)
    assert embedder.embed("ok").shape == (576,)


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


def test_a_bidirectional_decode_over_n_ubatch_is_refused_not_an_abort(model_path) -> None:
    # with non-causal attention (BERT-like embedding models) llama.cpp cannot split a batch into micro-batches
    # and asserts, killing the process, on one over n_ubatch; set_causal_attn(False) makes SmolLM2's context so
    with pl.Model(model_path, embedding=True, n_ctx=1024, n_batch=1024, n_ubatch=128) as m:
        with m.hold_context("this test") as context:
            context.set_causal_attn(False)
            assert context.max_decode_tokens == 128
            with pytest.raises(pl.InvalidArgumentError, match="n_ubatch"):
                context.decode_tokens(m.tokenize("word " * 200))
        with pytest.raises(pl.ContextOverflowError, match="at most 128"):
            m.embed("word " * 200)
        assert m.embed("a short text").shape == (576,)


def test_an_embedding_over_one_micro_batch_is_refused_not_pooled_from_its_tail(model_path) -> None:
    # a causal model decodes 211 tokens as 128 + 83 when n_ubatch is 128, and llama.cpp pools each micro-batch on
    # its own: the vector was the mean of the last 83 tokens (cosine 0.26 against the whole text's at 210 + 1)
    text = "The quick brown fox jumps over the lazy dog. " * 20 + "Quantum chromodynamics describes quarks."
    with pl.Model(model_path, embedding=True, n_ctx=1024, n_batch=512, n_ubatch=128) as m:
        assert len(m.tokenize(text)) > 128
        with pytest.raises(pl.ContextOverflowError, match=r"at most 128 \(one micro-batch, n_ubatch=128"):
            m.embed(text)
        whole = m.with_context(embedding=True, n_ctx=1024, n_batch=512, n_ubatch=512)
        try:
            assert whole.embed(text).shape == (576,)
        finally:
            whole.close()
    # several sequences: one sequence's cells (a DecodeError with llama.cpp's log before)
    with pl.Model(model_path, embedding=True, n_ctx=1024, n_seq_max=4) as m, \
            pytest.raises(pl.ContextOverflowError, match="256 cells"):
        m.embed("word " * 300)
