"""Context shift (llama-server's --context-shift; core/generation/context_shift.py): a generation that fills its
cells keeps the first n_keep tokens, drops half of the rest, moves the cells after them down and goes on; without
it the generation ends with "length" one cell short of full, as llama-server's does. Real model: SmolLM2's head
dim is 64, so a quantized K is stored Hadamard-rotated and a shift dequantizes it, rotates it back, re-ropes it,
rotates and quantizes it again (llama_kv_cache::build_rope_shift)."""
from __future__ import annotations

import struct

import numpy as np
import pytest

import pyllama90a as pl
from pyllama90a.core.generation.context_shift import kept_at_shift, shift
from pyllama90a.errors import ContextError, InvalidArgumentError
from pyllama90a.native import Batch, ContextHandle
from pyllama90a.tools.synthetic import Shape, synthetic_model

N_CTX = 256  # llama.cpp's smallest sequence
PROMPT = "Once upon a time, in a small village by the sea, there lived an old fisherman who"


def no_end(model: pl.Model) -> dict[int, float]:
    """logit_bias that bans the end-of-generation tokens, so that a generation runs until max_tokens."""
    return {t: -100.0 for t in range(model.handle.n_vocab) if model.handle.is_eog(t)}


@pytest.fixture(scope="module")
def shifting(model_path):
    with pl.Model(model_path, n_ctx=N_CTX, n_threads=2, context_shift=True) as m:
        yield m


@pytest.fixture(scope="module")
def plain(model_path):
    with pl.Model(model_path, n_ctx=N_CTX, n_threads=2) as m:
        yield m


def test_a_generation_goes_on_past_the_context(shifting) -> None:
    out = shifting.generate(PROMPT, max_tokens=N_CTX + 20, temperature=0, logit_bias=no_end(shifting))
    assert len(out.tokens) == N_CTX + 20 and out.finish_reason == "length"
    assert shifting.n_cached < N_CTX


def test_without_context_shift_the_generation_ends_one_cell_short(plain) -> None:
    """llama-server's shape (its test_ctx_shift_disabled_short_prompt): prompt + generated = the slot's cells."""
    prompt = plain.tokenize(PROMPT)
    out = plain.generate(prompt, max_tokens=2 * N_CTX, temperature=0, logit_bias=no_end(plain))
    assert out.finish_reason == "length" and len(prompt) + len(out.tokens) == N_CTX


@pytest.mark.parametrize("n_keep", [-1, 5])
def test_the_kept_prompt_stays_in_the_cells(shifting, n_keep: int) -> None:
    """After shifts, the next request that starts with the prompt reuses exactly the n_keep tokens kept (-1: all
    of the prompt): they were never dropped, and what followed them was."""
    prompt = shifting.tokenize(PROMPT)
    shifting.generate(prompt, max_tokens=N_CTX, temperature=0, logit_bias=no_end(shifting), n_keep=n_keep)
    again = shifting.generate([*prompt, *shifting.tokenize(" said")], max_tokens=1, temperature=0)
    assert again.usage.cached_tokens == (len(prompt) if n_keep == -1 else n_keep)


def test_greedy_text_is_the_same_streamed(shifting) -> None:
    ban = no_end(shifting)
    whole = shifting.generate(PROMPT, max_tokens=N_CTX, temperature=0, logit_bias=ban)
    pieces = list(shifting.generate(PROMPT, max_tokens=N_CTX, temperature=0, logit_bias=ban, stream=True))
    assert [t for p in pieces for t in p.tokens] == whole.tokens


def test_kept_tokens_as_llama_server_counts_them(plain) -> None:
    prompt = list(range(50))
    vocab = plain.handle
    assert not vocab.add_bos
    assert kept_at_shift(False, 10, prompt, vocab, 256) is None
    assert kept_at_shift(True, 10, prompt, vocab, 256) == 10
    assert kept_at_shift(True, -1, prompt, vocab, 256) == 50
    assert kept_at_shift(True, 1000, prompt, vocab, 256) == 252  # (a shift frees 4 cells at least)
    with pl.Model(synthetic_model("tiny"), n_ctx=256, n_threads=2) as bos_adding:
        assert bos_adding.handle.add_bos
        assert kept_at_shift(True, 10, prompt, bos_adding.handle, 256) == 11  # (n_keep does not count BOS)


@pytest.mark.parametrize("n_keep", [-2, 1.5, True, "1"])
def test_a_bad_n_keep_is_refused(shifting, n_keep) -> None:
    with pytest.raises(InvalidArgumentError, match="n_keep"):
        shifting.generate(PROMPT, max_tokens=2, n_keep=n_keep)


def test_context_shift_is_for_generation(model_path) -> None:
    with pytest.raises(InvalidArgumentError, match="context_shift"):
        pl.Model(model_path, n_ctx=N_CTX, embedding=True, context_shift=True)
    with pytest.raises(InvalidArgumentError, match="context_shift"):
        pl.Model(model_path, n_ctx=N_CTX, context_shift=1)


def test_the_engine_shifts_each_slot(model_path) -> None:
    with pl.BatchEngine(model_path, parallel=2, n_ctx=2 * N_CTX, n_threads=2, context_shift=True) as engine:
        ban = no_end(engine.model)
        streams = [engine.stream(PROMPT + suffix, max_tokens=N_CTX + 20, temperature=0, logit_bias=ban)
                   for suffix in ("", " and")]
        handles = [[next(s)] for s in streams]  # (both submitted: they run in the two slots together)
        for chunks, rest in zip(handles, streams, strict=True):
            chunks.extend(rest)
        with pl.Model(model_path, n_ctx=N_CTX, n_threads=2, context_shift=True) as alone:
            local = alone.generate(PROMPT, max_tokens=N_CTX + 20, temperature=0, logit_bias=ban)
    for chunks in handles:
        assert chunks[-1].finish_reason == "length" and chunks[-1].usage.completion_tokens == N_CTX + 20
    assert [t for c in handles[0] for t in c.tokens] == local.tokens  # (the slot shifts as Model does)


# -- the rotation of K at a shift ----------------------------------------------------------------------

N_TAIL, N_STEPS = 40, 16
MODES = [("f16", "off"), ("f16", "on"), ("q8_0", "off"), ("q4_0", "off"), ("q4_0", "on"), ("q4_0", "hybrid")]


def _decode_steps(context: ContextHandle, batch: Batch, tokens: list[int], start: int) -> np.ndarray:
    """Decode `tokens` one at a time on sequence 0 from position `start`; the logits after each."""
    rows = []
    for i, token in enumerate(tokens):
        batch.clear()
        batch.add([token], start + i, 0, logits="last")
        context.decode(batch)
        rows.append(np.copy(context.logits_row(-1)))
    return np.array(rows)


def _prefill(context: ContextHandle, batch: Batch, tokens: list[int], start: int) -> None:
    context.clear()
    batch.clear()
    batch.add(tokens, start, 0, logits="last")
    context.decode(batch)


def _positions_moved_without_rotating(context: ContextHandle) -> None:
    """Sequence 0's cells given positions 0, 1, ... with their K left as it was roped: a shift that forgets the
    rotation. llama.cpp's sequence state: a magic number, the sequence id, n_stream, then per stream cell_count
    and per cell (pos, n_seq_id, the sequence ids), then the K and V rows; the positions are rewritten."""
    state = bytearray(context.sequence_state_bytes(0))
    _, seq, n_stream, n_cells = struct.unpack_from("<IiII", state, 0)
    assert seq == 0 and n_stream == 1 and n_cells == N_TAIL
    for i in range(n_cells):
        pos, n_seq, seq = struct.unpack_from("<iIi", state, 16 + 12 * i)
        assert (pos, n_seq, seq) == (N_TAIL + i, 1, 0)  # (the layout read right: the offset positions)
        struct.pack_into("<i", state, 16 + 12 * i, i)
    context.clear()
    context.set_sequence_state(0, bytes(state))


def _kl(p_logits: np.ndarray, q_logits: np.ndarray) -> float:
    """KL(p || q) of each row's softmax, averaged over the rows (nats)."""
    def log_softmax(x: np.ndarray) -> np.ndarray:
        x = x.astype(np.float64) - x.max(axis=-1, keepdims=True)
        return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))
    lp, lq = log_softmax(p_logits), log_softmax(q_logits)
    return float((np.exp(lp) * (lp - lq)).sum(axis=-1).mean())


def _kl_of_shift(m: pl.Model, tail: list[int], steps: list[int]) -> tuple[float, float, float]:
    """The tail of a text decoded at positions d, d+1, ... (with nothing before it, so its K and V are what they
    would be at 0, 1, ...: attention sees relative positions only) is shifted by -d with the shift the generation
    uses; the next steps' logits against a fresh context's, which decoded the tail at 0, 1, ... Returns the KL of
    (fresh, shifted), the floor (fresh against the same text decoded at d, d+1, ... without a shift: K roped at
    other angles rounds and quantizes otherwise) and the control (the positions moved, K not rotated)."""
    with m.hold_context("the test") as context, Batch(context.n_batch) as batch:
        _prefill(context, batch, tail, 0)
        fresh = _decode_steps(context, batch, steps, N_TAIL)

        _prefill(context, batch, tail, N_TAIL)  # (the dropped half, tokens never decoded, came first)
        cached = [*range(N_TAIL), *tail]
        assert shift(context, 0, cached, 0) == N_TAIL and cached == tail
        shifted = _decode_steps(context, batch, steps, N_TAIL)

        _prefill(context, batch, tail, N_TAIL)
        elsewhere = _decode_steps(context, batch, steps, 2 * N_TAIL)

        _prefill(context, batch, tail, N_TAIL)
        _positions_moved_without_rotating(context)
        unrotated = _decode_steps(context, batch, steps, N_TAIL)
    return _kl(fresh, shifted), _kl(fresh, elsewhere), _kl(fresh, unrotated)


@pytest.mark.parametrize(("kv", "flash_attn"), MODES)
def test_shifted_cells_give_the_logits_of_a_fresh_context(model_path, kv: str, flash_attn: str) -> None:
    """A shift's next logits are a fresh context's as closely as the same text decoded elsewhere is (SmolLM2's
    q4_0 cache is far from its f16 one); the control must be far off, else the test could not see a wrong
    rotation."""
    with pl.Model(model_path, n_ctx=2 * N_CTX, n_threads=2, ctk=kv, ctv=kv, flash_attn=flash_attn,
                  context_shift=True) as m:
        text = m.tokenize(PROMPT + " caught a fish that could speak. Every morning he went out with his boat "
                          "and sang to the waves, and every evening the fish told him what the sea had seen that "
                          "day, far out.")
        assert len(text) >= N_TAIL + N_STEPS
        kl, floor, control = _kl_of_shift(m, text[:N_TAIL], text[N_TAIL:N_TAIL + N_STEPS])
    bound = 2 * floor + 0.005
    assert kl < bound and control > 3 * bound, (kl, floor, control)


# head dim 128 with GQA 4: the fused decode kernel's shape on CUDA/HIP, where a quantized K is stored
# Hadamard-rotated by the fused store and the shift re-ropes the cells the kernel reads
SYNTHETIC = Shape("test-hd128", n_embd=512, n_layer=3, n_head=4, n_head_kv=1, n_ff=768, n_vocab=512)


@pytest.mark.parametrize(("kv", "flash_attn"), [("f16", "on"), ("q8_0", "hybrid"), ("q4_0", "hybrid")])
def test_shifted_cells_on_every_backend(kv: str, flash_attn: str) -> None:
    """The same check on a random-weight model, so that it runs wherever the model loads on the GPU (hybrid
    there decodes through the fused kernel). Random weights make every KL small (control ~6e-4 on the CPU, the
    q4_0 floor ~6e-5), so the bound's absolute term is 1e-7, not the real model's 0.005."""
    rng = np.random.default_rng(7)
    tokens = [1, *rng.integers(259, SYNTHETIC.n_vocab, size=N_TAIL + N_STEPS - 1).tolist()]
    with pl.Model(synthetic_model(SYNTHETIC, weight_type="f16"), n_ctx=2 * N_CTX, n_threads=2, ctk=kv, ctv=kv,
                  flash_attn=flash_attn, context_shift=True) as m:
        kl, floor, control = _kl_of_shift(m, tokens[:N_TAIL], tokens[N_TAIL:])
    bound = 2 * floor + 1e-7
    assert kl < bound and control > 3 * bound, (kl, floor, control)


def test_a_model_that_cannot_shift_is_refused_when_made(tmp_path) -> None:
    """A multi-section RoPE model (several positions per token: llama_memory_can_shift is false) with
    context_shift=True: a ContextError naming why at construction, never an abort when the cells fill."""
    from pyllama90a.fuzz.bases import load_base
    from pyllama90a.fuzz.gguf_file import ARRAY, I32, STRING
    from pyllama90a.fuzz.gguf_mutations import encode_value, typed, write_case

    base = load_base("tiny")
    ops: list[dict] = [{"op": "set", "key": "general.architecture", "value": typed(STRING, "paddleocr")},
                       {"op": "set", "key": "paddleocr.rope.dimension_sections",
                        "value": typed(ARRAY, [8, 12, 12, 0], I32)}]
    for e in base.entries:  # (the tiny llama's keys under the architecture's name)
        if e.key.startswith("llama."):
            ops += [{"op": "delete", "key": e.key},
                    {"op": "set", "key": "paddleocr" + e.key[len("llama"):], "value": encode_value(e.decoded())}]
    path = tmp_path / "mrope.gguf"
    write_case(base, [{"cls": "test", "ops": ops}], path)
    with pl.Model(path, n_ctx=N_CTX, n_threads=2) as m:  # (it loads and generates without the shift)
        assert m.generate([1, 300], max_tokens=2, temperature=0).tokens
    with pytest.raises(ContextError, match=r"cannot shift.*llama_memory_can_shift"):
        pl.Model(path, n_ctx=N_CTX, n_threads=2, context_shift=True)
