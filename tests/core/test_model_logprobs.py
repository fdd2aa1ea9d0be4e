"""Model.generate and chat with logprobs (issue 44): each generated token's TokenLogprob (and its N most likely
alternatives) on the streamed pieces and on the Completion, the same numbers as BatchEngine's and as a log-softmax
of the model's own logits, kept with their tokens through chat's reasoning and tool-call splitters, and bad values
refused as the engine and the server refuse them."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import pyllama90a as pl
from pyllama90a.core.generation.request import MAX_TOP_LOGPROBS
from pyllama90a.core.generation.sequence import TokenLogprob
from pyllama90a.errors import InvalidArgumentError
from support.weather_tools import WEATHER

QWQ = (Path(__file__).resolve().parents[1] / "data" / "qwq-32b.jinja").read_text()  # (its prompt opens <think>)
PROMPT = "The capital of France is"
ASK = [{"role": "user", "content": "What is 2+2?"}]
N_TOP = 5


def _log_softmax(row: np.ndarray) -> np.ndarray:
    row = row.astype(np.float64)
    shifted = row - row.max()
    return shifted - math.log(float(np.exp(shifted).sum()))


def _fresh(model: pl.Model) -> pl.Model:
    """`model` with an empty cache: its next prompt is decoded whole, as the compared run's was. (A cached prefix
    changes the batches the rest is decoded in, and ggml's CPU kernels round a 1-token batch differently: the
    same tokens, logprobs a little apart.)"""
    model.truncate(0)
    return model


def _aligned(pieces: list[pl.Piece]) -> list[TokenLogprob]:
    """The pieces' logprobs, each piece's checked to be those of its own tokens."""
    for p in pieces:
        assert [lp.token for lp in p.logprobs] == p.tokens, (p.text, p.reasoning, p.tokens)
    return [lp for p in pieces for lp in p.logprobs]


def test_greedy_logprobs_are_the_models_distribution(model) -> None:
    done = _fresh(model).generate(PROMPT, max_tokens=12, temperature=0, logprobs=N_TOP)  # (no ignore_eos: below)
    assert done.logprobs is not None and [lp.token for lp in done.logprobs] == done.tokens and len(done.tokens) == 12
    assert all(isinstance(lp, pl.TokenLogprob) for lp in done.logprobs)  # a public name, as Completion and Piece
    # the reference: the logits after the prompt and after each generated token, decoded one at a time as the
    # generation decodes them, through numpy's own log-softmax. (A banned token, as ignore_eos bans the end of
    # generation, takes no probability: the logprobs are of the distribution sampled from, bias and mask applied.)
    model.logits(model.prompt_tokens(PROMPT))
    for token, lp in zip(done.tokens, done.logprobs, strict=True):
        expected = _log_softmax(model.last_logits())
        assert lp.piece == model.handle.token_piece(token)
        assert lp.logprob == pytest.approx(expected[token], abs=1e-4)
        assert lp.logprob <= 0
        ids = [t for t, _, _ in lp.top]
        values = [v for _, _, v in lp.top]
        assert len(ids) == N_TOP and ids[0] == token  # greedy: the chosen token is the most likely one
        assert values == sorted(values, reverse=True) and values == pytest.approx(expected[ids], abs=1e-4)
        assert values[-1] >= np.sort(expected)[-N_TOP] - 1e-4  # the N most likely, none left out
        assert values[0] == lp.logprob and sum(math.exp(v) for v in values) <= 1 + 1e-6
        assert [b for _, b, _ in lp.top] == [model.handle.token_piece(t) for t in ids]
        model.eval([token])


def test_logprobs_zero_and_the_bound(model) -> None:
    zero = model.generate(PROMPT, max_tokens=6, temperature=0, logprobs=0)
    assert zero.logprobs is not None and len(zero.logprobs) == len(zero.tokens)
    assert all(lp.top == () for lp in zero.logprobs)
    most = model.generate(PROMPT, max_tokens=3, temperature=0, logprobs=MAX_TOP_LOGPROBS)
    assert most.logprobs is not None and all(len(lp.top) == MAX_TOP_LOGPROBS for lp in most.logprobs)
    assert [lp.logprob for lp in most.logprobs] == [lp.logprob for lp in zero.logprobs[:3]]


def test_without_logprobs_none_are_reported(model) -> None:
    assert model.generate(PROMPT, max_tokens=4, temperature=0).logprobs is None
    pieces = list(model.generate(PROMPT, max_tokens=4, temperature=0, stream=True))
    assert all(p.logprobs == () for p in pieces) and pieces[-1].completion.logprobs is None


def test_streamed_pieces_carry_the_logprobs_of_their_tokens(model) -> None:
    # 🦙 is three tokens none of which is a whole character: pieces that wait for several tokens carry them all
    prompt = "Repeat exactly: 🦙🦙🦙 ünïcödé 🦙🦙🦙\nRepeat exactly:"
    whole = _fresh(model).generate(prompt, max_tokens=30, temperature=0, logprobs=2)
    pieces = list(_fresh(model).generate(prompt, max_tokens=30, temperature=0, logprobs=2, stream=True))
    assert any(len(p.tokens) > 1 for p in pieces), "no piece waited for a second token: nothing was held back"
    streamed = _aligned(pieces)
    assert streamed == list(pieces[-1].completion.logprobs) == list(whole.logprobs)
    assert len(streamed) == len(whole.tokens)


def test_the_same_logprobs_as_the_engine(model, model_path) -> None:
    options = {"max_tokens": 16, "temperature": 0, "ignore_eos": True, "logprobs": 3}
    done = _fresh(model).generate(PROMPT, **options)
    with pl.BatchEngine(model_path, n_ctx=1024, parallel=1) as engine:
        chunks = list(engine.stream(PROMPT, **options))
        for bad in (-1, MAX_TOP_LOGPROBS + 1, 1.5, True):  # (the engine's refusal, for the comparison below)
            with pytest.raises(InvalidArgumentError, match="logprobs"):
                engine.submit(PROMPT, lambda chunk: None, logprobs=bad)
    engines = [lp for chunk in chunks for lp in chunk.logprobs]
    assert done.logprobs is not None and len(engines) == len(done.logprobs) == 16
    for mine, theirs in zip(done.logprobs, engines, strict=True):
        assert (mine.token, mine.piece) == (theirs.token, theirs.piece)
        assert mine.logprob == pytest.approx(theirs.logprob, abs=1e-5)
        assert [t for t, _, _ in mine.top] == [t for t, _, _ in theirs.top]
        assert [v for _, _, v in mine.top] == pytest.approx([v for _, _, v in theirs.top], abs=1e-5)


@pytest.fixture(scope="module")
def qwq(model):
    """The model's weights with QwQ's thinking template: the prompt opens the block, the budget ends it."""
    with model.with_context(n_ctx=1024, chat_template=QWQ) as m:
        yield m


def test_chat_reasoning_keeps_one_logprob_per_token(qwq) -> None:
    # the 135M model ends its answer right after the forced end marker: ignore_eos makes it answer too
    options = {"temperature": 0, "max_tokens": 20, "reasoning_budget": 5, "ignore_eos": True, "logprobs": 1}
    whole = _fresh(qwq).chat(ASK, **options)
    pieces = list(_fresh(qwq).chat(ASK, stream=True, **options))
    streamed = _aligned(pieces)
    assert [lp.token for lp in streamed] == whole.tokens == pieces[-1].completion.tokens
    assert streamed == list(whole.logprobs) == list(pieces[-1].completion.logprobs)
    # the thinking's pieces carry the thinking's tokens, the content's the rest (the marker held back before it)
    thinking = [lp.token for p in pieces if p.reasoning for lp in p.logprobs]
    content = [lp.token for p in pieces if not p.reasoning for lp in p.logprobs]
    assert whole.reasoning and whole.text  # (both sides of the split ran)
    assert qwq.detokenize(thinking).strip() == whole.reasoning
    assert qwq.detokenize(content).endswith(whole.text) and "</think>" in qwq.detokenize(content)
    # after the budget's 5 tokens, the forced end marker: the only choice, logprob 0
    end = qwq.tokenize("</think>", add_special=False, parse_special=True)
    assert [(lp.token, lp.logprob, len(lp.top)) for lp in streamed[5:5 + len(end)]] == [(t, 0.0, 1) for t in end]


def test_chat_tool_calls_keep_one_logprob_per_token(qwq) -> None:
    options = {"temperature": 0, "max_tokens": 80, "reasoning_budget": 6, "tools": [WEATHER],
               "tool_choice": "required", "logprobs": 0}
    whole = _fresh(qwq).chat(ASK, **options)
    assert whole.finish_reason == "tool_calls" and whole.logprobs is not None
    pieces = list(_fresh(qwq).chat(ASK, stream=True, **options))
    assert any(p.tool_calls for p in pieces)
    streamed = _aligned(pieces)
    assert [lp.token for lp in streamed] == whole.tokens
    assert streamed == list(whole.logprobs) == list(pieces[-1].completion.logprobs)
    calls = [(c.name, c.arguments) for c in pieces[-1].completion.tool_calls]
    assert calls == [(c.name, c.arguments) for c in whole.tool_calls]  # (the ids are random)


def test_speculative_decoding_reports_every_kept_tokens_logprob(model, model_path) -> None:
    prompt = "Repeat: one two three four five six seven eight nine ten.\nRepeat: one two three four"
    plain = _fresh(model).generate(prompt, max_tokens=20, temperature=0, logprobs=1)
    with pl.Model(model_path, n_ctx=1024, speculative=pl.Speculation()) as speculating:
        drafted = speculating.generate(prompt, max_tokens=20, temperature=0, logprobs=1)
    assert drafted.usage.draft_accepted > 0  # (steps over a draft's rows ran)
    assert drafted.logprobs is not None and [lp.token for lp in drafted.logprobs] == drafted.tokens == plain.tokens
    # a draft's rows come from a batch of several tokens, which rounds differently (docs/api.md: up to 0.12)
    assert [lp.logprob for lp in drafted.logprobs] == pytest.approx([lp.logprob for lp in plain.logprobs], abs=0.15)


@pytest.mark.parametrize("bad", [-1, MAX_TOP_LOGPROBS + 1, 2.0, "3", True])
def test_bad_logprobs_are_refused(model, bad) -> None:
    with pytest.raises(InvalidArgumentError, match="logprobs") as refused:
        model.generate(PROMPT, max_tokens=2, logprobs=bad)
    assert refused.value.param == "logprobs"
    with pytest.raises(InvalidArgumentError, match="logprobs"):
        model.chat(ASK, max_tokens=2, logprobs=bad)
