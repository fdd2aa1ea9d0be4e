"""The Model's one thread rule: while a generation runs, every method that uses the context raises BusyError
(from any thread) and the generation is not disturbed; methods that only read the model keep working.

A stream that has produced its first piece and is not finished holds the Model: that state is reached without
any timing, so a second thread's call lands in the middle of the generation every time.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import pyllama90a as pl
from pyllama90a.errors import BusyError

PROMPT = "List the planets of the solar system:"
MESSAGES = [{"role": "user", "content": "Name a color."}]
N_TOKENS = 8


def _in_other_thread(call: Callable[[], Any]) -> tuple[Any, BaseException | None]:
    """Run `call` on a second thread to its end; its result and the exception it raised, if any."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["value"] = call()
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            out["error"] = e

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return out.get("value"), out.get("error")


@pytest.fixture
def m(model_path):
    with pl.Model(model_path, n_ctx=512) as model:
        yield model


@pytest.fixture(scope="module")
def state_path(model_path, tmp_path_factory):
    path = tmp_path_factory.mktemp("busy") / "s.state"
    with pl.Model(model_path, n_ctx=512) as model:
        model.generate("Hello", max_tokens=2, temperature=0)
        model.save_state(path)
    return path


CONTEXT_CALLS: dict[str, Callable[[pl.Model, Any], Any]] = {
    "generate": lambda m, _: m.generate("Hi", max_tokens=2, temperature=0),
    "generate(stream)": lambda m, _: next(m.generate("Hi", max_tokens=2, temperature=0, stream=True)),
    "chat": lambda m, _: m.chat(MESSAGES, max_tokens=2, temperature=0),
    "eval": lambda m, _: m.eval([5, 6]),
    "logits": lambda m, _: m.logits([5, 6]),
    "last_logits": lambda m, _: m.last_logits(),
    "truncate": lambda m, _: m.truncate(1),
    "save_state": lambda m, state: m.save_state(state.with_name("again.state")),
    "load_state": lambda m, state: m.load_state(state),
    "compute_buffer_bytes": lambda m, _: m.compute_buffer_bytes,
    "close": lambda m, _: m.close(),
}


@pytest.mark.parametrize("name", CONTEXT_CALLS)
def test_context_calls_are_refused_while_a_stream_runs(m, state_path, name: str) -> None:
    call = CONTEXT_CALLS[name]
    reference = m.generate(PROMPT, max_tokens=N_TOKENS, temperature=0)
    stream = m.generate(PROMPT, max_tokens=N_TOKENS, temperature=0, stream=True)
    pieces = [next(stream)]

    _, error = _in_other_thread(lambda: call(m, state_path))
    assert isinstance(error, BusyError), error
    assert "another generation is using this Model" in str(error)
    with pytest.raises(BusyError):  # the stream's own thread is refused too
        call(m, state_path)

    pieces += list(stream)
    assert [t for p in pieces for t in p.tokens] == reference.tokens  # the generation was not disturbed
    assert "".join(p.text for p in pieces) == reference.text
    call(m, state_path)  # the stream ended: the Model is free again


def test_embed_is_refused_while_a_stream_runs(model_path) -> None:
    with pl.Model(model_path, embedding=True, n_ctx=512) as m:
        reference = m.generate(PROMPT, max_tokens=N_TOKENS, temperature=0)
        stream = m.generate(PROMPT, max_tokens=N_TOKENS, temperature=0, stream=True)
        pieces = [next(stream)]
        _, error = _in_other_thread(lambda: m.embed("a cat"))
        assert isinstance(error, BusyError), error
        pieces += list(stream)
        assert [t for p in pieces for t in p.tokens] == reference.tokens
        assert m.embed("a cat").shape == (576,)


MODEL_READS: dict[str, Callable[[pl.Model], Any]] = {
    "tokenize": lambda m: m.tokenize("Hello there"),
    "detokenize": lambda m: m.detokenize([19556, 905]),
    "prompt_tokens": lambda m: m.prompt_tokens("Hello there"),
    "apply_chat_template": lambda m: m.apply_chat_template(MESSAGES),
    "metadata": lambda m: m.metadata("general.architecture"),
    "kv_cache": lambda m: m.kv_cache,
    "n_ctx": lambda m: m.n_ctx,
    "n_ctx_seq": lambda m: m.n_ctx_seq,
    "n_ctx_train": lambda m: m.n_ctx_train,
    "attention": lambda m: m.attention,
}


def test_model_reads_work_while_a_stream_runs(m) -> None:
    idle = {name: read(m) for name, read in MODEL_READS.items()}
    reference = m.generate(PROMPT, max_tokens=N_TOKENS, temperature=0)
    stream = m.generate(PROMPT, max_tokens=N_TOKENS, temperature=0, stream=True)
    pieces = [next(stream)]
    for name, read in MODEL_READS.items():
        value, error = _in_other_thread(lambda: read(m))  # noqa: B023 - called before the next iteration
        assert error is None, (name, error)
        assert value == idle[name], name
    _, error = _in_other_thread(lambda: m.n_cached)
    assert error is None
    pieces += list(stream)
    assert [t for p in pieces for t in p.tokens] == reference.tokens


def test_closing_a_stream_early_frees_the_model(m) -> None:
    stream = m.generate(PROMPT, max_tokens=N_TOKENS, temperature=0, stream=True)
    next(stream)
    with pytest.raises(BusyError):
        m.truncate(0)
    stream.close()
    m.truncate(0)
    assert m.n_cached == 0


def test_a_stream_holds_the_model_from_its_first_piece(m) -> None:
    """A generator runs nothing until it is iterated, so a stream that never started cannot hold the Model
    (nor release it, if it were dropped unstarted)."""
    stream = m.generate(PROMPT, max_tokens=4, temperature=0, stream=True)
    m.eval([5])
    first = next(stream)
    with pytest.raises(BusyError):
        m.eval([5])
    assert first.text or first.tokens
    stream.close()


def _in_native_tokenize(thread: threading.Thread) -> bool:
    """Whether `thread` is inside the binding's tokenize (ModelHandle.tokenize: where llama.cpp is called)."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "tokenize" and code.co_filename.endswith(os.path.join("native", "model.py")):
            return True
        frame = frame.f_back
    return False


def test_a_long_tokenization_does_not_hold_other_tokenizer_calls(m) -> None:
    """The server tokenizes in several threads: a 4-million-token text in one held every other tokenize and
    detokenize of the Model (its lock) until it ended. The short calls here run while the long one is inside
    llama.cpp, so they end first whatever the machine's speed (serialized, they could not)."""
    long_text = "1" * 4_000_000
    result: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: result.setdefault("n", len(m.tokenize(long_text))))
    thread.start()
    while not _in_native_tokenize(thread):
        assert thread.is_alive(), "the long tokenization ended before it was seen inside llama.cpp"
        time.sleep(0.001)
    assert m.detokenize(m.tokenize("Hello world")) == "Hello world"
    assert thread.is_alive()  # the short calls did not wait for the long one
    thread.join()
    assert result["n"] >= 1_000_000
