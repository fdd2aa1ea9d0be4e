"""A GGUF file as editable data: typed metadata, tensor infos, and a reference to the tensor data.

The fuzzer needs to write what a well-behaved writer refuses (duplicate keys, a value whose type does
not match its key, counts that disagree with the entries, unaligned offsets), so the header is parsed
and written here, byte for byte as the GGUF format lays it out. Unchanged metadata entries keep their
original bytes, which makes rewriting a 49,152-token vocabulary cheap. Tensor data is never loaded:
a written file copies it from the base file.
"""
from __future__ import annotations

import mmap
import os
import struct
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32

# GGUF value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
TYPE_NAMES = {U8: "u8", I8: "i8", U16: "u16", I16: "i16", U32: "u32", I32: "i32", F32: "f32", BOOL: "bool",
              STRING: "str", ARRAY: "array", U64: "u64", I64: "i64", F64: "f64"}
TYPE_IDS = {name: vtype for vtype, name in TYPE_NAMES.items()}
SCALAR_FORMATS = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "B",
                  U64: "Q", I64: "q", F64: "d"}
INT_TYPES = (U8, I8, U16, I16, U32, I32, U64, I64)
FLOAT_TYPES = (F32, F64)


@dataclass
class Value:
    """A typed GGUF value: a number, bytes for a STRING, or a list of `subtype` elements for an ARRAY.
    A BOOL is stored as its byte (0/1, or any other byte a mutation puts there)."""

    vtype: int
    value: Any
    subtype: int | None = None


@dataclass
class Entry:
    """One metadata key/value; `raw` holds the original bytes of the value until it is changed."""

    key: str
    value: Value | None
    raw: bytes | None = None

    def decoded(self) -> Value:
        if self.value is None:
            assert self.raw is not None
            self.value, _ = _parse_value(memoryview(self.raw), 0)
        return self.value


@dataclass
class Tensor:
    name: str
    dims: list[int]  # ggml order, innermost first
    ggml_type: int
    offset: int  # relative to the data section


@dataclass
class GGUFFile:
    """Everything but the tensor bytes, which are `data_size` bytes at `data_offset` of `data_path`."""

    version: int
    entries: list[Entry]
    tensors: list[Tensor]
    data_path: Path
    data_offset: int
    data_size: int
    alignment: int = DEFAULT_ALIGNMENT  # the padding written before the data section
    n_tensors: int | None = None  # a count to write instead of len(tensors)
    n_kv: int | None = None  # a count to write instead of len(entries)
    # the data section tensor by tensor, each aligned: (offset in the base's data to copy, or None for `fill`
    # bytes; size; fill byte). None: the base's data section as it is. Set by tensor_types.retype.
    layout: list[tuple[int | None, int, int]] | None = None

    def copy(self) -> GGUFFile:
        """A copy whose lists can be edited; entries and tensors are replaced, never changed in place."""
        return replace(self, entries=list(self.entries), tensors=list(self.tensors),
                       layout=None if self.layout is None else list(self.layout))

    def index(self, key: str) -> int | None:
        return next((i for i, e in enumerate(self.entries) if e.key == key), None)

    def get(self, key: str) -> Value | None:
        i = self.index(key)
        return None if i is None else self.entries[i].decoded()

    def require(self, key: str) -> Value:
        """The value of a key the caller knows is there (a KeyError if it is not)."""
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def set(self, key: str, value: Value) -> None:
        """Replace the value of `key` where it stands, or append the key."""
        i = self.index(key)
        if i is None:
            self.entries.append(Entry(key, value))
        else:
            self.entries[i] = Entry(key, value)

    def delete(self, key: str) -> None:
        self.entries = [e for e in self.entries if e.key != key]

    def tensor_index(self, name: str) -> int | None:
        return next((i for i, t in enumerate(self.tensors) if t.name == name), None)

    def header_bytes(self) -> bytes:
        out = [MAGIC, struct.pack("<IQQ", self.version,
                                  len(self.tensors) if self.n_tensors is None else self.n_tensors,
                                  len(self.entries) if self.n_kv is None else self.n_kv)]
        for e in self.entries:
            out.append(_string(e.key.encode("utf-8", "surrogateescape")))
            out.append(e.raw if e.raw is not None else _value(e.decoded()))
        for t in self.tensors:
            out.append(_string(t.name.encode("utf-8", "surrogateescape")))
            out.append(struct.pack(f"<I{len(t.dims)}qIQ", len(t.dims), *t.dims, t.ggml_type, t.offset))
        header = b"".join(out)
        return header + b"\0" * (-len(header) % self.alignment)

    def write(self, path: str | os.PathLike[str], header: bytes | None = None) -> int:
        """Write the file (with `header` instead of header_bytes() if given); returns the header's length."""
        header = self.header_bytes() if header is None else header
        with open(path, "wb") as dst, open(self.data_path, "rb") as src:
            dst.write(header)
            dst.flush()
            if self.layout is None:
                _copy(src.fileno(), dst.fileno(), self.data_offset, self.data_size)
            for at, nbytes, fill in self.layout or ():
                if at is not None:
                    _copy(src.fileno(), dst.fileno(), self.data_offset + at, nbytes)
                else:
                    block = bytes([fill]) * (1 << 20)
                    for start in range(0, nbytes, len(block)):
                        dst.write(block[:nbytes - start])
                dst.write(b"\0" * (-nbytes % self.alignment))
                dst.flush()
        return len(header)


def _copy(src: int, dst: int, at: int, left: int) -> None:
    """`left` bytes of `src` from `at` appended to `dst`, kernel-side: the data is never read into Python."""
    while left:
        n = os.copy_file_range(src, dst, left, at)
        if n == 0:
            break
        left -= n
        at += n


def _string(b: bytes) -> bytes:
    return struct.pack("<Q", len(b)) + b


def _value(v: Value) -> bytes:
    head = struct.pack("<I", v.vtype)
    if v.vtype == ARRAY:
        assert v.subtype is not None
        return head + struct.pack("<IQ", v.subtype, len(v.value)) + _elements(v.subtype, v.value)
    return head + _elements(v.vtype, [v.value])


def _elements(vtype: int, values: list[Any]) -> bytes:
    if vtype == STRING:
        return b"".join(_string(s) for s in values)
    if vtype == ARRAY:
        raise ValueError("nested arrays are not written")
    return struct.pack(f"<{len(values)}{SCALAR_FORMATS[vtype]}", *values)


def _parse_value(buf: memoryview, pos: int, vtype: int | None = None) -> tuple[Value, int]:
    """The value at `pos` (preceded by its type unless `vtype` is given) and the position after it."""
    if vtype is None:
        (vtype,), pos = struct.unpack_from("<I", buf, pos), pos + 4
    if vtype == ARRAY:
        subtype, count = struct.unpack_from("<IQ", buf, pos)
        items, pos = _parse_elements(buf, pos + 12, subtype, count)
        return Value(ARRAY, items, subtype), pos
    items, pos = _parse_elements(buf, pos, vtype, 1)
    return Value(vtype, items[0]), pos


def _parse_elements(buf: memoryview, pos: int, vtype: int, count: int) -> tuple[list[Any], int]:
    if vtype == STRING:
        items = []
        for _ in range(count):
            (n,) = struct.unpack_from("<Q", buf, pos)
            items.append(bytes(buf[pos + 8:pos + 8 + n]))
            pos += 8 + n
        return items, pos
    fmt = f"<{count}{SCALAR_FORMATS[vtype]}"
    return list(struct.unpack_from(fmt, buf, pos)), pos + struct.calcsize(fmt)


def read_gguf(path: str | os.PathLike[str]) -> GGUFFile:
    """Parse a well-formed GGUF file (a fuzzing base: checked by gguf_header.read_header first)."""
    path = Path(path)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
        buf = memoryview(mm)
        try:
            if bytes(buf[:4]) != MAGIC:
                raise ValueError(f"{path}: not a GGUF file")
            version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
            pos = 24
            entries = []
            for _ in range(n_kv):
                (n,) = struct.unpack_from("<Q", buf, pos)
                key = bytes(buf[pos + 8:pos + 8 + n]).decode("utf-8")
                start = pos = pos + 8 + n
                _, pos = _parse_value(buf, pos)
                entries.append(Entry(key, None, bytes(buf[start:pos])))
            tensors = []
            for _ in range(n_tensors):
                (n,) = struct.unpack_from("<Q", buf, pos)
                name = bytes(buf[pos + 8:pos + 8 + n]).decode("utf-8")
                pos += 8 + n
                (n_dims,) = struct.unpack_from("<I", buf, pos)
                dims = list(struct.unpack_from(f"<{n_dims}q", buf, pos + 4))
                pos += 4 + 8 * n_dims
                ggml_type, offset = struct.unpack_from("<IQ", buf, pos)
                pos += 12
                tensors.append(Tensor(name, dims, ggml_type, offset))
            size = len(buf)
        finally:
            buf.release()
    gguf = GGUFFile(version, entries, tensors, path, 0, 0)
    alignment = gguf.get("general.alignment")
    gguf.alignment = alignment.value if alignment is not None else DEFAULT_ALIGNMENT
    gguf.data_offset = -(-pos // gguf.alignment) * gguf.alignment
    gguf.data_size = size - gguf.data_offset
    return gguf


__all__ = [
    "ARRAY",
    "BOOL",
    "F32",
    "F64",
    "FLOAT_TYPES",
    "I8",
    "I16",
    "I32",
    "I64",
    "INT_TYPES",
    "SCALAR_FORMATS",
    "STRING",
    "TYPE_IDS",
    "TYPE_NAMES",
    "U8",
    "U16",
    "U32",
    "U64",
    "Entry",
    "GGUFFile",
    "Tensor",
    "Value",
    "read_gguf",
]
