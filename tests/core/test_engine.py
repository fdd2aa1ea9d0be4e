"""BatchEngine in-process: the same tokens as Model.generate, slot reuse, cancel, queue limits, shutdown."""
from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable

import pytest

import pyllama90a as pl
from pyllama90a.core.engine.engine import EngineStoppedError
from pyllama90a.errors import DecodeError


@pytest.fixture(scope="module")
def engine(model_path):
    with pl.BatchEngine(model_path, ctk="q8_0", ctv="q8_0", parallel=2, n_ctx=2048, n_threads=2) as e:
        yield e


def _text(engine: pl.BatchEngine, prompt, **kwargs) -> str:
    return "".join(c.text for c in engine.stream(prompt, **kwargs))


def test_greedy_stream_equals_model_generate(engine, model_path) -> None:
    chunks = list(engine.stream("The capital of France is", max_tokens=12, temperature=0))
    with pl.Model(model_path, ctk="q8_0", ctv="q8_0", n_ctx=1024, n_threads=2) as m:
        local = m.generate("The capital of France is", max_tokens=12, temperature=0)
    assert "".join(c.text for c in chunks) == local.text
    assert [t for c in chunks for t in c.tokens] == local.tokens
    assert chunks[-1].finish_reason == local.finish_reason and chunks[-1].usage == local.usage
    assert all(c.finish_reason is None for c in chunks[:-1])


def test_tokens_whose_text_is_held_back_reach_the_stream() -> None:
    """A byte token that starts a UTF-8 character shows no text until the character is complete (or the end):
    its id must still reach the stream, with the next chunk. The tiny random model's greedy output is byte
    tokens (ids 3-258) among others for this prompt, a lead byte before the last step among them (the
    precondition is checked, so the test cannot pass by having nothing to hold back)."""
    from pyllama90a.tools.synthetic import synthetic_model
    path = synthetic_model("tiny")
    with pl.Model(path, n_ctx=256, n_threads=2) as m:
        local = m.generate([1, 3], max_tokens=8, temperature=0)
    assert any(131 <= t <= 258 for t in local.tokens[:-1]), local.tokens  # bytes 0x80-0xFF: held back alone
    with pl.BatchEngine(path, parallel=1, n_ctx=256, n_threads=2) as engine:
        chunks = list(engine.stream([1, 3], max_tokens=8, temperature=0))
    assert [t for c in chunks for t in c.tokens] == local.tokens
    assert "".join(c.text for c in chunks) == local.text


def test_a_repeated_prompt_reuses_the_slot_cache(engine) -> None:
    prompt = engine.tokenize_prompt("A long shared system prompt about many things, " * 4)
    first = _text(engine, prompt, max_tokens=4, temperature=0)
    before = engine.stats()
    second = _text(engine, prompt, max_tokens=4, temperature=0)
    after = engine.stats()
    assert first == second
    assert after.prompt_tokens_total - before.prompt_tokens_total == len(prompt)
    assert after.prompt_tokens_decoded - before.prompt_tokens_decoded == 1  # only the last prompt token


def test_the_last_chunk_comes_after_its_decode_is_counted(engine) -> None:
    """/metrics read right after a response must count the decode that produced it (a CI run saw it one short:
    the finishing chunk was sent before the step's decode call was counted)."""
    seen_at_the_end = []
    ends = []

    def on_chunk(chunk: pl.Chunk) -> None:
        if chunk.finish_reason:
            seen_at_the_end.append(engine.stats())
            ends.append(chunk)
    before = engine.stats()
    engine.submit("This is a test.", on_chunk, max_tokens=3, ignore_eos=True, temperature=0)
    assert _wait_for(lambda: bool(ends))
    assert _wait_for(lambda: engine.stats().busy_slots == 0)
    after = engine.stats()
    assert after.decodes_total - before.decodes_total == 3  # the prompt (giving the first token), then 2 more
    assert seen_at_the_end[0].decodes_total == after.decodes_total
    assert seen_at_the_end[0].tokens_max == after.tokens_max


def test_cancel_frees_the_slot(engine) -> None:
    got = []
    handle = engine.submit("Count to a thousand:", got.append, max_tokens=1500, ignore_eos=True)
    deadline = time.monotonic() + 30
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    handle.cancel()
    deadline = time.monotonic() + 5
    while engine.stats().busy_slots and time.monotonic() < deadline:
        time.sleep(0.01)
    assert got and engine.stats().busy_slots == 0
    assert all(c.finish_reason is None for c in got)  # cut off, never finished


def test_bad_requests_raise_before_queueing(engine) -> None:
    with pytest.raises(pl.ContextOverflowError):
        engine.submit(list(range(10, 10 + engine.n_ctx_slot)), print)
    with pytest.raises(pl.InvalidArgumentError):
        engine.submit("", print)
    with pytest.raises(pl.InvalidArgumentError):
        engine.submit("hi", print, max_tokens=0)
    with pytest.raises(pl.InvalidArgumentError):
        engine.submit("hi", print, temperature=-1)
    with pytest.raises(pl.InvalidArgumentError):
        engine.submit("hi", print, logprobs=99)
    with pytest.raises(pl.InvalidArgumentError):
        engine.submit([1, -5], print)


def test_a_failing_consumer_does_not_stop_the_engine(engine) -> None:
    def broken(chunk: pl.Chunk) -> None:
        raise RuntimeError("consumer bug")

    engine.submit("Hello", broken, max_tokens=8)
    assert _text(engine, "Hello", max_tokens=4, temperature=0)


def test_the_engine_holds_its_models_context(engine) -> None:
    """engine.model shares the engine's context: calls that would race with the engine thread are refused,
    calls that only read the model are not."""
    with pytest.raises(pl.BusyError, match="a BatchEngine is using this Model"):
        engine.model.eval([1])
    with pytest.raises(pl.BusyError):
        engine.model.generate("Hi", max_tokens=1)
    with pytest.raises(pl.BusyError):
        engine.model.truncate(0)
    with pytest.raises(pl.BusyError):
        engine.model.close()
    assert engine.model.tokenize("Hi") and engine.model.n_ctx == 2048


def test_queue_limit_and_close(model_path) -> None:
    engine = pl.BatchEngine(model_path, parallel=1, queue_size=1, n_ctx=1024, n_threads=2)
    busy_end: list[pl.Chunk] = []
    queued_end: list[pl.Chunk] = []
    engine.submit("Go on:", _ends(busy_end), max_tokens=900, ignore_eos=True)
    assert _wait_for(lambda: engine.stats().busy_slots == 1), "the first request never took the slot"
    engine.submit("Hi", _ends(queued_end), max_tokens=2)
    with pytest.raises(pl.QueueFullError):
        engine.submit("Hi", print, max_tokens=2)
    closer = threading.Thread(target=engine.close)
    closer.start()
    closer.join(timeout=30)
    assert not closer.is_alive()
    # each request still in flight (the generating one and the queued one) ends with one error chunk;
    # the engine refuses new work
    for ends in (busy_end, queued_end):
        assert len(ends) == 1 and ends[0].finish_reason == "error" and isinstance(ends[0].error, pl.ClosedError)
    with pytest.raises(pl.ClosedError):
        engine.submit("Hi", print)


def _ends(into: list):
    """A consumer that keeps only the last chunk of a request."""
    return lambda c: into.append(c) if c.finish_reason else None


def _wait_for(predicate: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.01)
    return predicate()


def test_an_engine_whose_thread_died_refuses_work_at_once(model_path) -> None:
    """An exception escaping a step ends the engine thread (here a consumer's SystemExit, which the engine
    deliberately does not swallow): the requests in a slot and in the queue get an EngineStoppedError, the queue
    is emptied, and submit() raises one instead of queueing work no thread would serve."""
    engine = pl.BatchEngine(model_path, parallel=2, queue_size=4, n_ctx=1024, n_threads=2)
    try:
        ends: list[pl.Chunk] = []
        engine.submit("Go on:", _ends(ends), max_tokens=400, ignore_eos=True)
        assert _wait_for(lambda: engine.stats().busy_slots == 1)

        def exits(chunk: pl.Chunk) -> None:
            raise SystemExit("consumer says stop")

        engine.submit("Hi", exits, max_tokens=400, ignore_eos=True)
        engine.submit("Queued", _ends(ends), max_tokens=4)  # both slots are taken: this one waits
        assert _wait_for(lambda: len(ends) == 2)
        assert all(isinstance(c.error, EngineStoppedError) and c.finish_reason == "error" for c in ends)
        assert isinstance(engine.failure, SystemExit) and not engine.running
        assert engine.stats().queue_depth == 0  # (the queued request got its error: nothing waits any more)
        with pytest.raises(EngineStoppedError, match="SystemExit"):
            engine.submit("Hi", print, max_tokens=2)
        with pytest.raises(pl.ClosedError):  # EngineStoppedError is a ClosedError too
            list(engine.stream("Hi", max_tokens=2))
    finally:
        engine.close()
    engine.close()  # a second close does nothing


def test_a_failed_decode_ends_its_request_and_the_engine_goes_on(model_path) -> None:
    """A real llama_decode failure: the engine is told its slots hold more cells than llama.cpp gave them
    (n_ctx_slot is what the engine trusts), so a long prompt runs past the slot's KV cells."""
    engine = pl.BatchEngine(model_path, parallel=2, n_ctx=1024, n_batch=256, n_threads=2)
    try:
        real = engine.n_ctx_slot
        long_prompt = list(range(100, 100 + real + 200))
        engine.n_ctx_slot = 4 * real
        with pytest.raises(DecodeError, match="llama_decode failed"):
            list(engine.stream(long_prompt, max_tokens=2))
        engine.n_ctx_slot = real
        assert engine.running and engine.failure is None and engine.stats().requests_failed == 1
        assert _text(engine, "The capital of France is", max_tokens=6, temperature=0)  # the slot was reset
    finally:
        engine.close()


def test_a_constrained_slot_beside_a_free_one(engine) -> None:
    """A constraint is per slot: the constrained request's output matches its regex, the request next to it in
    the same batches is free."""
    from pyllama90a.core import constrained

    alone = _text(engine, "The capital of France is", max_tokens=12, temperature=0)
    results: dict[str, str] = {}

    def run(name: str, **kwargs) -> None:
        results[name] = _text(engine, "The capital of France is", max_tokens=12, temperature=0, **kwargs)

    threads = [threading.Thread(target=run, args=("free",)),
               threading.Thread(target=run, args=("digits",), kwargs={"constraint": constrained.regex(r" [0-9]{3}")})]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    # (batched greedy output may differ from alone at near-ties: rounding of shared batches, so not compared)
    assert re.fullmatch(r" [0-9]{3}", results["digits"]), results
    assert not re.fullmatch(r" [0-9]{3}", alone)  # the constraint made the difference
    assert not re.fullmatch(r" [0-9]{3}", results["free"])  # and did not leak into the other slot
    with pytest.raises(pl.InvalidArgumentError):
        engine.submit("Hi", lambda c: None, constraint=constrained.regex("a"), ignore_eos=True)


def test_close_inside_on_chunk_stops_the_engine_and_frees_the_model(model_path) -> None:
    engine = pl.BatchEngine(model_path, parallel=1, n_ctx=512, n_threads=2)
    returned: list[bool] = []
    ends: list[pl.Chunk] = []

    def consumer(chunk: pl.Chunk) -> None:
        if chunk.finish_reason:
            ends.append(chunk)
        elif not returned:
            returned.append(engine.close())  # on the engine thread: it cannot wait for itself

    engine.submit("Go on:", consumer, max_tokens=200, ignore_eos=True)
    assert _wait_for(lambda: engine.model.closed), "the model was never freed after close() in on_chunk"
    assert returned == [False]  # told that the engine thread frees it
    assert len(ends) == 1 and isinstance(ends[0].error, pl.ClosedError)
    with pytest.raises(pl.ClosedError):
        engine.submit("Hi", print)
    assert engine.close() is True  # a second call: already freed


def test_close_with_a_timeout_returns_while_a_callback_blocks(model_path) -> None:
    engine = pl.BatchEngine(model_path, parallel=1, n_ctx=512, n_threads=2)
    in_callback, release = threading.Event(), threading.Event()

    def stuck(chunk: pl.Chunk) -> None:
        in_callback.set()
        release.wait(60)

    engine.submit("Go on:", stuck, max_tokens=50, ignore_eos=True)
    assert in_callback.wait(30)
    started = time.monotonic()
    assert engine.close(timeout=0.5) is False
    assert time.monotonic() - started < 5 and not engine.model.closed  # not freed under the running thread
    release.set()
    assert _wait_for(lambda: engine.model.closed), "the engine thread did not free the model when it left"


def test_a_blocking_stream_inside_on_chunk_is_refused_and_the_engine_serves_on(engine) -> None:
    # the engine thread would wait for itself: the engine hung for good (close() too)
    inner: list[object] = []
    done = threading.Event()

    def on_chunk(chunk: pl.Chunk) -> None:
        if not inner:
            try:
                inner.append("".join(c.text for c in engine.stream("Hello", max_tokens=2, temperature=0)))
            except pl.BusyError as e:
                inner.append(e)
        if chunk.finish_reason is not None:
            done.set()
    engine.submit("Once upon a time", on_chunk, max_tokens=4, temperature=0)
    assert done.wait(60) and isinstance(inner[0], pl.BusyError) and "engine thread" in str(inner[0])
    assert _text(engine, "Hi", max_tokens=2, temperature=0) is not None  # (serving on)


@pytest.mark.parametrize("on_chunk", [None, "print", 3])
def test_an_on_chunk_that_cannot_be_called_is_refused(engine, on_chunk) -> None:
    with pytest.raises(pl.InvalidArgumentError, match="on_chunk must be a callable"):
        engine.submit("Hi", on_chunk, max_tokens=1)
