"""The binding layer (pyllama90a.native) on the real library and model: lifetimes (a context freed before its
model, the weights freed when their last user goes), one loaded model under several contexts, each thread's own
native log lines in its errors, and every native failure path a clear exception instead of a crash."""
from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import pyllama90a as pl
from pyllama90a.core.generation.sampling import SamplingParams
from pyllama90a.errors import ClosedError, ContextError, DecodeError, InvalidArgumentError, LlamaError, ModelLoadError
from pyllama90a.native import Batch, ContextHandle, ContextParams, ModelHandle, SamplerChain
from pyllama90a.native.log import NativeCall
from support.mappings import mappings_of, needs_proc_maps

pytestmark = needs_proc_maps

PROMPT = "The capital of France is"


@pytest.fixture
def unmapped(model_path):
    """The model file's mapping count before the test (other tests' Models may hold it mapped)."""
    gc.collect()
    return mappings_of(model_path)


def _greedy_tokens(context: ContextHandle, prompt: list[int], n: int) -> list[int]:
    context.clear()
    context.decode_tokens(prompt)
    chain = SamplerChain(SamplingParams(temperature=0), context.model.n_vocab)
    out = []
    for _ in range(n):
        out.append(chain.sample(context))
        context.decode_tokens(out[-1:])
    return out


def test_greedy_sampling_by_argmax_picks_what_llamas_greedy_sampler_picks(model_path) -> None:
    handle = ModelHandle(model_path)
    context = ContextHandle(handle, ContextParams(n_ctx=256, n_threads=2))
    context.decode_tokens(handle.tokenize(PROMPT.encode(), True, False))
    chain = SamplerChain(SamplingParams(temperature=0), handle.n_vocab)
    assert chain.argmax_only
    for _ in range(24):
        by_argmax = chain.sample(context)
        chain.argmax_only = False  # the same chain through llama.cpp: its greedy sampler
        assert chain.sample(context) == by_argmax
        chain.argmax_only = True
        context.decode_tokens([by_argmax])
    assert not SamplerChain(SamplingParams(temperature=0, repeat_penalty=1.1), handle.n_vocab).argmax_only
    assert not SamplerChain(SamplingParams(temperature=0.5), handle.n_vocab).argmax_only


# -- lifetimes ----------------------------------------------------------------------------------------------------

def test_a_context_freed_before_its_model_leaves_the_model_usable(model_path, unmapped) -> None:
    handle = ModelHandle(model_path)
    assert mappings_of(model_path) > unmapped, "the weights are not mapped from the file: this test sees nothing"
    context = ContextHandle(handle, ContextParams(n_ctx=256, n_threads=2))
    prompt = handle.tokenize(PROMPT.encode(), True, False)
    expected = _greedy_tokens(context, prompt, 4)
    context.close()
    context.close()  # a second close does nothing
    with pytest.raises(ClosedError):
        context.decode_tokens(prompt)
    assert handle.detokenize(prompt, special=False).endswith(PROMPT)  # the model outlives its context
    again = ContextHandle(handle, ContextParams(n_ctx=256, n_threads=2))
    assert _greedy_tokens(again, prompt, 4) == expected
    del again
    del handle, context
    gc.collect()
    assert mappings_of(model_path) == unmapped  # the last user gone: the weights are freed


def test_the_weights_stay_loaded_while_a_context_uses_them(model_path, unmapped) -> None:
    """Dropping every reference to the ModelHandle but the context's own: the context still decodes (its weights
    were not freed under it); freeing the context then frees them."""
    handle = ModelHandle(model_path)
    context = ContextHandle(handle, ContextParams(n_ctx=256, n_threads=2))
    prompt = handle.tokenize(PROMPT.encode(), True, False)
    expected = _greedy_tokens(context, prompt, 4)
    del handle
    gc.collect()
    assert mappings_of(model_path) > unmapped
    assert _greedy_tokens(context, prompt, 4) == expected
    context.close()
    gc.collect()
    assert mappings_of(model_path) == unmapped


def test_a_collected_context_is_freed_before_its_model(model_path, unmapped) -> None:
    """No close() anywhere: dropping both leaves the finalizers to free context then weights."""
    for _ in range(3):
        ContextHandle(ModelHandle(model_path), ContextParams(n_ctx=256, n_threads=2)).decode_tokens([1, 2, 3])
        gc.collect()
    assert mappings_of(model_path) == unmapped


# -- one model, several contexts ----------------------------------------------------------------------------------

@pytest.mark.parametrize("first_closed", ["generator", "embedder"])
def test_with_context_shares_the_loaded_weights(model_path, unmapped, first_closed: str) -> None:
    generator = pl.Model(model_path, n_ctx=512, n_threads=2)
    loaded = mappings_of(model_path)
    embedder = generator.with_context(embedding=True, n_ctx=512, n_batch=512, n_threads=2)
    assert embedder.handle is generator.handle
    assert mappings_of(model_path) == loaded  # no second load of the file
    text = generator.generate(PROMPT, max_tokens=6, temperature=0).text
    vector = embedder.embed("a cat")
    closing, staying = (generator, embedder) if first_closed == "generator" else (embedder, generator)
    closing.close()
    assert not staying.closed and mappings_of(model_path) == loaded  # still in use: not freed
    if staying is embedder:
        assert np.allclose(embedder.embed("a cat"), vector, atol=1e-5)
    else:
        assert generator.generate(PROMPT, max_tokens=6, temperature=0).text == text
    staying.close()
    gc.collect()
    assert mappings_of(model_path) == unmapped


def test_the_engine_and_an_embedder_on_its_model_run_at_once(model_path, unmapped) -> None:
    """The server's arrangement: the embedder is a second context on the engine's weights; both work at the
    same time from their own threads, and give what each gives alone."""
    with pl.Model(model_path, embedding=True, n_ctx=512, n_threads=1) as alone:
        texts = ["a cat", "the weather in Paris", "pyllama90a"]
        expected_vectors = alone.embed(texts)
    engine = pl.BatchEngine(model_path, parallel=2, n_ctx=1024, n_threads=1)

    def generate() -> str:  # (after the first, each run reuses the slot's cached prompt the same way)
        return "".join(c.text for c in engine.stream(PROMPT, max_tokens=24, temperature=0, ignore_eos=True))

    try:
        generate()
        expected_text = generate()
        embedder = engine.model.with_context(embedding=True, n_ctx=512, n_threads=1)
        assert embedder.handle is engine.model.handle
        texts_seen: list[str] = []
        vectors: list[np.ndarray] = []
        generating = threading.Thread(target=lambda: texts_seen.append(generate()))
        generating.start()
        while generating.is_alive():
            vectors.append(embedder.embed(texts))
        generating.join()
        assert vectors, "the generation ended before an embedding started: nothing ran at once"
        assert texts_seen == [expected_text]
        assert all(np.allclose(v, expected_vectors, atol=1e-5) for v in vectors)
    finally:
        engine.close()  # the engine first: the embedder's context still has its weights
    assert np.allclose(embedder.embed(texts), expected_vectors, atol=1e-5)
    embedder.close()
    gc.collect()
    assert mappings_of(model_path) == unmapped


# -- each user's own native log lines -----------------------------------------------------------------------------

def _failing_decode(context: ContextHandle, bad_token: int) -> DecodeError:
    with pytest.raises(DecodeError) as raised:
        context.decode_tokens([bad_token])
    return raised.value


def test_lines_logged_on_another_thread_stay_out_of_this_threads_call(model_path) -> None:
    """A call's error carries what llama.cpp said during that call on its own thread, even when another thread
    makes llama.cpp log while it is open: outside any call of ours, or in a call of its own that fails."""
    from pyllama90a.native._ffi import lib

    handle = ModelHandle(model_path)
    mine, theirs = (ContextHandle(handle, ContextParams(n_ctx=256, n_threads=1)) for _ in range(2))
    their_error: list[DecodeError] = []

    def other_thread() -> None:
        lib.llama_get_logits_ith(theirs.ptr, 99)  # logs "invalid logits id 99", in no NativeCall
        their_error.append(_failing_decode(theirs, handle.n_vocab + 7))

    with NativeCall() as call:  # open on this thread while the other thread's lines are logged
        other = threading.Thread(target=other_thread)
        other.start()
        other.join()
        assert not call.lines, call.lines  # none of their lines reached this thread's call
        mine_error = _failing_decode(mine, handle.n_vocab + 3)
    assert any(f"= {handle.n_vocab + 7}" in line for line in their_error[0].native_log), their_error[0].native_log
    assert any(f"= {handle.n_vocab + 3}" in line for line in mine_error.native_log)
    assert not any(f"= {handle.n_vocab + 7}" in line for line in mine_error.native_log)


def test_concurrent_failures_each_carry_their_own_lines(model_path) -> None:
    """Two threads failing decodes on their own contexts, over and over at once: every error names its own bad
    token and never the other thread's (a shared buffer of recent lines mixes them)."""
    handle = ModelHandle(model_path)
    bad = {"a": handle.n_vocab + 11, "b": handle.n_vocab + 22}
    errors: dict[str, list[DecodeError]] = {"a": [], "b": []}
    start = threading.Barrier(2)

    def fail_repeatedly(name: str) -> None:
        context = ContextHandle(handle, ContextParams(n_ctx=256, n_threads=1))
        start.wait()
        for _ in range(200):
            errors[name].append(_failing_decode(context, bad[name]))

    threads = [threading.Thread(target=fail_repeatedly, args=(name,)) for name in bad]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name, other in (("a", "b"), ("b", "a")):
        assert len(errors[name]) == 200
        for e in errors[name]:
            assert any(f"= {bad[name]}" in line for line in e.native_log), e.native_log
            assert not any(f"= {bad[other]}" in line for line in e.native_log), e.native_log


def test_the_engine_threads_decode_error_carries_the_engine_threads_lines(model_path) -> None:
    """A decode that fails in the engine thread: the request's error has llama.cpp's lines about it, logged on
    the engine thread (the slot's KV cells ran out)."""
    engine = pl.BatchEngine(model_path, parallel=2, n_ctx=1024, n_batch=256, n_threads=2)
    try:
        real = engine.n_ctx_slot
        engine.n_ctx_slot = 4 * real  # the engine trusts this: a long prompt runs past the slot's cells
        with pytest.raises(DecodeError) as raised:
            list(engine.stream(list(range(100, 100 + real + 200)), max_tokens=2))
        assert raised.value.native_log and "llama.cpp said" in str(raised.value)
    finally:
        engine.close()


# -- every native failure path: a clear exception, never a crash ------------------------------------------------

@pytest.fixture(scope="module")
def native(model_path):
    handle = ModelHandle(model_path)
    context = ContextHandle(handle, ContextParams(n_ctx=256, n_threads=2))
    context.decode_tokens(handle.tokenize(PROMPT.encode(), True, False))
    return handle, context


def _closed_context(handle: ModelHandle) -> ContextHandle:
    context = ContextHandle(handle, ContextParams(n_ctx=256, n_threads=1))
    context.close()
    return context


def _overfilled_batch() -> None:
    with Batch(4) as batch:
        batch.add([1, 2, 3, 4, 5], 0, 0, logits="last")


def _decode_on(context: ContextHandle, tokens: list[int], start: int, seq: int) -> None:
    with Batch(8) as batch:
        batch.add(tokens, start, seq, logits="last")
        context.decode(batch)


# (name, call on (handle, context), exception, what the message or llama.cpp's lines say)
FAILURES: list[tuple[str, Callable[[ModelHandle, ContextHandle], Any], type[Exception], str]] = [
    ("load a file that is no GGUF", lambda h, c: ModelHandle("/proc/self/status"), ModelLoadError,
     "failed to read magic"),
    ("decode an id outside the vocabulary", lambda h, c: c.decode_tokens([h.n_vocab]), DecodeError,
     "invalid token"),
    ("decode a sequence the context lacks", lambda h, c: _decode_on(c, [5], 0, 3), DecodeError, "invalid seq_id"),
    ("decode positions with a gap", lambda h, c: _decode_on(c, [5], 1000, 0), DecodeError,
     "inconsistent sequence positions"),
    ("decode nothing", lambda h, c: c.decode_tokens([]), InvalidArgumentError, r"1 to \d+ tokens \(n_batch\)"),
    ("decode more than n_batch", lambda h, c: c.decode_tokens([5] * (c.n_batch + 1)), InvalidArgumentError,
     r"1 to \d+ tokens \(n_batch\)"),
    ("overfill a batch", lambda h, c: _overfilled_batch(), InvalidArgumentError, "do not fit a batch of 4"),
    ("a logits row never computed", lambda h, c: c.logits_row(3), LlamaError, "invalid logits id 3"),
    ("sample where there are no logits", lambda h, c: SamplerChain(SamplingParams(), h.n_vocab).sample(c, 3),
     LlamaError, "invalid logits id 3"),
    ("a pooled embedding of a context without them", lambda h, c: c.pooled_embedding(0), LlamaError,
     "no pooled embedding"),
    ("cut a sequence the context lacks", lambda h, c: c.trim_sequence(1, 0), InvalidArgumentError,
     r"seq must be in \[0, 0\]"),
    ("clear a sequence the context lacks", lambda h, c: c.clear_sequence(-1), InvalidArgumentError,
     r"seq must be in \[0, 0\]"),
    ("a state that is garbage", lambda h, c: c.set_state(b"\x01" * 64), LlamaError, "error loading state"),
    ("the piece of an id outside the vocabulary", lambda h, c: h.token_piece(h.n_vocab), InvalidArgumentError,
     "not in this model's vocabulary"),
    ("detokenize an id outside the vocabulary", lambda h, c: h.detokenize([-1]), InvalidArgumentError,
     "tokens must be integers"),
    ("a built-in chat template llama.cpp lacks", lambda h, c: h.builtin_chat_template(
        [{"role": "user", "content": "hi"}], "no-such-template"), LlamaError, "does not support the chat template"),
    ("use a closed context", lambda h, c: _closed_context(h).logits_row(-1), ClosedError, "closed"),
    ("a batch's tokens after it was freed", lambda h, c: _freed_batch().add([1], 0, 0, logits="last"), ClosedError,
     "closed"),
]


def _freed_batch() -> Batch:
    batch = Batch(2)
    batch.close()
    return batch


@pytest.mark.parametrize("name", [f[0] for f in FAILURES])
def test_a_native_failure_is_a_clear_exception(native, name: str) -> None:
    _, call, error, says = next(f for f in FAILURES if f[0] == name)
    handle, context = native
    with pytest.raises(error, match=says):
        call(handle, context)
    context.clear()  # the context is still usable afterwards
    context.decode_tokens([1, 2])
    assert context.logits_row(-1).shape == (handle.n_vocab,)


def test_token_ids_are_checked_by_the_vocabulary_they_index(native) -> None:
    """ModelHandle.check_token_ids, the one check of ids a caller hands in (a prompt, eval, an embedding's input,
    detokenize): a list, tuple or range of ints in [0, n_vocab), as a list."""
    handle, _ = native
    n = handle.n_vocab
    assert handle.check_token_ids((0, n - 1)) == [0, n - 1]
    assert handle.check_token_ids(range(3)) == [0, 1, 2]
    assert handle.check_token_ids([]) == []
    for bad in ([n], [-1], [True], [1.0], ["1"], [2**70]):
        with pytest.raises(InvalidArgumentError, match=rf"tokens must be integers in \[0, {n}\)"):
            handle.check_token_ids(bad)
    for bad in ("abc", None, {1: 2}, np.arange(3)):
        with pytest.raises(InvalidArgumentError, match="tokens must be a list of integers"):
            handle.check_token_ids(bad)


def test_a_context_llama_cpp_refuses_is_a_context_error_with_its_reason(tmp_path) -> None:
    """llama.cpp refuses a q4_0 K cache when its 32-value blocks do not divide the head dimension (48)."""
    from pyllama90a.tools.synthetic import Shape, write_synthetic

    path = write_synthetic(Shape("hd48", n_embd=192, n_layer=1, n_head=4, n_head_kv=2, n_ff=256, n_vocab=300),
                           tmp_path / "hd48.gguf", weight_type="f16")
    handle = ModelHandle(path)
    with pytest.raises(ContextError, match="could not create a context") as raised:
        ContextHandle(handle, ContextParams(n_ctx=256, type_k="q4_0", flash_attn="on"))
    assert any("does not divide n_embd_head_k=48" in line for line in raised.value.native_log)


@pytest.mark.parametrize("params, says", [
    ({"n_ctx": 0}, "n_ctx must be a positive integer"),
    ({"type_k": "q3_k"}, "unknown K cache type"),
    ({"flash_attn": "maybe"}, "flash_attn must be one of"),
    ({"pooling": "max"}, "pooling must be one of"),
    ({"n_ctx": 1024, "n_seq_max": 8}, "n_ctx must be at least 2048"),
])
def test_context_params_are_checked_before_llama_cpp_sees_them(params: dict, says: str) -> None:
    with pytest.raises(InvalidArgumentError, match=says):
        ContextParams(**params)
