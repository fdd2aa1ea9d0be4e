"""Speculative decoding by prompt lookup: the same tokens as plain decoding (Model and BatchEngine), acceptance
statistics, the cells of rejected drafts dropped, and the settings checked."""
from __future__ import annotations

import threading
import time

import pytest

import pyllama90a as pl
from pyllama90a.bench.speculative import ARITHMETIC
from pyllama90a.core.engine.slots import EngineStats
from pyllama90a.core.generation.speculative import NgramDrafter
from pyllama90a.server.metrics import render_metrics

CODE = ARITHMETIC  # (the bench's code-editing text)
# a code-editing request: the answer repeats much of the prompt, so drafts are found and mostly kept
EDIT = [{"role": "user", "content": "Rename the function `add` to `plus` everywhere in this code and show the whole "
                                    f"code:\n\n```python\n{CODE}```"}]


def _chat_tokens(model: pl.Model, **kwargs) -> pl.Completion:
    completion = model.chat(EDIT, max_tokens=120, **kwargs)
    assert isinstance(completion, pl.Completion)
    return completion


def test_greedy_output_is_plain_decoding(model_path) -> None:
    with pl.Model(model_path, n_ctx=1024, n_threads=2) as plain:
        expected = _chat_tokens(plain, temperature=0)
    with pl.Model(model_path, n_ctx=1024, n_threads=2, speculative=pl.Speculation()) as model:
        got = _chat_tokens(model, temperature=0)
        # the cells of rejected drafts were dropped: the cache holds the prompt and the generated tokens but the
        # last (never decoded), so a decode after them has consecutive positions
        assert model.n_cached == got.usage.prompt_tokens + len(got.tokens) - 1
        model.eval([got.tokens[-1]])
    assert got.tokens == expected.tokens and got.text == expected.text
    assert expected.usage.draft_tokens == 0
    assert got.usage.draft_tokens > 0 and 0 < got.usage.draft_accepted <= got.usage.draft_tokens


def test_seeded_sampling_keeps_its_tokens(model_path) -> None:
    """A kept draft token was sampled with the same random draw plain decoding makes there: same seed, same
    tokens (at temperature > 0)."""
    options = {"temperature": 0.7, "seed": 7}
    with pl.Model(model_path, n_ctx=1024, n_threads=2) as plain:
        expected = _chat_tokens(plain, **options)
    with pl.Model(model_path, n_ctx=1024, n_threads=2, speculative=pl.Speculation()) as model:
        got = _chat_tokens(model, **options)
    assert got.tokens == expected.tokens
    assert got.usage.draft_accepted > 0


def _greedy_pair(model_path, speculative: pl.Speculation | None) -> tuple[list[list[pl.Chunk]], EngineStats, str]:
    """Two greedy EDIT requests on a 2-slot engine, admitted at the same step: each step's batch (which slots'
    tokens, prompt chunks and drafts it holds) then follows from the requests alone, never from how the test
    thread and the engine thread are scheduled. Their chunks, the engine's stats and its metrics."""
    with pl.BatchEngine(model_path, parallel=2, n_ctx=2048, n_threads=2, speculative=speculative) as engine:
        prompt = engine.chat_prompt(EDIT)
        entered, release = threading.Event(), threading.Event()

        def hold(_: pl.Chunk) -> None:  # (the engine thread waits in this request's last chunk)
            entered.set()
            release.wait(timeout=60)

        engine.submit("Hi", hold, max_tokens=1)  # (a slot of its own, freed before the chunk is reported)
        assert entered.wait(timeout=60)
        results: list[list[pl.Chunk]] = [[], []]
        handles = [engine.submit(prompt, results[i].append, max_tokens=120, temperature=0) for i in range(2)]
        release.set()  # both wait: the next step admits them together
        for chunks in results:
            while not chunks or chunks[-1].finish_reason is None:
                time.sleep(0.05)
        del handles
        return results, engine.stats(), render_metrics(engine, engine.model.kv_cache, {})


def test_batch_engine_greedy_output_and_statistics(model_path) -> None:
    """The speculative engine's tokens are those of the same engine without speculation, both slots generating
    at once, each with its own drafts. (Against a Model's plain decoding, a near-tie at the 4th token followed
    the batches' composition, which followed the machine's load: the slots admitted one step apart.)"""
    plain, plain_stats, _ = _greedy_pair(model_path, None)
    results, stats, metrics = _greedy_pair(model_path, pl.Speculation())
    assert plain_stats.draft_tokens_total == 0
    for chunks, expected in zip(results, plain, strict=True):
        assert [t for c in chunks for t in c.tokens] == [t for c in expected for t in c.tokens]
        usage = chunks[-1].usage
        assert usage is not None and 0 < usage.draft_accepted <= usage.draft_tokens
    assert stats.draft_tokens_total == sum(c[-1].usage.draft_tokens for c in results)  # type: ignore[union-attr]
    assert stats.draft_accepted_total == sum(c[-1].usage.draft_accepted for c in results)  # type: ignore[union-attr]
    assert f"\nllamacpp:spec_decode_num_draft_tokens_total {stats.draft_tokens_total}\n" in metrics
    assert f"\nllamacpp:spec_decode_num_accepted_tokens_total {stats.draft_accepted_total}\n" in metrics
    assert f"\npyllama90a_draft_accepted_total {stats.draft_accepted_total}\n" in metrics


def test_drafts_continue_the_last_earlier_occurrence_of_the_newest_ngram() -> None:
    drafter = NgramDrafter(pl.Speculation(ngram_size_n=2, draft_max=3), [1, 2, 3, 4, 5, 9, 1, 2])
    assert drafter.draft(10) == [3, 4, 5]
    assert drafter.draft(2) == [3, 4]
    drafter.add(7)  # (2, 7) never occurred before
    assert drafter.draft(10) == []
    assert NgramDrafter(pl.Speculation(ngram_size_n=2, draft_min=4), [1, 2, 3, 1, 2]).draft(10) == []


def test_a_rejected_draft_shortens_the_next_and_a_kept_one_lengthens_it() -> None:
    drafter = NgramDrafter(pl.Speculation(ngram_size_n=1, draft_max=8, draft_min=2), [5, *range(20), 5])
    assert len(drafter.draft(100)) == 8
    drafter.feedback(8, 0)  # rejected at once: the next draft is as short as draft_min allows
    assert len(drafter.draft(100)) == 2
    drafter.feedback(2, 2)
    assert len(drafter.draft(100)) == 4
    drafter.feedback(4, 4)
    drafter.feedback(8, 8)
    assert len(drafter.draft(100)) == 8  # (at most draft_max)


@pytest.mark.parametrize("kwargs", [{"spec_type": "eagle"}, {"draft_max": 0}, {"draft_min": 17},
                                    {"ngram_size_n": 0}, {"draft_max": True}])
def test_bad_settings_are_refused(kwargs) -> None:
    with pytest.raises(pl.InvalidArgumentError):
        pl.Speculation(**kwargs)


def test_speculative_must_be_a_speculation(model_path) -> None:
    with pytest.raises(pl.InvalidArgumentError, match="Speculation"):
        pl.Model(model_path, speculative={"draft_max": 4})


def test_server_flags_take_llama_servers_names() -> None:
    from pyllama90a.server.__main__ import parse_args

    args = parse_args(["--spec-type", "ngram-simple", "--draft-max", "8", "--spec-draft-n-min", "2",
                       "--spec-ngram-simple-size-n", "4"])
    assert (args.spec_type, args.spec_draft_n_max, args.spec_draft_n_min, args.spec_ngram_simple_size_n) == (
        "ngram-simple", 8, 2, 4)
    assert parse_args([]).spec_type == "none"
