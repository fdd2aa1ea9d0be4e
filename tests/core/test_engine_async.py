"""BatchEngine under asyncio: astream and acomplete give what the blocking stream gives, several tasks share the
engine, and a cancelled task frees its slot for the next request."""
from __future__ import annotations

import asyncio
import time

import pytest

import pyllama90a as pl

PROMPTS = ["The capital of France is", "Water boils at", "The three primary colors are"]


@pytest.fixture(scope="module")
def engine(model_path):
    with pl.BatchEngine(model_path, parallel=2, n_ctx=1024, ctk="q4_0", ctv="q4_0", flash_attn="off",
                        n_threads=2) as e:
        yield e


def _blocking(engine, prompt: str) -> str:
    return "".join(c.text for c in engine.stream(prompt, max_tokens=12, temperature=0))


def test_acomplete_and_astream_give_the_blocking_stream_s_text(engine):
    want = _blocking(engine, PROMPTS[0])

    async def run():
        done = await engine.acomplete(PROMPTS[0], max_tokens=12, temperature=0)
        streamed = [chunk async for chunk in engine.astream(PROMPTS[0], max_tokens=12, temperature=0)]
        return done, streamed

    done, streamed = asyncio.run(run())
    assert done.text == want and done.finish_reason == "length" and done.usage.completion_tokens == 12
    assert "".join(c.text for c in streamed) == want and streamed[-1].finish_reason == "length"
    assert [t for c in streamed for t in c.tokens] == done.tokens


def test_several_tasks_share_the_engine(engine):
    want = [_blocking(engine, p) for p in PROMPTS]

    async def run():
        return await asyncio.gather(*(engine.acomplete(p, max_tokens=12, temperature=0) for p in PROMPTS))

    assert [d.text for d in asyncio.run(run())] == want  # 3 requests on 2 slots: one waits its turn


def test_a_cancelled_task_frees_its_slot(engine):
    async def run():
        # 480 tokens take several seconds here; a cancelled request leaves at the engine's next step
        long = asyncio.ensure_future(engine.acomplete(PROMPTS[1], max_tokens=480, temperature=0, ignore_eos=True))
        while engine.stats().busy_slots == 0:  # it is generating
            await asyncio.sleep(0.01)
        long.cancel()
        with pytest.raises(asyncio.CancelledError):
            await long
        deadline = time.monotonic() + 2
        while engine.stats().busy_slots:
            assert time.monotonic() < deadline, "the cancelled request kept its slot"
            await asyncio.sleep(0.01)
        return await engine.acomplete(PROMPTS[0], max_tokens=4, temperature=0)

    assert asyncio.run(run()).usage.completion_tokens == 4


def test_a_bad_request_raises_in_the_task(engine):
    async def run():
        await engine.acomplete(PROMPTS[0], max_tokens=0)

    with pytest.raises(pl.InvalidArgumentError, match="max_tokens"):
        asyncio.run(run())
