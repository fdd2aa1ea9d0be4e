"""Special tokens in a text split it in linear time (patch 0021): the tokens are those of the text between
them, tokenized alone, with each special token's id in its place; a text of 200,000 special tokens is
tokenized in well under the time the quadratic split took (about 70 s on 2 cores, extrapolated from 2.8 s
for 40,000: a request could hold the tokenizer, and every other request, for an hour)."""
from __future__ import annotations

import re
import time

import pytest

import pyllama90a as pl

SPECIALS = ("<|im_start|>", "<|im_end|>", "<|endoftext|>")


def _piecewise(m: pl.Model, text: str) -> list[int]:
    """`text` tokenized fragment by fragment: the text between special tokens alone, each special by its id."""
    tokens: list[int] = []
    for part in re.split("(" + "|".join(map(re.escape, SPECIALS)) + ")", text):
        if part in SPECIALS:
            tokens += m.tokenize(part, add_special=False, parse_special=True)
        elif part:
            tokens += m.tokenize(part, add_special=False)
    return tokens


@pytest.mark.parametrize("text", [
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
    "a<|im_end|>b<|im_end|><|im_end|> c <|endoftext|>  \n<|im_start|>",
    "<|im_end|>" * 3 + "words between" + "<|im_start|>" * 2 + " trailing space ",
    "no special tokens at all, only text.",
    "<|im_end|x|> <|im_end| |im_end|> <|im_end|>",  # near misses stay text
], ids=["chat", "adjacent", "runs", "none", "near-misses"])
def test_special_tokens_split_the_text_in_place(model, text) -> None:
    assert all(len(model.tokenize(s, add_special=False, parse_special=True)) == 1 for s in SPECIALS)
    assert model.tokenize(text, add_special=False, parse_special=True) == _piecewise(model, text)


def test_many_special_tokens_are_split_in_linear_time(model) -> None:
    im_end = model.tokenize("<|im_end|>", add_special=False, parse_special=True)
    start = time.monotonic()
    tokens = model.tokenize("<|im_end|>x" * 200_000, add_special=False, parse_special=True)
    took = time.monotonic() - start
    assert tokens == (im_end + model.tokenize("x", add_special=False)) * 200_000
    assert took < 10, f"200,000 special tokens took {took:.1f} s"
