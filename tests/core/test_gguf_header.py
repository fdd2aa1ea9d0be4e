"""Tests of pyllama90a.core.gguf.header on small GGUF files written here, and on the real SmolLM2 model."""
from __future__ import annotations

import contextlib
import random
import struct
from pathlib import Path

import pytest

from pyllama90a.core.gguf.header import ArraySummary, TensorInfo, read_header
from pyllama90a.errors import ModelFormatError

U8, U32, F32, BOOL, STRING, ARRAY, U64 = 0, 4, 6, 7, 8, 9, 10
GGML_F32 = 0


def gstr(s: str | bytes) -> bytes:
    data = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(data)) + data


def kv(key: str, vtype: int, payload: bytes) -> bytes:
    return gstr(key) + struct.pack("<I", vtype) + payload


def string_array(items: list[str]) -> bytes:
    return struct.pack("<IQ", STRING, len(items)) + b"".join(gstr(s) for s in items)


def tensor_info(name: str, dims: tuple[int, ...], offset: int, ggml_type: int = GGML_F32,
                n_dims: int | None = None) -> bytes:
    n = len(dims) if n_dims is None else n_dims
    return (gstr(name) + struct.pack("<I", n) + b"".join(struct.pack("<Q", d) for d in dims)
            + struct.pack("<IQ", ggml_type, offset))


def build(kvs: list[bytes], infos: list[bytes], data: bytes, *, magic: bytes = b"GGUF",
          version: int = 3, n_tensors: int | None = None, n_kv: int | None = None,
          alignment: int = 32) -> bytes:
    head = magic + struct.pack("<IQQ", version, len(infos) if n_tensors is None else n_tensors,
                               len(kvs) if n_kv is None else n_kv)
    head += b"".join(kvs) + b"".join(infos)
    head += b"\0" * (-len(head) % alignment)
    return head + data


def valid_kvs() -> list[bytes]:
    return [
        kv("general.architecture", STRING, gstr("llama")),
        kv("general.alignment", U32, struct.pack("<I", 32)),
        kv("test.count", U32, struct.pack("<I", 7)),
        kv("test.tokens", ARRAY, string_array(["a", "bb", "ccc"])),
        kv("test.scale", F32, struct.pack("<f", 0.5)),
        kv("test.flag", BOOL, b"\x01"),
    ]


# tensor "a": F32 (4, 2) = 32 bytes at offset 0; tensor "b": F32 (3,) = 12 bytes at offset 32
def valid_infos(b_offset: int = 32, b_dims: tuple[int, ...] = (3,), b_n_dims: int | None = None,
                b_type: int = GGML_F32) -> list[bytes]:
    return [tensor_info("a", (4, 2), 0), tensor_info("b", b_dims, b_offset, b_type, b_n_dims)]


VALID_DATA = struct.pack("<8f", *range(8)) + struct.pack("<3f", 1, 2, 3)


def write(tmp_path: Path, data: bytes, name: str = "m.gguf") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.fixture
def valid_bytes() -> bytes:
    return build(valid_kvs(), valid_infos(), VALID_DATA)


def test_valid_file_parses(tmp_path, valid_bytes):
    h = read_header(write(tmp_path, valid_bytes))
    assert h.version == 3
    assert h.architecture == "llama"
    assert h.get("test.count") == 7
    assert h.get("test.tokens") == ["a", "bb", "ccc"]
    assert h.get("test.scale") == 0.5
    assert h.get("test.flag") is True
    assert h.get("missing", "dflt") == "dflt"
    assert h.tensors == [TensorInfo("a", (4, 2), GGML_F32, 0, 32), TensorInfo("b", (3,), GGML_F32, 32, 12)]
    assert h.data_offset % 32 == 0
    assert h.data_offset == len(valid_bytes) - len(VALID_DATA)
    assert h.file_size == len(valid_bytes)


def test_version_2_and_defaults(tmp_path):
    kvs = [kv("general.architecture", STRING, gstr("llama"))]  # no general.alignment: 32
    h = read_header(write(tmp_path, build(kvs, valid_infos(), VALID_DATA, version=2)))
    assert h.version == 2 and h.data_offset % 32 == 0 and len(h.tensors) == 2


def test_long_arrays_are_summarised_and_skipped(tmp_path):
    kvs = [
        kv("big.tokens", ARRAY, string_array([f"tok{i}" * (i % 5) for i in range(5000)])),
        kv("big.ids", ARRAY, struct.pack("<IQ", U32, 5000) + struct.pack("<5000I", *range(5000))),
        kv("after", U64, struct.pack("<Q", 2**40)),
    ]
    h = read_header(write(tmp_path, build(kvs, valid_infos(), VALID_DATA)))
    assert h.get("big.tokens") == ArraySummary(STRING, 5000)
    assert h.get("big.ids") == ArraySummary(U32, 5000)
    assert len(h.get("big.ids")) == 5000
    assert h.get("after") == 2**40
    assert [t.name for t in h.tensors] == ["a", "b"]


def test_unknown_tensor_type_is_allowed_without_size(tmp_path):
    h = read_header(write(tmp_path, build(valid_kvs(), valid_infos(b_type=200), VALID_DATA)))
    assert h.tensors[1].type == 200 and h.tensors[1].nbytes is None


def test_missing_file(tmp_path):
    with pytest.raises(ModelFormatError, match=r"nope\.gguf: no such file"):
        read_header(tmp_path / "nope.gguf")


def test_directory(tmp_path):
    with pytest.raises(ModelFormatError, match="is a directory"):
        read_header(tmp_path)


def test_empty_file(tmp_path):
    with pytest.raises(ModelFormatError, match=r"not a GGUF file \(magic b''"):
        read_header(write(tmp_path, b""))


def test_random_bytes(tmp_path):
    data = random.Random(0).randbytes(4096)
    assert data[:4] != b"GGUF"
    with pytest.raises(ModelFormatError, match=r"not a GGUF file \(magic"):
        read_header(write(tmp_path, data))


def test_wrong_magic(tmp_path, valid_bytes):
    with pytest.raises(ModelFormatError, match=r"not a GGUF file \(magic b'GGML'"):
        read_header(write(tmp_path, b"GGML" + valid_bytes[4:]))


def test_bad_version(tmp_path):
    with pytest.raises(ModelFormatError, match="unsupported GGUF version 4"):
        read_header(write(tmp_path, build(valid_kvs(), valid_infos(), VALID_DATA, version=4)))


def test_big_endian_version_hint(tmp_path):
    with pytest.raises(ModelFormatError, match="big-endian"):
        read_header(write(tmp_path, build(valid_kvs(), valid_infos(), VALID_DATA, version=3 << 24)))


@pytest.mark.parametrize("marker", [b"bb", b"test.scale"])
def test_truncated_in_kv_section(tmp_path, valid_bytes, marker):
    cut = valid_bytes.index(marker) + 1  # inside a string in an array; inside a key
    with pytest.raises(ModelFormatError, match=rf"truncated \(header ends at byte \d+ of {cut}\)"):
        read_header(write(tmp_path, valid_bytes[:cut]))


def test_truncated_in_fixed_size_value(tmp_path, valid_bytes):
    cut = valid_bytes.index(b"test.count") + len("test.count") + 4 + 2  # inside the uint32 value
    with pytest.raises(ModelFormatError, match=rf"truncated \(header ends at byte {cut + 2} of {cut}\)"):
        read_header(write(tmp_path, valid_bytes[:cut]))


def test_truncated_in_tensor_data(tmp_path, valid_bytes):
    size = len(valid_bytes) - 5
    with pytest.raises(ModelFormatError,
                       match=rf"truncated: tensor b needs bytes up to {len(valid_bytes)} but the file has {size}"):
        read_header(write(tmp_path, valid_bytes[:size]))


def test_tensor_count_above_limit(tmp_path):
    data = build(valid_kvs(), valid_infos(), VALID_DATA, n_tensors=2**40)
    with pytest.raises(ModelFormatError, match=rf"tensor_count {2**40} is above the limit {1 << 20}"):
        read_header(write(tmp_path, data))


def test_absurd_counts(tmp_path):
    with pytest.raises(ModelFormatError, match="absurd count: tensor_count 1000"):
        read_header(write(tmp_path, build(valid_kvs(), valid_infos(), VALID_DATA, n_tensors=1000)))
    with pytest.raises(ModelFormatError, match="absurd count: metadata_kv_count 60000"):
        read_header(write(tmp_path, build(valid_kvs(), valid_infos(), VALID_DATA, n_kv=60000)))


def test_huge_string_length(tmp_path):
    bad_key = struct.pack("<Q", 2**50) + b"general.x" + struct.pack("<I", U8) + b"\0"
    data = build([bad_key, *valid_kvs()], valid_infos(), VALID_DATA)
    with pytest.raises(ModelFormatError, match=rf"length {2**50}, above the limit {1 << 24}"):
        read_header(write(tmp_path, data))


def test_string_past_end_of_file(tmp_path):
    data = build([kv("k", STRING, struct.pack("<Q", 1000) + b"x" * 20)], [], b"")
    with pytest.raises(ModelFormatError, match=r"truncated \(header ends at byte \d+ of \d+\): string value"):
        read_header(write(tmp_path, data))


def test_array_limits(tmp_path, valid_bytes):
    with pytest.raises(ModelFormatError, match=r"'test\.tokens' at byte \d+ has 3 elements, above the limit 2"):
        read_header(write(tmp_path, valid_bytes), max_array=2)
    data = build([kv("k", ARRAY, struct.pack("<IQ", U8, 10**6))], [], b"\0" * 100)
    with pytest.raises(ModelFormatError, match=r"truncated \(header ends at byte \d+ of \d+\): array 'k'"):
        read_header(write(tmp_path, data))


def test_too_many_dims(tmp_path):
    data = build(valid_kvs(), valid_infos(b_dims=(1,) * 9), VALID_DATA)
    with pytest.raises(ModelFormatError, match=r"tensor 'b' at byte \d+ has n_dims 9, above the limit 4"):
        read_header(write(tmp_path, data))


@pytest.mark.parametrize("dims, message", [
    ((3, 0), "dimension 0 <= 0"),
    ((3, 2**64 - 1), "dimension -1 <= 0"),
    ((2**31, 2**31, 2**31), r"elements .* above 2\*\*62"),
])
def test_bad_dims(tmp_path, dims, message):
    data = build(valid_kvs(), valid_infos(b_dims=dims), VALID_DATA)
    with pytest.raises(ModelFormatError, match=message):
        read_header(write(tmp_path, data))


def test_unaligned_offset(tmp_path):
    data = build(valid_kvs(), valid_infos(b_offset=36), VALID_DATA + b"\0" * 8)
    with pytest.raises(ModelFormatError, match="tensor 'b' has offset 36, not a multiple of the alignment 32"):
        read_header(write(tmp_path, data))


def test_row_not_multiple_of_block(tmp_path):
    data = build(valid_kvs(), valid_infos(b_dims=(48,), b_type=2), VALID_DATA)  # Q4_0 blocks of 32
    with pytest.raises(ModelFormatError, match="rows of 48 elements, not a multiple of the block size 32"):
        read_header(write(tmp_path, data))


def test_bad_alignment_and_duplicates(tmp_path):
    kvs = [kv("general.alignment", U32, struct.pack("<I", 24))]
    with pytest.raises(ModelFormatError, match=r"general\.alignment 24 is not a positive power of 2"):
        read_header(write(tmp_path, build(kvs, [], b"")))
    with pytest.raises(ModelFormatError, match=r"duplicate metadata key 'test\.count'"):
        read_header(write(tmp_path, build([*valid_kvs(), valid_kvs()[2]], valid_infos(), VALID_DATA)))
    infos = [tensor_info("a", (4, 2), 0), tensor_info("a", (3,), 32)]
    with pytest.raises(ModelFormatError, match="duplicate tensor name 'a'"):
        read_header(write(tmp_path, build(valid_kvs(), infos, VALID_DATA)))


def test_nested_array_is_rejected(tmp_path):
    data = build([kv("k", ARRAY, struct.pack("<IQ", ARRAY, 1) + struct.pack("<IQ", U8, 0))], [], b"\0" * 64)
    with pytest.raises(ModelFormatError, match="unsupported element type 9"):
        read_header(write(tmp_path, data))


def test_corrupted_bytes_raise_only_model_format_error(tmp_path, valid_bytes):
    rng = random.Random(1)
    path = tmp_path / "fuzz.gguf"
    for _ in range(2000):
        data = bytearray(valid_bytes)
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        path.write_bytes(data[:rng.randrange(len(data))] if rng.random() < 0.3 else data)
        with contextlib.suppress(ModelFormatError):
            read_header(path)


def _bytes_read() -> int:
    """Bytes this process has read through read() calls so far (Linux's /proc/self/io rchar)."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def test_real_model_header(model_path):
    """The default model's header; only the header is read, never the tensor data (counted in bytes read,
    which a change that loads the weights would multiply: 96 MB of tensor data against a 1.8 MB header)."""
    can_count = Path("/proc/self/io").is_file()
    before = _bytes_read() if can_count else 0
    h = read_header(model_path)
    if can_count:
        tensor_bytes = h.file_size - h.data_offset
        assert tensor_bytes > 16 * h.data_offset  # the measure below can tell header from data
        assert _bytes_read() - before - h.data_offset < tensor_bytes // 2
    assert h.architecture == "llama"
    assert h.get("llama.block_count") == 30
    assert h.get("llama.attention.head_count_kv") == 3
    assert isinstance(h.get("tokenizer.ggml.tokens"), ArraySummary)
    assert len(h.get("tokenizer.ggml.tokens")) == 49152
    assert 260 <= len(h.tensors) <= 290
    assert all(t.nbytes is not None for t in h.tensors)
    assert max(h.data_offset + t.offset + t.nbytes for t in h.tensors) <= h.file_size
