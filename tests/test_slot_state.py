"""A BatchEngine slot's KV cells saved to a file, erased and restored (slot_state.py): the restored cells serve
the next request with the same prompt (only its last token is decoded again) and the same greedy text; wrong
files, busy slots and bad slot numbers are refused."""
from __future__ import annotations

import time

import pytest

import pyllama90a as pl

PROMPT = "The capital of France is a city that"


@pytest.fixture()
def engine(model_path):
    with pl.BatchEngine(model_path, parallel=2, n_ctx=1024, ctk="q4_0", ctv="q4_0", flash_attn="off",
                        n_threads=2) as e:
        yield e


def _run(engine, prompt=PROMPT, **kw) -> str:
    return "".join(c.text for c in engine.stream(prompt, max_tokens=8, temperature=0, **kw))


def test_save_erase_restore_gives_the_cells_back(engine, tmp_path):
    want = _run(engine)
    slot = next(i for i, (_, n_cached) in enumerate(engine.slot_usage()) if n_cached)
    n_cached = engine.slot_usage()[slot][1]
    assert engine.save_slot(slot, tmp_path / "slot.bin")[0] == n_cached
    assert engine.erase_slot(slot) == n_cached and engine.slot_usage()[slot][1] == 0
    assert engine.restore_slot(1 - slot, tmp_path / "slot.bin")[0] == n_cached  # into the other slot
    assert engine.slot_usage()[1 - slot][1] == n_cached
    decoded = engine.stats().prompt_tokens_decoded
    assert _run(engine) == want
    assert engine.stats().prompt_tokens_decoded - decoded <= 1  # the restored cells were reused


def test_a_model_state_file_is_not_a_slot_file(engine, model_path, tmp_path):
    with pl.Model(model_path, n_ctx=512, ctk="q4_0", ctv="q4_0", flash_attn="off") as m:
        m.eval(m.tokenize(PROMPT))
        m.save_state(tmp_path / "model.state")
    _run(engine)
    before = engine.slot_usage()
    with pytest.raises(pl.StateFileError, match="n_seq_max"):
        engine.restore_slot(0, tmp_path / "model.state")
    assert engine.slot_usage() == before  # refused before the slot was touched
    with pytest.raises(pl.StateFileError):
        engine.restore_slot(0, tmp_path / "missing.bin")


def test_busy_slots_and_bad_numbers_are_refused(engine, tmp_path):
    chunks = engine.stream(PROMPT, max_tokens=400, temperature=0, ignore_eos=True)
    next(chunks)
    busy = next(i for i, (is_busy, _) in enumerate(engine.slot_usage()) if is_busy)
    with pytest.raises(pl.BusyError, match=f"slot {busy}: it is generating"):
        engine.save_slot(busy, tmp_path / "busy.bin")
    chunks.close()
    with pytest.raises(pl.InvalidArgumentError, match="slot"):
        engine.erase_slot(2)
    deadline = time.monotonic() + 10
    while engine.slot_usage()[busy][0]:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert engine.erase_slot(busy) > 0


def test_a_payload_llama_cpp_refuses_leaves_the_slot_empty(engine, tmp_path):
    # a file every check of ours passes (its checksum is right) whose llama.cpp state is cut in half: llama.cpp
    # refuses it after the slot's cells were emptied, so the slot must say it holds nothing, or the next request
    # with that prompt would take cells that are gone for its own
    from pyllama90a.slot_state import slot_identity
    from pyllama90a.state_file import read_state_file, write_state_file

    _run(engine)
    slot = next(i for i, (_, n_cached) in enumerate(engine.slot_usage()) if n_cached)
    good = tmp_path / "slot.bin"
    engine.save_slot(slot, good)
    expected = slot_identity(engine.model, engine.n_ctx_slot, None)
    tokens, payload, scales = read_state_file(bytes(good), expected, engine.n_ctx_slot, engine.model.handle.n_vocab)
    cut = tmp_path / "cut.bin"
    write_state_file(bytes(cut), slot_identity(engine.model, engine.n_ctx_slot, scales), tokens,
                     memoryview(payload[:len(payload) // 2]))
    with pytest.raises(pl.StateFileError, match=r"llama.cpp refused the slot state .* the slot is empty now"):
        engine.restore_slot(slot, cut)
    assert engine.slot_usage()[slot] == (False, 0)
    assert engine.restore_slot(slot, good)[0] == len(tokens)  # a good file still restores into it
