"""State files: a Model's KV cache and its tokens on disk, with a header that says whose they are and a checksum.

llama.cpp's own session files check little (the architecture name, layer and row sizes): 20 of 24 bit-flipped
files loaded silently, and a file from another model of the same shape would too. Here llama.cpp only turns its
state into bytes (llama_state_get_data / llama_state_set_data); this module writes those bytes and reads them
back only after every check passed, so nothing unverified reaches llama.cpp.

Layout, little-endian:
    header   magic b"PL90STAT", format version (u32), sha256 of the model's GGUF header and weight samples (32 bytes),
             K type, V type (8 bytes each, NUL-padded names), n_ctx, n_seq_max, n_tokens (u32 each),
             payload size (u64)
    lora     (version 3, 4) sha256 of the LoRA adapters' fingerprints (32 zero bytes: none), n_scales (u32), and
             n_scales x float64: the scale of each adapter the cells were computed with
    tokens   n_tokens x int32: what the sequence holds, in order
    payload  llama.cpp's state bytes
    digest   (versions 2, 3) sha256 of everything above; (version 4) HMAC-SHA256 of it under a secret key (32 bytes)

Version 2 files (before LoRA adapters) are read as saved with none. Version 4 is version 3 authenticated: only a
reader holding the key takes it, and a reader given a key takes nothing else (the server's slot files).

A file is opened without following a symbolic link, must be a regular file, and is refused from its size alone
when it is larger than the largest state its reader's context can hold (StateLimits): nothing else is read
first. Messages name a file by its base name only (no folder, never the file's bytes).
"""
from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import stat
import struct
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

from ...errors import InvalidArgumentError, LlamaError, StateFileError
from ..gguf.header import open_regular_file
from .state_bounds import check_context_payload, context_state_bound

if TYPE_CHECKING:  # pragma: no cover
    from ...native import ContextHandle

MAGIC = b"PL90STAT"
FORMAT_VERSION = 3  # 2: the model identity covers samples of the weights; 3: and the LoRA adapters and scales
AUTHENTICATED_VERSION = 4  # version 3 with an HMAC-SHA256 under a key instead of the sha256
READABLE_VERSIONS = (2, 3, AUTHENTICATED_VERSION)
_HEADER = struct.Struct("<8sI32s8s8sIIIQ")
_LORA = struct.Struct("<32sI")  # (version 3) the adapters' fingerprint, the number of float64 scales after it
NO_ADAPTERS = bytes(32)  # the adapters' fingerprint of a Model without any
_DIGEST_BYTES = hashlib.sha256().digest_size
_CHUNK = 1 << 20
MIN_KEY_BYTES = 16  # a key shorter than 128 bits is guessable


@dataclass(frozen=True)
class StateLimits:
    """What the reading context can hold: the most tokens, the vocabulary, the most bytes of llama.cpp's state
    (state_bounds) and the LoRA adapters loaded. They bound the largest valid file, checked before reading."""

    max_tokens: int
    n_vocab: int
    max_payload: int
    n_adapters: int

    @property
    def max_file_bytes(self) -> int:
        return state_file_bytes(self.n_adapters, self.max_tokens, self.max_payload)


def context_limits(context: ContextHandle, max_tokens: int, n_adapters: int) -> StateLimits:
    """The limits of a state file of the whole `context` (Model.load_state's)."""
    return StateLimits(max_tokens, context.model.n_vocab, context_state_bound(context), n_adapters)


def state_file_bytes(n_scales: int, n_tokens: int, payload_bytes: int) -> int:
    """The size of a (version 3 or 4) state file of these parts."""
    return _HEADER.size + _LORA.size + 8 * n_scales + 4 * n_tokens + payload_bytes + _DIGEST_BYTES


def check_key(key: object) -> bytes | None:
    """`key` (None, or bytes of at least MIN_KEY_BYTES) as bytes."""
    if key is None:
        return None
    if not isinstance(key, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError(f"key must be bytes or None, got {type(key).__name__}", param="key")
    if len(key) < MIN_KEY_BYTES:
        raise InvalidArgumentError(f"key must be at least {MIN_KEY_BYTES} bytes, got {len(key)}", param="key")
    return bytes(key)


def file_name(path: bytes) -> str:
    """How messages name the file at `path`: its base name alone (a server's folder is nobody's business)."""
    return os.fsdecode(os.path.basename(path.rstrip(b"/")) or path)


def _digest(key: bytes | None, *parts: bytes | memoryview) -> bytes:
    """The digest a file ends with: sha256 of its `parts`, or with `key` their HMAC-SHA256 (version 4)."""
    digest = hmac.new(key, digestmod=hashlib.sha256) if key is not None else hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.digest()


@dataclass(frozen=True)
class StateIdentity:
    """What must match between the Model that saved a state and the one that loads it."""

    model_sha256: bytes  # model_fingerprint: the GGUF header and samples of the weights, cheap to compute
    type_k: str
    type_v: str
    n_ctx: int
    n_seq_max: int
    adapters_sha256: bytes = NO_ADAPTERS  # LoraAdapters.fingerprint: which LoRA adapters were loaded
    # the adapters' scales the cells were computed with; in an expected identity None takes any (a BatchEngine
    # slot runs with the scales of the file it restores)
    lora_scales: tuple[float, ...] | None = ()


SAMPLES, SAMPLE_BYTES = 256, 4096  # of the tensor data, evenly spaced: 1 MiB read, whatever the model's size


def model_fingerprint(path: str | bytes | os.PathLike[str] | os.PathLike[bytes], header_bytes: int) -> bytes:
    """sha256 of a GGUF's first `header_bytes` bytes (its header: hyperparameters, vocabulary, tensor names,
    shapes, types and offsets), its size, and 256 evenly spaced 4 KiB samples of its tensor data. The header
    alone let a file with the same header but other weights (a fine-tune written by the same converter) load
    another model's state silently; hashing all the weights would cost seconds, the samples milliseconds."""
    f, _, size = open_regular_file(path)
    digest = hashlib.sha256()
    with f:
        left = header_bytes
        while left:
            chunk = f.read(min(_CHUNK, left))
            if not chunk:
                break
            digest.update(chunk)
            left -= len(chunk)
        digest.update(struct.pack("<Q", size))
        data_bytes = max(size - header_bytes, 0)
        step = max(data_bytes // SAMPLES, SAMPLE_BYTES)
        for at in range(header_bytes, size, step):
            f.seek(at)
            digest.update(f.read(SAMPLE_BYTES))
    return digest.digest()


def write_state_file(path: bytes, identity: StateIdentity, tokens: Sequence[int], payload: memoryview,
                     key: bytes | None = None, admit: Callable[[int], None] | None = None) -> None:
    """Write a state file to `path` (bytes, as from errors.fs_path), authenticated under `key` when one is given
    (version 4). `admit`, if given, is called with the file's size before anything is written (a quota: it
    raises to refuse). The file appears whole or not at all: it is written next to `path` under a temporary
    name, then renamed over it; like any tempfile.mkstemp file it is readable by its owner only."""
    name = file_name(path)
    try:
        mode = os.stat(path, follow_symlinks=False).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:
        raise StateFileError(f"{name}: cannot write a state file there: {e.strerror}") from None
    if mode is not None and not stat.S_ISREG(mode):  # never replace a directory, FIFO, device or link
        raise StateFileError(f"{name}: exists and is not a regular file")
    scales = identity.lora_scales
    assert scales is not None, "a state file records the scales its cells were computed with"
    if admit is not None:
        admit(state_file_bytes(len(scales), len(tokens), len(payload)))
    version = FORMAT_VERSION if key is None else AUTHENTICATED_VERSION
    header = _HEADER.pack(MAGIC, version, identity.model_sha256, _type_field(identity.type_k),
                          _type_field(identity.type_v), identity.n_ctx, identity.n_seq_max, len(tokens), len(payload))
    header += _LORA.pack(identity.adapters_sha256, len(scales)) + struct.pack(f"<{len(scales)}d", *scales)
    token_bytes = struct.pack(f"<{len(tokens)}i", *tokens)
    digest = _digest(key, header, token_bytes, payload)
    directory = os.path.dirname(path) or b"."
    try:
        fd, tmp = tempfile.mkstemp(prefix=b".pl90-state-", dir=directory)
    except OSError as e:
        raise StateFileError(f"{name}: cannot write a state file there: {e.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            for part in (header, token_bytes, payload, digest):
                f.write(part)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        _remove_quietly(tmp)
        raise StateFileError(f"{name}: writing the state file failed: {e.strerror}") from None
    except BaseException:
        _remove_quietly(tmp)
        raise


def read_state_file(path: bytes, expected: StateIdentity, limits: StateLimits,
                    key: bytes | None = None) -> tuple[list[int], bytes, tuple[float, ...]]:
    """The tokens, llama.cpp payload and LoRA scales of the state file at `path`, after checking, in this
    order: a regular file (not a link), its size within `limits` (before any read), magic, format version,
    sizes against the file size (truncated or extended), the checksum (any flipped bit) or, given `key`, the
    HMAC (a file forged or saved under another key), then that it was saved by a Model like `expected` and holds
    at most `limits.max_tokens` valid ids. Every failure is a StateFileError naming the problem."""
    name = file_name(path)
    f, _, size = open_regular_file(path, StateFileError, follow_symlinks=False, name=name)
    with f:
        if size > limits.max_file_bytes:
            raise StateFileError(f"{name}: is {size} bytes, more than the largest state file of this context "
                                 f"({limits.max_file_bytes} bytes)")
        try:
            header, token_bytes, payload, stored_digest = _read_parts(f, name, size, limits)
        except OSError as e:
            raise StateFileError(f"{name}: cannot read it: {e.strerror}") from None
    version = _HEADER.unpack_from(header)[1]
    if (version == AUTHENTICATED_VERSION) != (key is not None):
        raise StateFileError(f"{name}: is not authenticated with a key, and a key is required" if key is not None
                             else f"{name}: is authenticated with a key: give it to read the file")
    if not hmac.compare_digest(_digest(key, header, token_bytes, payload), stored_digest):
        raise StateFileError(f"{name}: checksum mismatch: the file is corrupt" if key is None else
                             f"{name}: authentication failed: the file is corrupt, forged, or saved under another key")
    _, _, model_sha256, type_k, type_v, n_ctx, n_seq_max, n_tokens, _ = _HEADER.unpack_from(header)
    adapters_sha256, scales = NO_ADAPTERS, ()
    if version >= 3:
        adapters_sha256, n_scales = _LORA.unpack_from(header, _HEADER.size)
        scales = struct.unpack_from(f"<{n_scales}d", header, _HEADER.size + _LORA.size)
    saved = StateIdentity(model_sha256, _type_name(type_k), _type_name(type_v), n_ctx, n_seq_max, adapters_sha256,
                          scales)
    _check_identity(name, saved, expected)
    if n_tokens > limits.max_tokens:
        raise StateFileError(f"{name}: holds {n_tokens} tokens, more than the {limits.max_tokens} a sequence of this "
                             f"context holds")
    tokens = list(struct.unpack(f"<{n_tokens}i", token_bytes))
    if not all(0 <= t < limits.n_vocab for t in tokens):
        raise StateFileError(f"{name}: holds token ids outside this model's vocabulary [0, {limits.n_vocab})")
    return tokens, payload, scales


def _read_parts(f: BinaryIO, name: str, size: int, limits: StateLimits) -> tuple[bytes, bytes, bytes, bytes]:
    """The header (with its LoRA part), tokens, payload and digest of a file of `size` bytes, every length
    checked against the file's size before it is read."""
    header = _read_exactly(f, _HEADER.size, name, "its header")
    magic, version, *_, n_tokens, payload_bytes = _HEADER.unpack(header)
    if magic != MAGIC:
        raise StateFileError(f"{name}: not a pyllama90a state file (it does not start with {MAGIC!r})")
    if version not in READABLE_VERSIONS:
        raise StateFileError(f"{name}: state file format version {version}; this pyllama90a reads versions "
                             f"{', '.join(map(str, READABLE_VERSIONS))}")
    if version >= 3:
        lora = _read_exactly(f, _LORA.size, name, "its LoRA adapters")
        n_scales = _LORA.unpack(lora)[1]
        if 8 * n_scales > size - len(header) - len(lora):  # (the adapters themselves: _check_identity, later)
            raise StateFileError(f"{name}: the header describes {n_scales} LoRA scales, more than the file holds "
                                 f"(truncated or damaged)")
        header += lora + _read_exactly(f, 8 * n_scales, name, "its LoRA scales")
    expected_size = len(header) + 4 * n_tokens + payload_bytes + _DIGEST_BYTES
    if expected_size != size:
        raise StateFileError(f"{name}: the header describes {expected_size} bytes but the file has {size} "
                             f"(truncated or damaged)")
    return (header, _read_exactly(f, 4 * n_tokens, name, "its tokens"),
            _read_exactly(f, payload_bytes, name, "its state"), _read_exactly(f, _DIGEST_BYTES, name, "its checksum"))


def restore_state(context: ContextHandle, path: bytes, expected: StateIdentity, limits: StateLimits,
                  cached: list[int], key: bytes | None = None) -> None:
    """Give `context` the state in the file at `path` (read_state_file's checks first, and the payload's one
    length llama.cpp does not check). `cached`, the tokens in the cache, is kept true whatever happens: the
    file's tokens, or unchanged when llama.cpp refuses the payload and the previous cache is put back
    (StateFileError says so)."""
    name = file_name(path)
    tokens, payload, _ = read_state_file(path, expected, limits, key)
    check_context_payload(name, payload, context.model.metadata("general.architecture"))
    previous = context.state_bytes()  # llama.cpp may have changed the cache by the time it refuses
    try:
        context.set_state(payload)
    except LlamaError as refusal:
        try:
            context.set_state(previous)
        except LlamaError:  # pragma: no cover - never seen
            context.clear()
            cached.clear()
            raise StateFileError(f"llama.cpp refused the state in {name} and the previous cache could not be "
                                 f"restored: the cache is now empty", refusal.native_log) from None
        raise StateFileError(f"llama.cpp refused the state in {name} (saved with another flash_attn setting?); the "
                             f"previous cache is kept", refusal.native_log) from None
    cached[:] = tokens


def _check_identity(name: str, saved: StateIdentity, expected: StateIdentity) -> None:
    if saved.model_sha256 != expected.model_sha256:
        raise StateFileError(f"{name}: was saved by another model (fingerprint of the GGUF header and weights "
                             f"{saved.model_sha256.hex()[:16]}..., this model's is "
                             f"{expected.model_sha256.hex()[:16]}...)")
    for what, field in (("K cache type", "type_k"), ("V cache type", "type_v"), ("n_ctx", "n_ctx"),
                        ("n_seq_max", "n_seq_max")):
        was, want = getattr(saved, field), getattr(expected, field)
        if was != want:
            raise StateFileError(f"{name}: was saved with {what} {was}, this Model has {what} {want}")
    if saved.adapters_sha256 != expected.adapters_sha256:
        raise StateFileError(f"{name}: was saved with {_adapters(saved)} loaded, this Model has "
                             f"{_adapters(expected)} (its cells were computed with those adapters)")
    if expected.lora_scales is not None and saved.lora_scales != expected.lora_scales:
        raise StateFileError(f"{name}: was saved with LoRA scales {list(saved.lora_scales or ())}, this Model applies "
                             f"{list(expected.lora_scales)} (its cells were computed with those scales)")


def _adapters(identity: StateIdentity) -> str:
    if identity.adapters_sha256 == NO_ADAPTERS:
        return "no LoRA adapters"
    return f"LoRA adapters of fingerprint {identity.adapters_sha256.hex()[:16]}..."


def _read_exactly(f: BinaryIO, n: int, name: str, what: str) -> bytes:
    data = f.read(n)
    if len(data) != n:  # the file shrank after its size was checked
        raise StateFileError(f"{name}: truncated in {what}")
    return data


def _type_field(type_name: str) -> bytes:
    return type_name.encode("ascii").ljust(8, b"\0")


def _type_name(field: bytes) -> str:
    return field.rstrip(b"\0").decode("ascii", "replace")


def _remove_quietly(path: bytes) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
