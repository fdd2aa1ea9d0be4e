"""The user API on the real default model: tokens, generation, streaming, chat, embeddings, state, lifetime."""
from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest

import pyllama90a as pl
from pyllama90a.errors import BusyError
from support.mappings import mappings_of, needs_proc_maps


def test_tokenize_detokenize_round_trip(model) -> None:
    text = "Hello, world! Ünïcödé and emoji 🦙 survive."
    tokens = model.tokenize(text, add_special=False)
    assert tokens and all(isinstance(t, int) for t in tokens)
    assert model.detokenize(tokens) == text


def test_greedy_generation_is_deterministic_and_reports_usage(model) -> None:
    a = model.generate("The capital of France is", max_tokens=8, temperature=0)
    b = model.generate("The capital of France is", max_tokens=8, temperature=0)
    assert a.text == b.text and a.tokens == b.tokens
    assert "Paris" in a.text
    assert a.finish_reason == "length" and len(a.tokens) == 8
    assert a.usage.prompt_tokens == len(model.tokenize("The capital of France is"))
    assert a.usage.completion_tokens == 8 and a.usage.total_tokens == a.usage.prompt_tokens + 8
    assert a.timings.generate_ms > 0 and a.timings.generate_tokens_per_s > 0


def test_seeded_sampling_repeats_and_differs_from_other_seeds(model) -> None:
    kw = {"max_tokens": 24, "temperature": 1.2, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    a = model.generate("Once upon a time", seed=7, **kw)
    b = model.generate("Once upon a time", seed=7, **kw)
    others = {tuple(model.generate("Once upon a time", seed=s, **kw).tokens) for s in (8, 9, 10)}
    assert a.tokens == b.tokens
    assert others - {tuple(a.tokens)}


def test_a_tiny_temperature_samples_as_greedy_does(model) -> None:
    # llama.cpp divides the logits by the temperature as a float: under about 1e-36 they overflowed, the softmax
    # was NaN and one fixed token came back whatever the seed; the limit of sampling as it goes to 0 is greedy
    greedy = model.generate("The capital of France is", max_tokens=4, temperature=0).tokens
    for temperature in (1e-44, 1e-38, 1e-31):
        for seed in (1, 2):
            assert model.generate("The capital of France is", max_tokens=4, temperature=temperature, seed=seed,
                                  top_k=0, top_p=1.0, min_p=0.0).tokens == greedy, (temperature, seed)


def test_leaving_a_with_block_ends_the_stream_it_left_suspended(model_path) -> None:
    # an exception while a stream was held came out as BusyError ("cannot close the model") and the Model stayed
    # open; a loop broken out of did the same on a plain exit
    with pytest.raises(KeyError, match="raised in the loop"), pl.Model(model_path, n_ctx=256) as m:
        for _ in m.generate("Once upon a time", max_tokens=50, temperature=0, stream=True):
            raise KeyError("raised in the loop")
    assert m.closed
    with pl.Model(model_path, n_ctx=256) as m:
        pieces = m.generate("Once upon a time", max_tokens=50, temperature=0, stream=True)
        next(pieces)
    assert m.closed and list(pieces) == []  # (the stream ended with its Model)


def test_stream_pieces_join_to_the_same_text(model) -> None:
    whole = model.generate("List three fruits:", max_tokens=24, temperature=0)
    pieces = list(model.generate("List three fruits:", max_tokens=24, temperature=0, stream=True))
    assert all(isinstance(p, pl.Piece) for p in pieces)
    assert "".join(p.text for p in pieces) == whole.text
    assert [p.finish_reason for p in pieces[:-1]] == [None] * (len(pieces) - 1)
    assert pieces[-1].finish_reason == "length"
    assert [t for p in pieces for t in p.tokens] == whole.tokens


def test_stream_never_splits_utf8(model) -> None:
    # 🦙 is three tokens in this vocabulary, none of them a whole character: the stream must hold bytes back
    emoji_tokens = model.tokenize("🦙", add_special=False)
    assert len(emoji_tokens) > 1 and all("\ufffd" in model.detokenize([t]) for t in emoji_tokens)
    prompt = "Repeat exactly: 🦙🦙🦙 ünïcödé 🦙🦙🦙\nRepeat exactly:"
    pieces = list(model.generate(prompt, max_tokens=40, temperature=0, stream=True))
    text = "".join(p.text for p in pieces)
    assert "\ufffd" not in text
    assert text.count("🦙") >= 3, f"the model did not repeat the emoji, so no split was crossed: {text!r}"
    # the pieces that carry an emoji are the ones that waited for all of its tokens
    assert all(len(p.tokens) >= 2 for p in pieces if "🦙" in p.text)
    for p in pieces:
        p.text.encode("utf-8")  # every piece is whole characters


def test_stop_strings_cut_the_text(model) -> None:
    full = model.generate("Count: 1, 2, 3,", max_tokens=16, temperature=0)
    assert "5" in full.text
    cut = model.generate("Count: 1, 2, 3,", max_tokens=16, temperature=0, stop=["5"])
    assert cut.finish_reason == "stop"
    assert cut.text == full.text[: full.text.index("5")]
    streamed = "".join(p.text for p in model.generate("Count: 1, 2, 3,", max_tokens=16, temperature=0,
                                                       stop="5", stream=True))
    assert streamed == cut.text


def test_chat_uses_the_models_template(model) -> None:
    prompt = model.apply_chat_template([{"role": "user", "content": "hi"}])
    assert "<|im_start|>user\nhi<|im_end|>" in prompt and prompt.endswith("<|im_start|>assistant\n")
    # (a system message of our own: the template's default one leads the 135M model astray on this question)
    question = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "What is the capital of France?"}]
    reply = model.chat(question, max_tokens=32, temperature=0)
    assert "Paris" in reply.text
    assert reply.finish_reason in ("stop", "length")
    streamed = "".join(p.text for p in model.chat(question, max_tokens=32, temperature=0, stream=True))
    assert streamed == reply.text


def test_ignore_eos_generates_max_tokens_where_the_model_would_stop(model) -> None:
    question = [{"role": "user", "content": "Say hello."}]
    ended = model.chat(question, max_tokens=96, temperature=0)
    assert ended.finish_reason == "stop" and ended.usage.completion_tokens < 96  # (the precondition)
    forced = model.chat(question, max_tokens=96, temperature=0, ignore_eos=True)
    assert forced.finish_reason == "length" and len(forced.tokens) == 96
    assert not any(model.handle.is_eog(t) for t in forced.tokens)
    assert forced.text.startswith(ended.text)  # (greedy: the same reply, then on past where it ended)
    text = model.generate("The capital of France is", max_tokens=40, temperature=0, ignore_eos=True)
    assert text.finish_reason == "length" and len(text.tokens) == 40
    with pytest.raises(pl.InvalidArgumentError, match="ignore_eos"):
        model.generate("Hi", regex="[a-z]+", ignore_eos=True)


def test_embeddings_are_normalized_and_meaningful(model_path) -> None:
    with pl.Model(model_path, embedding=True, n_ctx=512) as m:
        one = m.embed("a cat sat on the mat")
        many = m.embed(["a cat sat on the mat", "a kitten sat on a rug", "stock markets fell sharply today"])
    assert one.shape == (576,) and one.dtype == np.float32
    assert many.shape == (3, 576)
    np.testing.assert_allclose(np.linalg.norm(many, axis=1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(many[0], one, rtol=1e-4, atol=1e-5)
    assert many[0] @ many[1] > many[0] @ many[2]


def test_kv_cache_reports_real_sizes(model_path) -> None:
    with pl.Model(model_path, ctk="q8_0", ctv="q4_0", flash_attn="off", n_ctx=512) as m:
        info = m.kv_cache
    # 30 layers x 512 cells x 3 KV heads x 64 dims; q8_0: 34 bytes / 32 values, q4_0: 18 / 32
    values = 30 * 512 * 3 * 64
    assert (info.type_k, info.type_v, info.n_ctx) == ("q8_0", "q4_0", 512)
    assert info.k_bytes == values * 34 // 32
    assert info.v_bytes == values * 18 // 32
    assert info.total_bytes == info.k_bytes + info.v_bytes


@pytest.mark.parametrize("ctv", ["f16", "q4_0"])
def test_state_round_trip_continues_identically(model_path, tmp_path, ctv: str) -> None:
    prompt = "The three primary colors are"
    state = tmp_path / "s.bin"
    with pl.Model(model_path, ctk=ctv, ctv=ctv, flash_attn="off", n_ctx=256) as m:
        first = m.generate(prompt, max_tokens=12, temperature=0)
        m.save_state(state)
    with pl.Model(model_path, ctk=ctv, ctv=ctv, flash_attn="off", n_ctx=256) as m2:
        m2.load_state(state)
        again = m2.generate(prompt, max_tokens=12, temperature=0)
        # only the last prompt token was decoded: the rest came from the file
        assert again.timings.prompt_tokens_evaluated == 1
    assert again.text == first.text


def test_state_file_shrinks_with_quantized_kv(model_path, tmp_path) -> None:
    sizes = {}
    for kv in ("f16", "q4_0"):
        with pl.Model(model_path, ctk=kv, ctv=kv, flash_attn="off", n_ctx=256) as m:
            m.generate("A long enough prompt to fill some of the cache with keys and values.", max_tokens=8,
                       temperature=0)
            m.save_state(tmp_path / kv)
            sizes[kv] = (tmp_path / kv).stat().st_size
    assert sizes["q4_0"] < 0.45 * sizes["f16"]


def test_close_is_idempotent_and_closed_model_raises(model_path) -> None:
    m = pl.Model(model_path, n_ctx=128)
    assert not m.closed
    m.close()
    m.close()
    assert m.closed
    with pytest.raises(pl.ClosedError):
        m.generate("hi")
    with pytest.raises(pl.ClosedError):
        _ = m.kv_cache


@needs_proc_maps
def test_garbage_collected_model_is_freed(model_path) -> None:
    """A Model dropped without close() is freed by its finalizer: its weights' mapping goes away. (RSS is no
    measure here: mapped weights pages count in RSS only once touched, and allocators keep freed memory.)"""
    gc.collect()
    before = mappings_of(model_path)
    kept = pl.Model(model_path, n_ctx=128)
    assert mappings_of(model_path) > before, "the weights are not mapped from the file: this test sees nothing"
    del kept
    gc.collect()
    assert mappings_of(model_path) == before
    for _ in range(3):
        pl.Model(model_path, n_ctx=2048)  # dropped at once: the finalizer frees context and model
        gc.collect()
    assert mappings_of(model_path) == before


def rss_growth_over_cycles(path, state: Path, cycles: int, warmup: int = 50) -> int:
    """Bytes the process's RSS grew over `cycles` load / generate / stream / save+load state / close cycles,
    after `warmup` cycles that let the allocators reach their steady size."""
    import psutil

    def cycle() -> None:
        with pl.Model(path, n_ctx=256, n_threads=1) as m:
            m.generate("hello there", max_tokens=8, temperature=0)
            stream = m.generate("hello", max_tokens=8, temperature=0, stream=True)
            next(stream)
            stream.close()
            m.save_state(state)
            m.load_state(state)

    for _ in range(warmup):
        cycle()
    gc.collect()
    before = psutil.Process().memory_info().rss
    for _ in range(cycles):
        cycle()
    gc.collect()
    return psutil.Process().memory_info().rss - before


def test_no_rss_growth_over_500_cycles(tmp_path) -> None:
    from pyllama90a.tools.synthetic import SHAPES, write_synthetic

    tiny = write_synthetic(SHAPES["tiny"], tmp_path / "tiny.gguf", weight_type="f16")
    growth = rss_growth_over_cycles(tiny, tmp_path / "s.state", cycles=500)
    # one leaked model (5 MiB of weights) or context per cycle would be gigabytes; allocator noise is < 1 MiB
    assert growth < 8 * 2**20, f"RSS grew {growth / 2**20:.1f} MiB over 500 cycles"


def test_a_running_stream_blocks_other_generations(model) -> None:
    stream = model.generate("Hello", max_tokens=4, temperature=0, stream=True)
    next(stream)
    with pytest.raises(BusyError, match="another generation"):
        model.generate("Hello", max_tokens=4)
    list(stream)
    assert model.generate("Hello", max_tokens=2, temperature=0).usage.completion_tokens == 2


def test_generate_from_token_ids_equals_generate_from_text(model) -> None:
    text = model.generate("The capital of France is", max_tokens=6, temperature=0)
    ids = model.generate(model.tokenize("The capital of France is"), max_tokens=6, temperature=0)
    assert ids.tokens == text.tokens
    with pytest.raises(pl.InvalidArgumentError):
        model.generate([10**9])


def test_eval_and_truncate_manage_the_cache(model_path) -> None:
    with pl.Model(model_path, n_ctx=256) as m:
        tokens = m.tokenize("The capital of France is")
        m.eval(tokens[:3])
        m.eval(tokens[3:])
        assert m.n_cached == len(tokens)
        # what eval left in the cache is what generate would have computed: only the last token is redone
        out = m.generate(tokens, max_tokens=4, temperature=0)
        assert out.timings.prompt_tokens_evaluated == 1 and "Paris" in out.text
        m.truncate(2)
        assert m.n_cached == 2
        with pytest.raises(pl.ContextOverflowError):
            m.eval([5] * 300)
        with pytest.raises(pl.InvalidArgumentError):
            m.truncate(-1)


def test_last_logits_are_the_last_cached_tokens_after_truncate_and_load_state(model_path, tmp_path) -> None:
    # truncate and load_state change the cells, not the context's logits: last_logits gave those of a token no
    # longer cached (max difference 31, another argmax)
    with pl.Model(model_path, n_ctx=512) as m:
        tokens = m.tokenize("The capital of France is")
        truth = m.logits(tokens)[-1]
        m.save_state(tmp_path / "prompt.state")
        m.eval([7042, 30, 198])
        m.truncate(len(tokens))
        assert np.abs(m.last_logits() - truth).max() < 0.05  # (one token decoded against five at once)
        m.eval([100, 200])
        m.load_state(tmp_path / "prompt.state")
        assert m.n_cached == len(tokens) and np.abs(m.last_logits() - truth).max() < 0.05
        assert m.n_cached == len(tokens)  # (the last token decoded again, not added)


def test_compute_buffer_is_reported_and_grows_with_the_context(model_path) -> None:
    sizes = []
    for n_ctx in (256, 2048):
        with pl.Model(model_path, n_ctx=n_ctx, flash_attn="off") as m:
            sizes.append(m.compute_buffer_bytes)
    # without FA the KQ matrix (n_kv x n_ubatch x n_head floats) grows with the context
    assert 0 < sizes[0] < sizes[1]


def test_flash_attn_auto_follows_the_policy_on_cpu(model_path) -> None:
    with pl.Model(model_path, ctk="q4_0", ctv="q4_0", n_ctx=256) as m:
        assert m.flash_attn == "auto"
        assert (m.attention.flash_attn, m.attention.backend) == ("off", "CPU")
        assert "quantized V" in m.attention.reason
    with pl.Model(model_path, n_ctx=256) as m:
        assert m.attention.flash_attn == "auto"  # f16: llama.cpp's own choice
    with pl.Model(model_path, ctk="q4_0", ctv="q4_0", flash_attn="on", n_ctx=256) as m:
        assert m.attention == pl.AttentionChoice("on", "CPU", "requested")
