"""Read and check the header of a GGUF file in pure Python, before llama.cpp opens it.

A damaged or foreign file then raises `ModelFormatError` with a message naming the file,
the byte position and the offending number, instead of crashing the native loader.
Only the header is read (buffered); tensor data is never loaded. Tensors of a ggml type
unknown here are accepted without a size check, since the linked llama.cpp may be newer.
"""
from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from ...errors import LlamaError, ModelFormatError, fs_path

__all__ = ["GGML_TYPE_SIZES", "ArraySummary", "GGUFHeader", "TensorInfo", "open_regular_file", "read_header"]

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4
MAX_ELEMENTS = 2**62
ARRAY_KEEP_LIMIT = 4096  # longer arrays are skipped and summarised to keep memory low
MIN_KV_BYTES = 8 + 1 + 4 + 1  # key length, a 1-byte key, value type, a 1-byte value
MIN_TENSOR_BYTES = 8 + 4 + 8 + 4 + 8  # name length, n_dims, one dim, type, offset

# ggml type id -> (elements per block, bytes per block)
GGML_TYPE_SIZES: dict[int, tuple[int, int]] = {
    0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
    9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
    15: (256, 292), 16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18),
    21: (256, 110), 22: (256, 82), 23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4),
    27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2), 34: (256, 54), 35: (256, 66),
    39: (32, 17), 40: (64, 36), 41: (128, 18), 42: (64, 18),
}

STRING, ARRAY = 8, 9
# GGUF value type -> struct format of one scalar
_SCALAR_FORMATS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?",
                   10: "Q", 11: "q", 12: "d"}
_SCALARS = {t: struct.Struct("<" + f) for t, f in _SCALAR_FORMATS.items()}
_U32, _U64, _I64 = struct.Struct("<I"), struct.Struct("<Q"), struct.Struct("<q")


@dataclass(frozen=True)
class ArraySummary:
    """Stands in for a metadata array too long to keep (e.g. a tokenizer's token list)."""

    type: int
    length: int

    def __len__(self) -> int:
        return self.length


@dataclass(frozen=True)
class TensorInfo:
    """One tensor's header entry. `shape` is in ggml order (innermost dimension first);
    `offset` is relative to the data section; `nbytes` is None for a ggml type unknown here."""

    name: str
    shape: tuple[int, ...]
    type: int
    offset: int
    nbytes: int | None


@dataclass
class GGUFHeader:
    """The parsed header: version, metadata, tensor infos and where the data section starts."""

    version: int
    metadata: dict[str, Any]
    tensors: list[TensorInfo]
    data_offset: int
    file_size: int
    value_types: dict[str, int] = field(default_factory=dict)  # metadata key -> its GGUF value type

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)

    @property
    def architecture(self) -> str | None:
        """`general.architecture`, or None when the file does not say."""
        return self.metadata.get("general.architecture")


class _Reader:
    """Buffered reads that track the position and fail cleanly at the end of the file."""

    def __init__(self, f: BinaryIO, name: str, size: int, max_string: int, max_array: int):
        self.f, self.name, self.size, self.pos = f, name, size, 0
        self.max_string, self.max_array = max_string, max_array

    def error(self, message: str) -> ModelFormatError:
        return ModelFormatError(f"{self.name}: {message}")

    def _claim(self, n: int) -> None:
        end = self.pos + n
        if end > self.size:
            raise self.error(f"truncated (header ends at byte {end} of {self.size})")
        self.pos = end

    def read(self, n: int) -> bytes:
        self._claim(n)
        return self.f.read(n)

    def skip(self, n: int) -> None:
        self._claim(n)
        self.f.seek(n, os.SEEK_CUR)

    def u32(self) -> int:
        n: int = _U32.unpack(self.read(4))[0]
        return n

    def u64(self) -> int:
        n: int = _U64.unpack(self.read(8))[0]
        return n

    def string_length(self, what: str) -> int:
        at, n = self.pos, self.u64()
        if n > self.max_string:
            raise self.error(f"{what} at byte {at} has length {n}, above the limit {self.max_string}")
        if self.pos + n > self.size:
            raise self.error(f"truncated (header ends at byte {self.pos + n} of {self.size}): "
                             f"{what} at byte {at} has length {n}")
        return n

    def string(self, what: str = "string") -> str:
        return self.read(self.string_length(what)).decode("utf-8", errors="replace")

    def value(self, vtype: int, key: str) -> Any:
        if vtype in _SCALARS:
            return _SCALARS[vtype].unpack(self.read(_SCALARS[vtype].size))[0]
        if vtype == STRING:
            return self.string(f"string value of {key!r}")
        if vtype == ARRAY:
            return self.array(key)
        raise self.error(f"key {key!r} has unknown value type {vtype} at byte {self.pos - 4}")

    def array(self, key: str) -> list[Any] | ArraySummary:
        at, etype, count = self.pos, self.u32(), self.u64()
        if etype not in _SCALARS and etype != STRING:  # llama.cpp rejects nested arrays too
            raise self.error(f"array {key!r} at byte {at} has unsupported element type {etype}")
        if count > self.max_array:
            raise self.error(f"array {key!r} at byte {at} has {count} elements, "
                             f"above the limit {self.max_array}")
        min_size = _SCALARS[etype].size if etype in _SCALARS else 8
        if self.pos + count * min_size > self.size:
            raise self.error(f"truncated (header ends at byte {self.pos + count * min_size} of "
                             f"{self.size}): array {key!r} at byte {at} has {count} elements")
        if count > ARRAY_KEEP_LIMIT:
            if etype == STRING:  # variable length: each element's length must be read
                for _ in range(count):
                    self.skip(self.string_length(f"string in array {key!r}"))
            else:
                self.skip(count * min_size)
            return ArraySummary(etype, count)
        if etype == STRING:
            return [self.string(f"string in array {key!r}") for _ in range(count)]
        return list(struct.unpack(f"<{count}{_SCALAR_FORMATS[etype]}", self.read(count * min_size)))


_NOT_REGULAR = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


def _refuse_irregular(name: str, mode: int, error: type[LlamaError]) -> None:
    if not stat.S_ISREG(mode):
        kind = next((kind for test, kind in _NOT_REGULAR if test(mode)), "not a plain file")
        raise error(f"{name}: is {kind}, not a regular file")


def open_regular_file(path: str | bytes | os.PathLike[str] | os.PathLike[bytes],
                      error: type[LlamaError] = ModelFormatError,
                      buffering: int = 1 << 20, *, follow_symlinks: bool = True,
                      name: str | None = None) -> tuple[BinaryIO, str, int]:
    """Open `path` for reading if it is a regular file: (binary file, name, size). Anything else (missing,
    a directory, FIFO, device or socket, unreadable; a symbolic link without `follow_symlinks`) raises `error`
    at once, naming the file `name` (default: the path).

    stat() first, so a device is never opened (opening one can have effects); the open is O_NONBLOCK, so a
    FIFO swapped in after the stat cannot block the open, and fstat() of the opened descriptor refuses it.
    """
    raw = fs_path("path", path)
    name = os.fsdecode(raw) if name is None else name
    no_follow = 0 if follow_symlinks else os.O_NOFOLLOW  # (a link swapped in after the stat: ELOOP)
    try:
        _refuse_irregular(name, os.stat(raw, follow_symlinks=follow_symlinks).st_mode, error)
        fd = os.open(raw, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | no_follow)
    except FileNotFoundError:
        raise error(f"{name}: no such file") from None
    except OSError as e:
        raise error(f"{name}: cannot open: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        _refuse_irregular(name, st.st_mode, error)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=buffering), name, st.st_size
    except BaseException:
        os.close(fd)
        raise


def _check_count(r: _Reader, what: str, count: int, limit: int, min_bytes: int) -> None:
    if count > limit:
        raise r.error(f"{what} {count} is above the limit {limit}")
    if count * min_bytes > r.size:
        raise r.error(f"absurd count: {what} {count} needs at least {count * min_bytes} bytes "
                      f"but the file has {r.size}")


def _tensor_info(r: _Reader, alignment: int) -> TensorInfo:
    at = r.pos
    name = r.string("tensor name")
    n_dims = r.u32()
    if n_dims > MAX_DIMS:
        raise r.error(f"tensor {name!r} at byte {at} has n_dims {n_dims}, above the limit {MAX_DIMS}")
    shape = tuple(_I64.unpack(r.read(8))[0] for _ in range(n_dims))
    n_elements = 1
    for dim in shape:
        if dim <= 0:
            raise r.error(f"tensor {name!r} at byte {at} has a dimension {dim} <= 0 (shape {shape})")
        n_elements *= dim
    if n_elements > MAX_ELEMENTS:
        raise r.error(f"tensor {name!r} at byte {at} has {n_elements} elements (shape {shape}), "
                      f"above 2**62")
    ggml_type = r.u32()
    offset = r.u64()
    if offset % alignment:
        raise r.error(f"tensor {name!r} has offset {offset}, not a multiple of the alignment {alignment}")
    nbytes = None
    # Unknown ggml types are allowed (the linked llama.cpp may be newer); their size goes unchecked.
    if ggml_type in GGML_TYPE_SIZES:
        block, block_bytes = GGML_TYPE_SIZES[ggml_type]
        row = shape[0] if shape else 1  # llama.cpp reads n_dims 0 as a single element
        if row % block:
            raise r.error(f"tensor {name!r} has rows of {row} elements, not a multiple of "
                          f"the block size {block} of ggml type {ggml_type}")
        nbytes = n_elements // block * block_bytes
    return TensorInfo(name, shape, ggml_type, offset, nbytes)


def read_header(path: str | os.PathLike[str], *, max_string: int = 1 << 24, max_array: int = 1 << 26,
                max_kv: int = 1 << 16, max_tensors: int = 1 << 20) -> GGUFHeader:
    """Parse and check the GGUF header of `path`; raise ModelFormatError if it is unusable.

    Metadata arrays longer than 4096 elements are returned as `ArraySummary`.
    Tensors of a ggml type unknown here are accepted with `nbytes=None`.
    """
    f, name, size = open_regular_file(path)
    with f:
        magic = f.read(4)
        if size < 24 or magic != GGUF_MAGIC:
            raise ModelFormatError(f"{name}: not a GGUF file (magic {magic!r}, expected {GGUF_MAGIC!r}; "
                                   f"{size} bytes)")
        r = _Reader(f, name, size, max_string, max_array)
        r.pos = 4
        version = r.u32()
        if version not in SUPPORTED_VERSIONS:
            hint = " (a big-endian file?)" if version.to_bytes(4, "big")[0] in SUPPORTED_VERSIONS else ""
            raise r.error(f"unsupported GGUF version {version}{hint}, expected one of {SUPPORTED_VERSIONS}")
        n_tensors, n_kv = r.u64(), r.u64()
        _check_count(r, "tensor_count", n_tensors, max_tensors, MIN_TENSOR_BYTES)
        _check_count(r, "metadata_kv_count", n_kv, max_kv, MIN_KV_BYTES)

        metadata: dict[str, Any] = {}
        value_types: dict[str, int] = {}
        for _ in range(n_kv):
            at = r.pos
            key = r.string("metadata key")
            if key in metadata:
                raise r.error(f"duplicate metadata key {key!r} at byte {at}")
            value_types[key] = r.u32()
            metadata[key] = r.value(value_types[key], key)

        alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment <= 0 \
                or alignment & (alignment - 1):
            raise r.error(f"general.alignment {alignment!r} is not a positive power of 2")

        tensors: list[TensorInfo] = []
        seen: set[str] = set()
        for _ in range(n_tensors):
            info = _tensor_info(r, alignment)
            if info.name in seen:
                raise r.error(f"duplicate tensor name {info.name!r}")
            seen.add(info.name)
            tensors.append(info)

    data_offset = -(-r.pos // alignment) * alignment
    for info in tensors:
        end = data_offset + info.offset + (info.nbytes or 0)
        if end > size:
            raise ModelFormatError(f"{name}: truncated: tensor {info.name} needs bytes up to {end} "
                                   f"but the file has {size}")
    return GGUFHeader(version, metadata, tensors, data_offset, size, value_types)
