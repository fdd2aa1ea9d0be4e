"""Model.metadata: llama.cpp's view of the GGUF key/values, checked against the file's header read in Python."""
from __future__ import annotations

import pytest

import pyllama90a as pl
from pyllama90a.core.gguf.header import read_header


def test_known_keys_of_the_default_model(model) -> None:
    assert model.metadata("general.architecture") == "llama"
    assert model.metadata("llama.block_count") == "30"
    assert model.metadata("llama.attention.head_count_kv") == "3"
    assert model.metadata("tokenizer.ggml.model") == "gpt2"
    assert "{% for message in messages %}" in model.metadata("tokenizer.chat_template")


def test_every_scalar_key_matches_the_header(model, model_path) -> None:
    """Strings as they are, integers and booleans as llama.cpp prints them, floats to its 6 decimals."""
    header = read_header(model_path)
    checked = 0
    for key, value in header.metadata.items():
        got = model.metadata(key)
        if isinstance(value, bool):
            assert got == ("true" if value else "false"), key
        elif isinstance(value, int):
            assert got == str(value), key
        elif isinstance(value, float):
            assert got is not None and float(got) == pytest.approx(value, abs=1e-6, rel=1e-6), key
        elif isinstance(value, str):
            assert got == value, key
        else:
            continue  # arrays
        checked += 1
    assert checked >= 25  # this model has 29 scalar keys


def test_a_missing_key_is_none(model) -> None:
    assert model.metadata("no.such.key") is None
    assert model.metadata("") is None


@pytest.mark.parametrize("key", [123, None, b"general.name", ["general.name"]])
def test_a_key_that_is_not_a_str_is_refused(model, key) -> None:
    with pytest.raises(pl.InvalidArgumentError, match="key must be a str"):
        model.metadata(key)


def test_a_key_with_a_nul_is_refused(model) -> None:
    with pytest.raises(pl.InvalidArgumentError, match="NUL"):
        model.metadata("general\0.name")


def test_a_closed_model_refuses(model_path) -> None:
    m = pl.Model(model_path, n_ctx=128)
    m.close()
    with pytest.raises(pl.ClosedError):
        m.metadata("general.architecture")
