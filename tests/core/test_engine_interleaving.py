"""BatchEngine: a long prompt submitted while other slots generate is prefilled in chunks between their decode
steps (engine.py's scheduling), and every output is the one the same request gets alone.

"The same" is bit-identical for the generating slots. For the long prompt it cannot be: llama.cpp splits a batch
of several sequences into ubatches of equal tokens per sequence, so some of its prompt tokens are computed in
one-token ubatches, and ggml's CPU kernels round differently for one row than for many (fed one token at a time,
the last 64 prompt tokens move its next-token log-probabilities by up to 0.57; in ubatches of 2 or 8, by 0).
So its greedy tokens must match while the single-request run's choice is clear (top-2 margin over
MARGIN), and each compared token's log-probability within LOGPROB_TOLERANCE of it: far less than a lost chunk,
a wrong position or another sequence's cells would move it. (Seen: up to 2e-4 on this counting prompt, whose
every step has a margin over 4; 0.01-0.1 on a prose prompt, whose greedy tokens then parted at a 0.1 near tie.)"""
from __future__ import annotations

import threading
import time

import pytest

import pyllama90a as pl

N_BATCH = 64  # a step holds the generating slots' tokens plus at most this many prompt tokens in all
LONG = "Count: " + ", ".join(str(i) for i in range(1, 171)) + ","  # ~700 tokens; its continuation is clear
SHORT = ("The capital of France is", "List three colours:")
MAX_TOKENS = {SHORT[0]: 40, SHORT[1]: 40, LONG: 12}
MARGIN = 0.3
LOGPROB_TOLERANCE = 0.15


def _run(engine: pl.BatchEngine, prompts: tuple[str, ...], stagger: bool) -> tuple[dict, list, int]:
    """Each prompt's TokenLogprobs (greedy, logprobs on), the engine thread's (prompt, n tokens) chunk order, and
    where in it the last prompt was submitted; with stagger, the last one once the others are generating."""
    got: dict[str, list[pl.engine.TokenLogprob]] = {p: [] for p in prompts}
    done = {p: threading.Event() for p in prompts}
    events: list[tuple[str, int]] = []
    errors: list[BaseException] = []

    def consumer(prompt: str):
        def on_chunk(chunk: pl.Chunk) -> None:
            events.append((prompt, len(chunk.tokens)))
            got[prompt].extend(chunk.logprobs)
            if chunk.error is not None:
                errors.append(chunk.error)
            if chunk.finish_reason is not None:
                done[prompt].set()
        return on_chunk

    submitted_at = 0
    for i, p in enumerate(prompts):
        if stagger and i == len(prompts) - 1:
            deadline = time.monotonic() + 60
            while not all(len(got[q]) >= 2 for q in prompts[:-1]) and time.monotonic() < deadline:
                time.sleep(0.005)
            assert all(len(got[q]) >= 2 for q in prompts[:-1]), "the first requests never started generating"
            submitted_at = len(events)
        engine.submit(p, consumer(p), max_tokens=MAX_TOKENS[p], temperature=0, ignore_eos=True, logprobs=2)
    assert all(d.wait(180) for d in done.values()) and not errors, errors
    return got, events, submitted_at


@pytest.fixture(scope="module")
def runs(model_path) -> tuple[dict, dict, list, int]:
    """(alone, interleaved, events, submitted_at): each request alone on a fresh engine, then the two short
    ones generating on another fresh engine when the long one arrives."""
    def engine() -> pl.BatchEngine:
        return pl.BatchEngine(model_path, ctk="q8_0", ctv="q8_0", parallel=3, n_ctx=3 * 1024, n_batch=N_BATCH,
                              n_threads=2)
    with engine() as e:
        alone = {p: _run(e, (p,), False)[0][p] for p in (*SHORT, LONG)}
    with engine() as e:
        interleaved, events, submitted_at = _run(e, (*SHORT, LONG), True)
    return alone, interleaved, events, submitted_at


def _differences(a: list, b: list) -> list[str]:
    out = []
    for step, (x, y) in enumerate(zip(a, b, strict=False)):
        if x.token != y.token:
            return [*out, f"step {step}: token {y.token}, alone {x.token}"]
        if abs(x.logprob - y.logprob) > 1e-4:
            out.append(f"step {step}: logprob {y.logprob:.4f}, alone {x.logprob:.4f}")
    return out


def test_the_long_prompt_was_prefilled_between_the_generating_steps(runs) -> None:
    alone, _, events, submitted_at = runs
    assert len(alone[LONG]) == MAX_TOKENS[LONG]
    first_long = next(i for i, (p, n) in enumerate(events) if p == LONG and n)
    during = [p for p, n in events[submitted_at:first_long] if n]
    # its prefill took several steps (over 8 * N_BATCH tokens), each with a token of both short requests
    assert all(during.count(p) >= 4 for p in SHORT), [during.count(p) for p in SHORT]


def test_generating_slots_are_unchanged_by_a_long_prompt_prefilled_between_their_steps(runs) -> None:
    alone, interleaved, _, _ = runs
    for p in SHORT:
        assert len(interleaved[p]) == MAX_TOKENS[p]
        assert not _differences(alone[p], interleaved[p]), (p, _differences(alone[p], interleaved[p]))


def test_a_long_prompt_prefilled_between_generating_steps_gives_its_single_request_output(runs) -> None:
    alone, interleaved, _, _ = runs
    assert len(interleaved[LONG]) == MAX_TOKENS[LONG]
    compared = 0
    for step, (x, y) in enumerate(zip(alone[LONG], interleaved[LONG], strict=False)):
        if x.token != y.token or abs(x.logprob - y.logprob) > LOGPROB_TOLERANCE:
            pytest.fail(f"step {step}: token {y.token} logprob {y.logprob:.4f}; alone {x.token} {x.logprob:.4f}")
        compared += 1
        if x.top[0][2] - x.top[1][2] < MARGIN:
            break  # a near tie: rounding may pick the other token, and what follows differs legitimately
    assert compared >= MAX_TOKENS[LONG] // 2
