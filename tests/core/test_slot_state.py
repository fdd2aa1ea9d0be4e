"""A BatchEngine slot's KV cells saved to a file, erased and restored (core/engine/slot_files.py): the restored cells
serve the next request with the same prompt (only its last token is decoded again) and the same greedy text; wrong
files, busy slots and bad slot numbers are refused."""
from __future__ import annotations

import os
import resource
import struct
import time

import pytest

import pyllama90a as pl
from pyllama90a.core.engine.slot_files import slot_identity, slot_limits
from pyllama90a.core.model.state_file import read_state_file, write_state_file

PROMPT = "The capital of France is a city that"


@pytest.fixture()
def engine(model_path):
    with pl.BatchEngine(model_path, parallel=2, n_ctx=1024, ctk="q4_0", ctv="q4_0", flash_attn="off",
                        n_threads=2) as e:
        yield e


KEY = b"k" * 32  # a server's secret


def _run(engine, prompt=PROMPT, **kw) -> str:
    return "".join(c.text for c in engine.stream(prompt, max_tokens=8, temperature=0, **kw))


def _parts(engine, path, key=None):
    """The tokens, payload and LoRA scales of the slot file at `path` (read_state_file's checks)."""
    limits = slot_limits(engine.model, engine._context, engine.n_ctx_slot)
    return read_state_file(bytes(path), slot_identity(engine.model, engine.n_ctx_slot, None), limits, key)


def _saved_slot(engine, path, key=None) -> int:
    _run(engine)
    slot = next(i for i, (_, n_cached) in enumerate(engine.slot_usage()) if n_cached)
    engine.save_slot(slot, path, key=key)
    return slot


def _max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


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
    _run(engine)
    slot = next(i for i, (_, n_cached) in enumerate(engine.slot_usage()) if n_cached)
    good = tmp_path / "slot.bin"
    engine.save_slot(slot, good)
    tokens, payload, scales = _parts(engine, good)
    cut = tmp_path / "cut.bin"
    write_state_file(bytes(cut), slot_identity(engine.model, engine.n_ctx_slot, scales), tokens,
                     memoryview(payload[:len(payload) // 2]))
    with pytest.raises(pl.StateFileError, match=r"llama.cpp refused the slot state .* the slot is empty now"):
        engine.restore_slot(slot, cut)
    assert engine.slot_usage()[slot] == (False, 0)
    assert engine.restore_slot(slot, good)[0] == len(tokens)  # a good file still restores into it


def test_a_full_slot_file_is_within_its_bound_and_the_bound_is_tight(engine, tmp_path):
    # the largest file a slot writes (every cell used) must restore, and the bound must be near it: a bound far
    # above it would let a planted file cost that much memory before it is refused
    prompt = [engine.model.tokenize(" the")[0]] * 500
    list(engine.stream(prompt, max_tokens=engine.n_ctx_slot - len(prompt), temperature=0, ignore_eos=True))
    slot, n_cached = next((i, n) for i, (_, n) in enumerate(engine.slot_usage()) if n)
    assert n_cached >= engine.n_ctx_slot - 1
    path = tmp_path / "full.bin"
    engine.save_slot(slot, path)
    largest = slot_limits(engine.model, engine._context, engine.n_ctx_slot).max_file_bytes
    assert 0.98 * largest < os.path.getsize(path) <= largest
    assert engine.restore_slot(1 - slot, path)[0] == n_cached


def test_a_file_larger_than_a_full_slot_is_refused_before_it_is_read(engine, tmp_path):
    # issue 33, item 11: a 1.5 GiB file whose header agrees with its size was read and hashed whole (RSS +1.5 GB)
    # before the checksum refused it. Its size alone now refuses it: the largest file a slot writes is known
    good = tmp_path / "good.bin"
    _saved_slot(engine, good)
    data = good.read_bytes()
    n_tokens, = struct.unpack_from("<I", data, 68)
    header_end = 80 + 36 + 4 * n_tokens  # (no adapters)
    big = tmp_path / "big.bin"
    size = 3 << 29
    with open(big, "wb") as f:
        f.write(data[:72] + struct.pack("<Q", size - header_end - 32) + data[80:header_end])
        f.truncate(size)  # sparse: no disk taken
    before = _max_rss_mb()
    with pytest.raises(pl.StateFileError, match=r"big.bin: is 1610612736 bytes, more than the largest state file"):
        engine.restore_slot(0, big)
    assert _max_rss_mb() - before < 200


def test_a_forged_token_list_is_refused_under_a_key(engine, tmp_path):
    # issue 33, item 13: the checksum is no MAC. A slot file whose token list was rewritten (its checksum made
    # again) restored, and the slot then answered another prompt from the first prompt's cells. With a key, only
    # the key's holder makes a file that restores
    good = tmp_path / "good.bin"
    _saved_slot(engine, good, key=KEY)
    tokens, payload, scales = _parts(engine, good, KEY)
    other = engine.model.tokenize("My favourite colour is blue, and the sky is")[:len(tokens)]
    identity = slot_identity(engine.model, engine.n_ctx_slot, scales)
    forged = tmp_path / "forged.bin"
    write_state_file(bytes(forged), identity, other, memoryview(payload))  # a checksum, as anyone can
    with pytest.raises(pl.StateFileError, match=r"forged\.bin: is not authenticated with a key"):
        engine.restore_slot(0, forged, key=KEY)
    write_state_file(bytes(forged), identity, other, memoryview(payload), key=b"another key, guessed")
    with pytest.raises(pl.StateFileError, match=r"forged\.bin: authentication failed"):
        engine.restore_slot(0, forged, key=KEY)
    with pytest.raises(pl.StateFileError, match=r"good\.bin: is authenticated with a key"):
        engine.restore_slot(0, good)
    assert engine.restore_slot(0, good, key=KEY)[0] == len(tokens)
    with pytest.raises(pl.InvalidArgumentError, match="at least 16 bytes"):
        engine.save_slot(0, good, key=b"short")


def test_links_and_unreadable_files_are_a_state_file_error_naming_the_file_alone(engine, tmp_path):
    # issue 33, item 12: a link to /proc/self/mem gave an OSError; a link to any readable file printed its first
    # bytes; every message printed the folder. A slot file is opened without following links
    good = tmp_path / "good.bin"
    _saved_slot(engine, good)
    for target in ("/proc/self/mem", "/etc/passwd", str(good)):
        link = tmp_path / "link.bin"
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        with pytest.raises(pl.StateFileError, match=r"link\.bin: is a symbolic link, not a regular file") as refused:
            engine.restore_slot(0, link)
        assert str(tmp_path) not in str(refused.value)
    passwd_like = tmp_path / "passwd.bin"
    passwd_like.write_bytes(b"root:x:0:0:root:/root:/bin/bash\n" * 10)
    with pytest.raises(pl.StateFileError) as refused:
        engine.restore_slot(0, passwd_like)
    assert "root:x" not in str(refused.value) and str(tmp_path) not in str(refused.value)
