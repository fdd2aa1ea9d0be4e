"""Prompt-cache reuse in a BatchEngine (issue 36, item 7): a request reuses the longest cached prefix of any
slot, idle or busy, or of the host-RAM prompt cache (cache_ram_bytes), reports it in Usage.cached_tokens, and
generates what a fresh decode of its prompt generates."""
from __future__ import annotations

import queue

import pytest

import pyllama90a as pl
from pyllama90a.core.engine.prompt_cache import PromptCache
from pyllama90a.core.generation.prefix_cache import common_prefix
from pyllama90a.errors import InvalidArgumentError

SETTINGS = {"ctk": "q8_0", "ctv": "q8_0", "n_threads": 2}
SYSTEM = "You are a careful assistant. " + " ".join(f"Rule {i}: answer item {i} briefly." for i in range(24))


def _prompt(engine: pl.BatchEngine, user: str) -> list[int]:
    return engine.tokenize_prompt(f"{SYSTEM}\nUser: {user}\nAssistant:")


def _run(engine: pl.BatchEngine, prompt: list[int], max_tokens: int = 4) -> tuple[list[int], pl.Usage]:
    chunks = list(engine.stream(prompt, max_tokens=max_tokens, temperature=0))
    usage = chunks[-1].usage
    assert usage is not None, chunks[-1]
    return [t for c in chunks for t in c.tokens], usage


@pytest.fixture(scope="module")
def fresh(model_path):
    """Greedy tokens of a prompt decoded from an empty cache: what a reused prefix must give too."""
    with pl.Model(model_path, n_ctx=1024, **SETTINGS) as m:
        def generate(prompt: list[int], max_tokens: int = 4) -> list[int]:
            m.truncate(0)
            return m.generate(prompt, max_tokens=max_tokens, temperature=0).tokens
        yield generate


def test_a_second_request_reports_the_shared_prefix_as_cached(model_path, fresh) -> None:
    with pl.BatchEngine(model_path, parallel=1, n_ctx=1024, **SETTINGS) as engine:
        first, second = _prompt(engine, "What is two plus two?"), _prompt(engine, "Name a red fruit.")
        _, usage = _run(engine, first)
        assert usage.cached_tokens == 0 and usage.prompt_tokens == len(first)
        tokens, usage = _run(engine, second)
        shared = common_prefix(first, second)
        assert shared > 100 and usage.cached_tokens == shared  # (less than len(second) - 1: nothing to re-decode)
        assert tokens == fresh(second)
        _, usage = _run(engine, second)  # the same prompt again: all but its last token, whose logits start it
        assert usage.cached_tokens == len(second) - 1


def test_model_generate_reports_cached_tokens(model_path) -> None:
    with pl.Model(model_path, n_ctx=1024, **SETTINGS) as m:
        prompt = m.tokenize(SYSTEM)
        assert m.generate(prompt, max_tokens=2, temperature=0).usage.cached_tokens == 0
        assert m.generate(prompt, max_tokens=2, temperature=0).usage.cached_tokens == len(prompt) - 1


def test_an_unrelated_request_takes_the_empty_slot_not_the_cached_one(model_path) -> None:
    """Without the slot policy the unrelated request took slot 0 (the first of equal scores), whose cells the
    third request would have reused."""
    with pl.BatchEngine(model_path, parallel=2, n_ctx=2048, **SETTINGS) as engine:
        first, again = _prompt(engine, "What is two plus two?"), _prompt(engine, "Name a red fruit.")
        _run(engine, first)
        _run(engine, engine.tokenize_prompt("Completely unrelated words about the sea and ships. " * 8))
        _, usage = _run(engine, again)
        assert usage.cached_tokens == common_prefix(first, again)


def test_a_request_copies_the_prefix_of_a_busy_slot(model_path, fresh) -> None:
    """The second request lands in the empty slot while the first still generates in the other: it copies
    that slot's cells (its sequence state) instead of decoding the shared prefix again, and generates what a
    fresh decode does."""
    with pl.BatchEngine(model_path, parallel=2, n_ctx=2048, **SETTINGS) as engine:
        first, second = _prompt(engine, "Tell me a long story."), _prompt(engine, "Name a red fruit.")
        chunks: queue.Queue[pl.Chunk] = queue.Queue()
        handle = engine.submit(first, chunks.put, max_tokens=200, temperature=0, ignore_eos=True)
        try:
            assert chunks.get(timeout=300).tokens  # the first request is generating: its slot is busy
            tokens, usage = _run(engine, second, max_tokens=6)
            assert engine.slot_usage()[0][0] or engine.slot_usage()[1][0]  # (still busy when the second ended)
        finally:
            handle.cancel()
        assert usage.cached_tokens == common_prefix(first, second)
        assert tokens == fresh(second, 6)


@pytest.mark.parametrize("cache_ram", [0, 64 << 20])
def test_the_ram_cache_restores_a_prefix_the_slot_dropped(model_path, fresh, cache_ram) -> None:
    """One slot: an unrelated request replaces the cells of the first; with the RAM cache the third request
    restores them (without it, it decodes the shared prefix again)."""
    with pl.BatchEngine(model_path, parallel=1, n_ctx=1024, cache_ram_bytes=cache_ram, **SETTINGS) as engine:
        first, again = _prompt(engine, "What is two plus two?"), _prompt(engine, "Name a red fruit.")
        _run(engine, first)
        _run(engine, engine.tokenize_prompt("Completely unrelated words about the sea and ships. " * 8))
        tokens, usage = _run(engine, again)
        stats = engine.prompt_cache_stats()
        if not cache_ram:
            assert stats is None and usage.cached_tokens < 8
            return
        assert usage.cached_tokens == common_prefix(first, again)
        assert tokens == fresh(again)
        assert stats is not None and stats.hits == 1 and stats.stores == 2 and 0 < stats.bytes <= cache_ram


def test_the_ram_cache_drops_the_least_recently_used_state() -> None:
    cache = PromptCache(250)
    cache.store([1, 2, 3], (), memoryview(bytes(100)))
    cache.store([7, 8], (), memoryview(bytes(100)))
    entry, n = cache.longest([1, 2, 3, 4], ())
    assert entry is not None and n == 3
    cache.used(entry)                                      # [1, 2, 3] is now the most recently used
    cache.store([9], (), memoryview(bytes(100)))           # 300 bytes: [7, 8] goes
    assert cache.longest([7, 8], ()) == (None, 0) and cache.longest([1, 2], ())[1] == 2
    assert cache.longest([1, 2, 3], (0.5,)) == (None, 0)  # cells of other LoRA scales serve no one else
    cache.store([1, 2, 3, 4, 5], (), memoryview(bytes(100)))  # covers [1, 2, 3], which goes
    assert cache.stats().entries == 2 and cache.stats().bytes == 200
    assert not cache.store([5], (), memoryview(bytes(251)))   # larger than the whole cache


@pytest.mark.parametrize("bad", [-1, 1.5, "64M", True])
def test_a_bad_cache_size_is_refused_before_the_model_loads(bad) -> None:
    with pytest.raises(InvalidArgumentError, match="cache_ram_bytes"):
        pl.BatchEngine("/nonexistent.gguf", cache_ram_bytes=bad)
