"""frequency_penalty and presence_penalty on a real greedy generation: each token generated is the argmax of
the model's logits after OpenAI's rule (subtract count * frequency_penalty, and presence_penalty once, for
every token already generated), recomputed here step by step; and the penalties do change the output."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

import pyllama90a as pl

PROMPT = "Write the word yes twenty times: yes yes yes yes"  # greedy repeats " yes" for as long as it may
STEPS = 24
LAST_N = 64  # the window the sampler counts tokens in (SamplerChain)
TIE = 1e-3   # steps whose two best penalised logits are closer than this are not compared (rounding)


@pytest.fixture(scope="module")
def model(model_path):
    with pl.Model(model_path, n_ctx=512, n_threads=2) as m:
        yield m


def _expected_choices(model: pl.Model, prompt: list[int], generated: list[int], frequency: float,
                      presence: float) -> tuple[int, int]:
    """(steps compared, steps whose token is the penalised argmax), replaying the generation's tokens."""
    model.truncate(0)
    model.eval(prompt)
    compared = agreed = 0
    for i, token in enumerate(generated):
        logits = model.last_logits().astype(np.float64)
        for seen, n in Counter(generated[max(0, i - LAST_N):i]).items():
            logits[seen] -= n * frequency + presence
        second, best = np.sort(logits)[-2:]
        if best - second >= TIE:
            compared += 1
            agreed += int(np.argmax(logits) == token)
        model.eval([token])
    return compared, agreed


@pytest.mark.parametrize("frequency, presence", [(1.0, 0.0), (0.0, 2.0), (0.5, 0.5), (-1.0, 0.0), (0.0, -2.0)])
def test_each_token_is_the_argmax_after_the_penalties(model, frequency: float, presence: float) -> None:
    prompt = model.tokenize(PROMPT)
    got = model.generate(prompt, max_tokens=STEPS, temperature=0, frequency_penalty=frequency,
                         presence_penalty=presence).tokens
    assert len(got) == STEPS
    compared, agreed = _expected_choices(model, prompt, got, frequency, presence)
    assert compared >= STEPS - 2 and agreed == compared, f"{agreed} of {compared} steps follow the rule"


@pytest.mark.parametrize("frequency, presence", [(1.0, 0.0), (0.0, 2.0), (0.5, 0.5)])
def test_positive_penalties_break_the_repetition(model, frequency: float, presence: float) -> None:
    prompt = model.tokenize(PROMPT)
    plain = model.generate(prompt, max_tokens=STEPS, temperature=0).tokens
    assert len(set(plain)) == 1  # " yes" every time: what the penalties act on
    penalised = model.generate(prompt, max_tokens=STEPS, temperature=0, frequency_penalty=frequency,
                               presence_penalty=presence).tokens
    assert len(set(penalised)) > STEPS // 2
    assert model.detokenize(penalised).startswith(" yes")  # the first token has nothing to be penalised for


def test_frequency_grows_with_the_count_and_presence_does_not(model) -> None:
    """At 1.0 the frequency penalty leaves ' yes' after two (count 2 beats the margin); a presence penalty of
    1.5, flat however often ' yes' came, never outweighs it."""
    prompt = model.tokenize(PROMPT)
    plain = model.generate(prompt, max_tokens=STEPS, temperature=0).tokens
    assert model.generate(prompt, max_tokens=STEPS, temperature=0, presence_penalty=1.5).tokens == plain
    assert model.generate(prompt, max_tokens=STEPS, temperature=0, frequency_penalty=1.0).tokens != plain


@pytest.mark.parametrize("field", ["frequency_penalty", "presence_penalty"])
@pytest.mark.parametrize("value", [-2.5, 2.5, float("nan")])
def test_out_of_range_penalties_are_refused(model, field: str, value: float) -> None:
    with pytest.raises(pl.InvalidArgumentError, match=field):
        model.generate("Hi", max_tokens=1, **{field: value})
