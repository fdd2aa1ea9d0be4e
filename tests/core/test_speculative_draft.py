"""Speculative decoding with a draft model: the default model drafts for itself (so nearly every drafted token is
kept), the output is plain decoding's (Model and BatchEngine), a draft whose vocabulary is not the target's is
refused by llama.cpp's rules, and the bench's deeper target has its source's logits."""
from __future__ import annotations

import time

import numpy as np
import pytest

import pyllama90a as pl
from pyllama90a.bench.speculative import INVENTORY
from pyllama90a.tools.synthetic import synthetic_model
from pyllama90a.tools.synthetic_target import write_deeper_target

# code the answer repeats. flash_attn off and f32 K/V: on the CPU a batch's logits are then a one-token decode's
# (with f16 K/V a batch of 4 or more tokens rounds differently, up to 0.6 in a logit), so the draft's greedy tokens
# (decoded one at a time) are the target's, and the output is plain decoding's
EDIT = [{"role": "user", "content": f"Here is a Python class:\n\n```python\n{INVENTORY}```\n\nAdd a docstring to the "
                                    f"method `total` and show the complete code."}]
SETTINGS = {"n_ctx": 1024, "n_threads": 1, "flash_attn": "off", "ctk": "f32", "ctv": "f32"}  # (1 thread: 2 cores)
DRAFT_KV = {"draft_ctk": "f32", "draft_ctv": "f32"}


def _chat(model: pl.Model) -> pl.Completion:
    completion = model.chat(EDIT, max_tokens=80, temperature=0)
    assert isinstance(completion, pl.Completion)
    return completion


def test_greedy_output_is_plain_decoding_with_the_model_as_its_own_draft(model_path) -> None:
    with pl.Model(model_path, **SETTINGS) as plain:
        expected = _chat(plain)
    with pl.Model(model_path, speculative=pl.Speculation(draft=model_path, **DRAFT_KV), **SETTINGS) as model:
        assert model.speculative is not None and model.speculative.spec_type == "draft-simple"
        got = _chat(model)
        # the target's cells of rejected drafts were dropped: a decode after its tokens has consecutive positions
        assert model.n_cached == got.usage.prompt_tokens + len(got.tokens) - 1
        model.eval([got.tokens[-1]])
        again = _chat(model)  # (the draft's cells of the first generation are reused or rolled back, not stale)
    assert got.tokens == expected.tokens and got.text == expected.text and again.tokens == expected.tokens
    for usage in (got.usage, again.usage):
        # the same model drafts: it guesses the target's own tokens, all but a rare near-tie
        assert usage.draft_tokens > len(got.tokens) // 2 and usage.draft_accepted >= 0.9 * usage.draft_tokens


def test_batch_engine_drafts_on_each_slots_sequence(model_path) -> None:
    with pl.Model(model_path, **SETTINGS) as plain:
        expected = _chat(plain)
        # draft=<a loaded Model>: its weights get a context of their own; the Model stays the caller's
        with pl.BatchEngine(model_path, parallel=2, n_ctx=2048, n_threads=1, flash_attn="off", ctk="f32", ctv="f32",
                            speculative=pl.Speculation(draft=plain, **DRAFT_KV)) as engine:
            prompt = engine.chat_prompt(EDIT)
            results: list[list[pl.Chunk]] = [[], []]
            handles = [engine.submit(prompt, results[i].append, max_tokens=80, temperature=0) for i in range(2)]
            for chunks in results:  # both slots generate at once, each with its own draft sequence
                while not chunks or chunks[-1].finish_reason is None:
                    time.sleep(0.05)
            del handles
            stats = engine.stats()
        assert plain.n_ctx == 1024  # (the caller's Model is untouched, and still usable)
    for chunks in results:
        assert chunks[-1].error is None
        assert [t for c in chunks for t in c.tokens] == expected.tokens
        usage = chunks[-1].usage
        assert usage is not None and usage.draft_accepted >= 0.9 * usage.draft_tokens > 0
    assert stats.draft_tokens_total == sum(c[-1].usage.draft_tokens for c in results)  # type: ignore[union-attr]


def test_a_draft_with_another_vocabulary_is_refused(model_path) -> None:
    tiny = synthetic_model("tiny")  # a SentencePiece-style ("llama") vocabulary of made-up tokens
    with pytest.raises(pl.DraftModelError, match=r"vocabulary type is 'llama', the target's 'gpt2'") as caught:
        pl.Model(model_path, n_ctx=256, speculative=pl.Speculation(draft=tiny))
    assert caught.value.param == "draft"
    with pytest.raises(pl.DraftModelError, match="GGUF path or a Model"):
        pl.Model(model_path, n_ctx=256, speculative=pl.Speculation(draft=42))


@pytest.mark.parametrize("kwargs", [{"spec_type": "ngram-simple", "draft": "x.gguf"}, {"spec_type": "draft-simple"},
                                    {"draft": ""}, {"draft": "x.gguf", "draft_threads": 0}])
def test_bad_draft_settings_are_refused(kwargs) -> None:
    with pytest.raises(pl.InvalidArgumentError):
        pl.Speculation(**kwargs)


def test_server_flags_take_llama_servers_draft_names() -> None:
    from pyllama90a.server.__main__ import parse_args

    args = parse_args(["-md", "small.gguf", "-td", "1", "-ctkd", "q8_0", "--cache-type-v-draft", "q8_0",
                       "-ngld", "0"])
    assert (args.model_draft, args.spec_draft_threads, args.spec_draft_type_k, args.spec_draft_type_v,
            args.spec_draft_ngl) == ("small.gguf", 1, "q8_0", "q8_0", 0)


def test_the_benchs_deeper_target_has_its_sources_logits(model_path, tmp_path) -> None:
    """Extra layers with zero output projections add nothing: the target's logits are its source's, bit for bit."""
    target = write_deeper_target(model_path, tmp_path / "deeper.gguf", extra_layers=2, weight_type="f16")
    with pl.Model(model_path, **SETTINGS) as source, pl.Model(target, **SETTINGS) as deeper:
        tokens = source.tokenize(INVENTORY)[:48]
        assert deeper.metadata("llama.block_count") == str(int(source.metadata("llama.block_count") or 0) + 2)
        assert np.array_equal(source.logits(tokens), deeper.logits(tokens))


def test_the_cells_of_a_rejected_draft_are_dropped(model_path) -> None:
    """After the target kept one drafted token of five and went on with others, the draft's next logits are those
    of a fresh decode of the history: no cell of the rejected tokens is attended to."""
    speculation = pl.Speculation(draft=model_path, **DRAFT_KV)
    with pl.Model(model_path, speculative=speculation, **SETTINGS) as model, pl.Model(model_path, **SETTINGS) as fresh:
        assert model.drafting is not None and model.drafting.draft_model is not None
        draft = model.drafting.draft_model
        prompt = model.tokenize(INVENTORY)[:40]
        guess = draft.draft(0, prompt, 6)  # (its cells: the prompt and the first five guessed tokens)
        history = [*prompt, guess[0], *model.tokenize(" count += 1")]  # the target's tokens after the first
        again = draft.draft(0, history, 3)
        got = np.copy(draft.context.logits_row(-1))  # (after the last token decoded: history + again[:2])
        expected = fresh.logits([*history, *again[:2]])[-1]
    assert len(guess) == 6 and len(again) == 3
    assert float(np.abs(got - expected).max()) < 1e-3
