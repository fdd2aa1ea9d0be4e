"""State files: a corrupt, truncated or mismatched file raises StateFileError and the Model keeps its previous
cache; a good file continues a generation exactly."""
from __future__ import annotations

import os

import pytest

import pyllama90a as pl
from pyllama90a.core.model.state_file import FORMAT_VERSION, MAGIC
from pyllama90a.errors import StateFileError

PROMPT = "The three primary colors are"
OTHER_PROMPT = "Once upon a time, in a small village,"


def _greedy(m: pl.Model, prompt: str) -> pl.Completion:
    return m.generate(prompt, max_tokens=6, temperature=0)


def _assert_cache_kept(m: pl.Model, prompt: str, before: pl.Completion) -> None:
    """The cache still holds `prompt` and its continuation: generating it again decodes only the last prompt
    token (the rest is reused from the cache) and gives the same text."""
    again = _greedy(m, prompt)
    assert again.timings.prompt_tokens_evaluated == 1
    assert again.tokens == before.tokens


@pytest.fixture(scope="module")
def saved(model_path, tmp_path_factory):
    """A state file of PROMPT from an f16 Model with n_ctx 256, and the greedy continuation it was saved with."""
    path = tmp_path_factory.mktemp("state") / "s.state"
    with pl.Model(model_path, n_ctx=256) as m:
        first = _greedy(m, PROMPT)
        m.save_state(path)
    return path, first


@pytest.fixture
def busy_model(model_path):
    """An f16 n_ctx 256 Model (as `saved`'s) whose cache holds OTHER_PROMPT; yields it and that generation."""
    with pl.Model(model_path, n_ctx=256) as m:
        yield m, _greedy(m, OTHER_PROMPT)


def test_round_trip_continues_identically(saved, busy_model) -> None:
    path, first = saved
    m, _ = busy_model
    m.load_state(path)
    again = _greedy(m, PROMPT)
    assert again.timings.prompt_tokens_evaluated == 1  # only the last prompt token: the rest came from the file
    assert again.tokens == first.tokens


def test_header_says_what_it_is(saved) -> None:
    data = saved[0].read_bytes()
    assert data.startswith(MAGIC) and int.from_bytes(data[8:12], "little") == FORMAT_VERSION


def test_a_version_2_file_loads_as_saved_without_adapters(saved, busy_model, tmp_path) -> None:
    # version 2 (before LoRA adapters) is version 3 without the LoRA part: written by hand from a version 3 file
    import hashlib

    path, first = saved
    data = path.read_bytes()
    assert data[80:116] == bytes(36)  # (no adapters, no scales)
    body = data[:8] + (2).to_bytes(4, "little") + data[12:80] + data[116:-32]
    old = tmp_path / "v2.state"
    old.write_bytes(body + hashlib.sha256(body).digest())
    m, _ = busy_model
    m.load_state(old)
    again = _greedy(m, PROMPT)
    assert again.timings.prompt_tokens_evaluated == 1 and again.tokens == first.tokens


def test_every_flipped_byte_is_refused_and_the_cache_is_kept(saved, busy_model, tmp_path) -> None:
    path, _ = saved
    m, before = busy_model
    data = path.read_bytes()
    # 24 offsets: every header field, the token list, the payload from start to end, the checksum
    header_end = 80 + 36  # the fixed part of the header, and its LoRA part (no adapters, no scales)
    offsets = sorted({0, 5, 8, 12, 30, 44, 52, 60, 64, 68, 72, 76, 80, 100, 112, header_end, header_end + 5,
                      *(header_end + len(data) * k // 12 for k in range(1, 10)), len(data) - 20, len(data) - 1})
    offsets = [o for o in offsets if o < len(data)]
    assert len(offsets) >= 24
    for offset in offsets:
        bad = bytearray(data)
        bad[offset] ^= 0x10
        flipped = tmp_path / f"flip{offset}.state"
        flipped.write_bytes(bytes(bad))
        with pytest.raises(StateFileError):
            m.load_state(flipped)
    _assert_cache_kept(m, OTHER_PROMPT, before)


@pytest.mark.parametrize("keep", [0, 7, 79, 81, 4096, -33, -1])  # in the header, tokens, payload, checksum
def test_truncated_file_is_refused(saved, busy_model, tmp_path, keep: int) -> None:
    path, _ = saved
    m, before = busy_model
    cut = tmp_path / "cut.state"
    cut.write_bytes(path.read_bytes()[:keep])
    with pytest.raises(StateFileError, match=r"truncated|not a pyllama90a state file"):
        m.load_state(cut)
    _assert_cache_kept(m, OTHER_PROMPT, before)


def test_appended_bytes_are_refused(saved, busy_model, tmp_path) -> None:
    path, _ = saved
    m, before = busy_model
    longer = tmp_path / "longer.state"
    longer.write_bytes(path.read_bytes() + b"\0")
    with pytest.raises(StateFileError, match="the file has"):
        m.load_state(longer)
    _assert_cache_kept(m, OTHER_PROMPT, before)


@pytest.mark.parametrize("settings, mismatch", [
    ({"ctk": "q8_0"}, "K cache type f16"),
    ({"ctv": "q8_0", "flash_attn": "off"}, "V cache type f16"),
    ({"n_ctx": 512}, "n_ctx 256"),
])
def test_other_kv_type_or_n_ctx_is_named(model_path, saved, settings: dict, mismatch: str) -> None:
    path, _ = saved
    with pl.Model(model_path, **{"n_ctx": 256, **settings}) as m:
        before = _greedy(m, OTHER_PROMPT)
        with pytest.raises(StateFileError, match=f"was saved with {mismatch}"):
            m.load_state(path)
        _assert_cache_kept(m, OTHER_PROMPT, before)


def test_other_model_is_named(saved, tmp_path) -> None:
    from pyllama90a.tools.synthetic import SHAPES, write_synthetic

    tiny = write_synthetic(SHAPES["tiny"], tmp_path / "tiny.gguf", weight_type="f16")
    with pl.Model(tiny, n_ctx=256) as m:
        before = m.generate([5, 6, 7], max_tokens=4, temperature=0)
        with pytest.raises(StateFileError, match="saved by another model"):
            m.load_state(saved[0])
        again = m.generate([5, 6, 7], max_tokens=4, temperature=0)
    assert again.timings.prompt_tokens_evaluated == 1 and again.tokens == before.tokens


def test_a_state_llama_cpp_refuses_restores_the_previous_cache(model_path, tmp_path) -> None:
    """An f16 V cache is transposed without flash attention and not with it: the header matches (same model,
    types, n_ctx) but llama.cpp refuses the cells, after it may have changed the cache; the snapshot is restored."""
    path = tmp_path / "fa_on.state"
    with pl.Model(model_path, n_ctx=256, flash_attn="on") as fa_on:
        _greedy(fa_on, PROMPT)
        fa_on.save_state(path)
    with pl.Model(model_path, n_ctx=256, flash_attn="off") as m:
        before = _greedy(m, OTHER_PROMPT)
        with pytest.raises(StateFileError, match=r"refused.*previous cache is kept"):
            m.load_state(path)
        _assert_cache_kept(m, OTHER_PROMPT, before)


def test_saving_writes_whole_files_only(model_path, tmp_path, busy_model) -> None:
    m, _ = busy_model
    target = tmp_path / "s.state"
    m.save_state(target)
    m.save_state(target)  # replaces the file
    assert os.listdir(tmp_path) == ["s.state"]  # no temporary file left behind
    with pytest.raises(StateFileError, match="cannot write"):
        m.save_state(tmp_path / "no-such-dir" / "s.state")


@pytest.mark.parametrize("kind", ["directory", "fifo", "device"])
def test_state_path_must_be_a_regular_file(busy_model, tmp_path, kind: str) -> None:
    m, before = busy_model
    if kind == "directory":
        path = tmp_path
    elif kind == "fifo":
        path = tmp_path / "fifo"
        os.mkfifo(path)
    else:
        path = "/dev/null"
    with pytest.raises(StateFileError, match="not a regular file"):
        m.save_state(path)
    # a FIFO with no writer would block an ordinary open for reading forever; this returns at once
    with pytest.raises(StateFileError, match="not a regular file"):
        m.load_state(path)
    _assert_cache_kept(m, OTHER_PROMPT, before)


def test_nul_in_the_path_is_refused(busy_model, tmp_path) -> None:
    m, _ = busy_model
    with pytest.raises(pl.InvalidArgumentError, match="NUL"):
        m.save_state(f"{tmp_path}/a\0b")
    assert not (tmp_path / "a").exists()  # C would have cut the path at the NUL
    with pytest.raises(pl.InvalidArgumentError, match="NUL"):
        m.load_state(f"{tmp_path}/a\0b")


def test_same_header_other_weights_is_another_model(tmp_path) -> None:
    """Two files with byte-identical headers but different weights (here token_embd's rows in reverse order):
    before the fingerprint covered samples of the weights, the state loaded silently and generation differed."""
    import numpy as np

    from pyllama90a.core.gguf.header import read_header
    from pyllama90a.tools.synthetic import SHAPES, write_synthetic

    a = write_synthetic(SHAPES["tiny"], tmp_path / "a.gguf", weight_type="f16")
    b = tmp_path / "b.gguf"
    data = bytearray(a.read_bytes())
    header = read_header(a)
    embd = next(t for t in header.tensors if t.name == "token_embd.weight")
    assert embd.nbytes is not None
    start = header.data_offset + embd.offset
    rows = np.frombuffer(bytes(data[start:start + embd.nbytes]), dtype=np.uint8).reshape(embd.shape[1], -1)
    data[start:start + embd.nbytes] = rows[::-1].tobytes()
    b.write_bytes(bytes(data))
    assert a.read_bytes()[:header.data_offset] == b.read_bytes()[:header.data_offset]
    path = tmp_path / "a.state"
    with pl.Model(a, n_ctx=256) as m:
        m.generate([5, 6, 7], max_tokens=4, temperature=0)
        m.save_state(path)
    with pl.Model(b, n_ctx=256) as m, pytest.raises(StateFileError, match="saved by another model"):
        m.load_state(path)


KEY = b"a key of 32 bytes, for the tests"


def _resealed(data: bytes) -> bytes:
    """`data` (a version 3 file) with its checksum made again, as anyone who edits a file can."""
    import hashlib

    return data[:-32] + hashlib.sha256(data[:-32]).digest()


def test_an_architecture_name_longer_than_the_payload_is_refused_before_llama_cpp_allocates(
        saved, busy_model, tmp_path) -> None:
    # issue 33, item 10: llama-io's read_string allocates the name's length before it reads: 0xFFFFFFFF zero-filled
    # 4 GiB (about 10 s) before llama.cpp refused the file, and a smaller machine met the OOM killer
    import resource

    path, _ = saved
    m, before = busy_model
    data = path.read_bytes()
    n_tokens = int.from_bytes(data[68:72], "little")
    payload_at = 80 + 36 + 4 * n_tokens
    assert data[payload_at:payload_at + 9] == (5).to_bytes(4, "little") + b"llama"  # the architecture's name
    forged = tmp_path / "arch.state"
    forged.write_bytes(_resealed(data[:payload_at] + b"\xff\xff\xff\xff" + data[payload_at + 4:]))
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    with pytest.raises(StateFileError, match=r"arch\.state: its state names an architecture of 4294967295 bytes"):
        m.load_state(forged)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - rss_mb < 200
    _assert_cache_kept(m, OTHER_PROMPT, before)


def test_a_file_larger_than_the_context_holds_is_refused_from_its_size(saved, busy_model, tmp_path) -> None:
    # its header agrees with its size, so before the bound it was read and hashed whole
    path, _ = saved
    m, before = busy_model
    data = path.read_bytes()
    n_tokens = int.from_bytes(data[68:72], "little")
    size = 3 << 29
    header_end = 80 + 36 + 4 * n_tokens
    big = tmp_path / "big.state"
    with open(big, "wb") as f:
        f.write(data[:72] + (size - header_end - 32).to_bytes(8, "little") + data[80:header_end])
        f.truncate(size)  # sparse
    with pytest.raises(StateFileError, match=r"big.state: is 1610612736 bytes, more than the largest state file of "
                                             r"this context \(\d+ bytes\)"):
        m.load_state(big)
    _assert_cache_kept(m, OTHER_PROMPT, before)


def test_links_are_refused_and_messages_name_the_file_alone(saved, busy_model, tmp_path) -> None:
    # issue 33, item 12: a link to /proc/self/mem was an OSError, and messages held the folder and the first bytes
    # of whatever file a link pointed at
    path, _ = saved
    m, before = busy_model
    for target in ("/proc/self/mem", "/etc/passwd", str(path)):
        link = tmp_path / "link.state"
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        with pytest.raises(StateFileError, match=r"^link\.state: is a symbolic link, not a regular file$"):
            m.load_state(link)
    other = tmp_path / "other.state"
    other.write_bytes(b"root:x:0:0:root:/root:/bin/bash\n" * 10)
    for name in ("other.state", "missing.state"):
        with pytest.raises(StateFileError) as refused:
            m.load_state(tmp_path / name)
        assert "root:x" not in str(refused.value) and str(tmp_path) not in str(refused.value)
        assert str(refused.value).startswith(f"{name}: ")
    _assert_cache_kept(m, OTHER_PROMPT, before)


def test_a_key_authenticates_the_file(model_path, saved, busy_model, tmp_path) -> None:
    # Model's own files take a key too (optional): a file saved with one loads only with it, and a key refuses
    # every file without its MAC (a resealed edit included)
    m, first = busy_model
    keyed = tmp_path / "keyed.state"
    m.save_state(keyed, key=KEY)
    assert int.from_bytes(keyed.read_bytes()[8:12], "little") == 4
    with pytest.raises(StateFileError, match=r"keyed\.state: is authenticated with a key: give it"):
        m.load_state(keyed)
    with pytest.raises(StateFileError, match=r"keyed\.state: authentication failed"):
        m.load_state(keyed, key=KEY[::-1])
    with pytest.raises(StateFileError, match=r"s\.state: is not authenticated with a key"):
        m.load_state(saved[0], key=KEY)
    with pl.Model(model_path, n_ctx=256) as other:
        other.load_state(keyed, key=KEY)
        again = _greedy(other, OTHER_PROMPT)
        assert again.timings.prompt_tokens_evaluated == 1 and again.tokens == first.tokens
    with pytest.raises(pl.InvalidArgumentError, match="key must be at least 16 bytes"):
        m.save_state(keyed, key=b"short")
    with pytest.raises(pl.InvalidArgumentError, match="key must be bytes"):
        m.load_state(keyed, key="a str key of more than 16 characters")


def test_another_architecture_name_is_refused_without_quoting_it(saved, busy_model, tmp_path) -> None:
    # llama.cpp would refuse it too, quoting the file's bytes back in its message ("wrong model arch: '...'")
    path, _ = saved
    m, before = busy_model
    data = path.read_bytes()
    payload_at = 80 + 36 + 4 * int.from_bytes(data[68:72], "little")
    forged = tmp_path / "arch.state"
    forged.write_bytes(_resealed(data[:payload_at + 4] + b"root:" + data[payload_at + 9:]))
    with pytest.raises(StateFileError, match=r"arch\.state: its state is not of this model's architecture \(llama\)$"):
        m.load_state(forged)
    _assert_cache_kept(m, OTHER_PROMPT, before)
