"""State and slot file cases (the "state" target): a real file saved by the default model, mutated, then loaded.

A case is `{"target": "state", "base": kind, "mutations": [...]}`, kind one of BASES:

    model-state   Model.save_state of a 256-cell context, loaded back by Model.load_state
    slot          BatchEngine.save_slot of one slot of two, restored into the other slot
    slot-keyed    the same with a key (the server's slot files): the mutants are sealed with that key, as by
                  someone who holds it, so that they reach llama.cpp

Each op edits the file in place; the file is then sealed (its checksum, or the key's HMAC, made again over the
edited bytes) unless an op says otherwise, so that most mutants pass the file's own checks and reach the
payload's parser in llama.cpp:

    {"op": "state_u32", "field": F, "value": v}     a named field (FIELDS) of the header or the payload
    {"op": "state_u64", "field": F, "value": v}     (k_row, payload_bytes)
    {"op": "state_word", "at": x, "value": v}       the u32 at fraction x of the payload (4-byte aligned)
    {"op": "state_flip", "at": x, "xor": b}         a byte at fraction x of the payload
    {"op": "state_cut", "at": x, "fix": bool}       the payload cut at fraction x (fix: the header's size follows)
    {"op": "state_grow", "bytes": n, "fix": bool}   n bytes appended to the payload
    {"op": "state_token", "at": x, "value": v}      a token id
    {"op": "state_seal", "how": H}                  "none" (the digest left as it was), "sha256", "other-key"
    {"op": "state_path", "kind": K}                 the file replaced by a link, FIFO, folder, sparse huge file...

After the load, the Model (or the engine) must still generate: a refused file must leave it usable.
"""
from __future__ import annotations

import functools
import hashlib
import hmac
import os
import random
import shutil
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .runner import Stage

BASES = ("model-state", "slot", "slot-keyed")
KEY = b"the fuzz target's slot secret, 32b"
PROMPT = "The capital of France is"
_HEADER_FIELDS = {"version": 8, "n_ctx": 60, "n_seq_max": 64, "n_tokens": 68, "n_scales": 112}
_PAYLOAD_FIELDS = ("arch_len", "magic", "seq_id", "n_stream", "cell_count", "pos", "n_seq_id", "seq", "v_trans",
                   "n_layer", "k_type")
FIELDS = (*_HEADER_FIELDS, *_PAYLOAD_FIELDS)
U32_VALUES = [0, 1, 2, 3, 255, 256, 257, 511, 512, 65536, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFE, 0xFFFFFFFF]
U64_VALUES = [0, 1, 2**31, 2**32, 2**63, 2**64 - 1]
TOKEN_VALUES = [-1, -2**31, 49152, 2**31 - 1, 0, 1]
PATH_KINDS = ("link-proc-mem", "link-passwd", "link-good", "link-dangling", "fifo", "dir", "sparse-huge", "empty")
_HEADER_END = 80 + 36  # a version 3 header without LoRA adapters


def generate_state_case(seed: int, index: int) -> dict:
    rng = random.Random(f"state/{seed}/{index}")
    mutations = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        mutations.append(_mutation(rng))
    return {"target": "state", "base": BASES[index % len(BASES)], "mutations": mutations}


def _mutation(rng: random.Random) -> dict:
    kind = rng.choices(["u32", "u64", "word", "flip", "cut", "grow", "token", "seal", "path"],
                       [30, 6, 14, 14, 8, 5, 8, 5, 4])[0]
    op: dict[str, Any]
    if kind == "u32":
        field = rng.choice(FIELDS)
        op = {"op": "state_u32", "field": field, "value": rng.choice(U32_VALUES)}
        kind = f"u32:{field}"
    elif kind == "u64":
        field = rng.choice(["k_row", "payload_bytes"])
        op = {"op": "state_u64", "field": field, "value": rng.choice(U64_VALUES)}
        kind = f"u64:{field}"
    elif kind == "word":
        op = {"op": "state_word", "at": rng.random(), "value": rng.choice(U32_VALUES)}
    elif kind == "flip":
        op = {"op": "state_flip", "at": rng.random(), "xor": rng.choice([1, 0x10, 0x80, 0xFF])}
    elif kind == "cut":
        op = {"op": "state_cut", "at": rng.random(), "fix": rng.random() < 0.7}
    elif kind == "grow":
        op = {"op": "state_grow", "bytes": rng.choice([1, 4, 4096, 1 << 20]), "fix": rng.random() < 0.7}
    elif kind == "token":
        op = {"op": "state_token", "at": rng.random(), "value": rng.choice(TOKEN_VALUES)}
    elif kind == "seal":
        op = {"op": "state_seal", "how": rng.choice(["none", "sha256", "other-key"])}
    else:
        op = {"op": "state_path", "kind": rng.choice(PATH_KINDS)}
        kind = f"path:{op['kind']}"
    return {"cls": f"state:{kind}", "ops": [op]}


# -- in the child -------------------------------------------------------------------------------------

class _File:
    """A state file's bytes, split where the edits need it: header (with its LoRA part), tokens, payload."""

    def __init__(self, data: bytes, n_layer: int, sequence: bool) -> None:
        n_tokens = struct.unpack_from("<I", data, 68)[0]
        self.header = bytearray(data[:_HEADER_END])
        self.tokens = bytearray(data[_HEADER_END:_HEADER_END + 4 * n_tokens])
        self.payload = bytearray(data[_HEADER_END + 4 * n_tokens:-32])
        self.digest = data[-32:]
        self.fields = _payload_fields(bytes(self.payload), n_layer, sequence)

    def set_field(self, field: str, value: int, fmt: str) -> None:
        if field in _HEADER_FIELDS:
            struct.pack_into("<" + fmt, self.header, _HEADER_FIELDS[field], value % (1 << 8 * struct.calcsize(fmt)))
        elif field == "payload_bytes":
            struct.pack_into("<Q", self.header, 72, value)
        elif field in self.fields:
            at = self.fields[field]
            if at + struct.calcsize(fmt) <= len(self.payload):
                struct.pack_into("<" + fmt, self.payload, at, value % (1 << 8 * struct.calcsize(fmt)))

    def fix_size(self) -> None:
        struct.pack_into("<Q", self.header, 72, len(self.payload))

    def body(self) -> bytes:
        return bytes(self.header + self.tokens + self.payload)


def _payload_fields(payload: bytes, n_layer: int, sequence: bool) -> dict[str, int]:
    """Where the named fields of llama.cpp's state are in `payload` (state_bounds.py gives the layout)."""
    fields: dict[str, int] = {}
    if sequence:
        fields.update(magic=0, seq_id=4, n_stream=8)
        at = 12
        while at + 4 <= len(payload) and struct.unpack_from("<I", payload, at)[0] == 0:
            at += 4  # the streams of other sequences: a cell count of 0 each
    else:
        arch_len = struct.unpack_from("<I", payload, 0)[0]
        fields.update(arch_len=0, n_stream=4 + arch_len)
        at = 8 + arch_len
    fields["cell_count"] = at
    cells = at + 4
    for v_trans in (0, 1):  # the cells end where v_trans and n_layer start
        end = payload.find(struct.pack("<II", v_trans, n_layer), cells)
        if end >= 0:
            n_cells = struct.unpack_from("<I", payload, at)[0] or 1
            fields.update(pos=cells, n_seq_id=cells + 4, seq=cells + (end - cells) // n_cells - 4, v_trans=end,
                          n_layer=end + 4, k_type=end + 8, k_row=end + 12)
            break
    return fields


def _edit(file: _File, op: dict, key: bytes | None) -> bytes | None:
    """Apply `op`; the digest to write when the op decides it (state_seal), else None."""
    kind = op["op"]
    if kind == "state_u32":
        file.set_field(op["field"], op["value"], "I")
    elif kind == "state_u64":
        file.set_field(op["field"], op["value"], "Q")
    elif kind == "state_word" and len(file.payload) >= 4:
        at = int(op["at"] * (len(file.payload) - 4)) & ~3
        struct.pack_into("<I", file.payload, at, op["value"])
    elif kind == "state_flip" and file.payload:
        file.payload[int(op["at"] * (len(file.payload) - 1))] ^= op["xor"]
    elif kind == "state_cut":
        del file.payload[int(op["at"] * len(file.payload)):]
        if op["fix"]:
            file.fix_size()
    elif kind == "state_grow":
        file.payload += random.Random(op["bytes"]).randbytes(op["bytes"])
        if op["fix"]:
            file.fix_size()
    elif kind == "state_token" and file.tokens:
        struct.pack_into("<i", file.tokens, int(op["at"] * (len(file.tokens) // 4 - 1)) * 4, op["value"])
    elif kind == "state_seal":
        how = op["how"]
        if how == "none":
            return file.digest
        digest_key = None if how == "sha256" else b"another key than the reader's"
        if digest_key is None:
            struct.pack_into("<I", file.header, 8, 3)
        return _seal(file.body(), digest_key)
    return None


def _seal(body: bytes, key: bytes | None) -> bytes:
    return hmac.new(key, body, hashlib.sha256).digest() if key is not None else hashlib.sha256(body).digest()


def _replace_path(kind: str, path: Path, good: Path) -> None:
    path.unlink(missing_ok=True)
    if kind == "link-proc-mem":
        path.symlink_to("/proc/self/mem")
    elif kind == "link-passwd":
        path.symlink_to("/etc/passwd")
    elif kind == "link-good":
        path.symlink_to(good)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "link-dangling":
        path.symlink_to(path.with_name("nothing-here"))
    else:  # sparse-huge: 64 GiB that take no disk, whose header agrees with the size
        data = good.read_bytes()
        n_tokens = struct.unpack_from("<I", data, 68)[0]
        size = 64 << 30
        head = _HEADER_END + 4 * n_tokens
        with open(path, "wb") as f:
            f.write(data[:72] + struct.pack("<Q", size - head - 32) + data[80:head])
            f.truncate(size)


def _mutate(path: Path, spec: dict, key: bytes | None, n_layer: int, sequence: bool) -> None:
    good = path.with_name("good-" + path.name)
    os.replace(path, good)
    file = _File(good.read_bytes(), n_layer, sequence)
    digest = None
    replace = None
    for m in spec["mutations"]:
        for op in m["ops"]:
            if op["op"] == "state_path":
                replace = op["kind"]
            else:
                digest = _edit(file, op, key) or digest
    body = file.body()
    path.write_bytes(body + (digest if digest is not None else _seal(body, key)))
    if replace is not None:
        _replace_path(replace, path, good)


def _run_state_case(spec: dict, work: Path, stage: Stage) -> None:
    """The case in a folder of its own (a case may leave a FIFO or a folder where its file was), removed after."""
    work.parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=work.name + "-", dir=work.parent))
    try:
        _run_in(spec, folder / "state.bin", stage)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run_in(spec: dict, path: Path, stage: Stage) -> None:
    import pyllama90a as pl
    from pyllama90a.core.gguf.default_model import default_model

    from .model_case import _show_native_log

    stage("build")
    model_path = default_model()
    _show_native_log()
    first_error: pl.LlamaError | None = None
    if spec["base"] == "model-state":
        with pl.Model(model_path, n_ctx=256, n_threads=1) as model:
            _build(lambda: model.generate(PROMPT, max_tokens=4, temperature=0))
            _build(lambda: model.save_state(path))
            _mutate(path, spec, None, _n_layer(model), sequence=False)
            stage("load_state")
            try:
                model.load_state(path)
            except pl.LlamaError as e:
                first_error = e
            stage("generate after load_state")
            model.generate("Hello", max_tokens=2, temperature=0)
    else:
        key = KEY if spec["base"] == "slot-keyed" else None
        with pl.BatchEngine(model_path, parallel=2, n_ctx=512, n_threads=1, ctk="q8_0", ctv="q8_0") as engine:
            _build(lambda: list(engine.stream(PROMPT, max_tokens=4, temperature=0)))
            slot = next(i for i, (_, n) in enumerate(engine.slot_usage()) if n)
            _build(lambda: engine.save_slot(slot, path, key=key))
            _mutate(path, spec, key, _n_layer(engine.model), sequence=True)
            stage("restore_slot")
            try:
                engine.restore_slot(1 - slot, path, key=key)
            except pl.LlamaError as e:
                first_error = e
            stage("generate after restore_slot")
            list(engine.stream(PROMPT, max_tokens=2, temperature=0))
            list(engine.stream("Hello there", max_tokens=2, temperature=0))
    if first_error is not None:
        raise first_error


def _build(step: Callable[[], object | None]) -> None:
    """A step that makes the good file: any error there is the harness's, never a clean outcome."""
    from pyllama90a.errors import LlamaError

    try:
        step()
    except LlamaError as e:
        raise RuntimeError(f"the good file could not be made: {e}") from e


def _n_layer(model: Any) -> int:
    arch = model.metadata("general.architecture")
    return int(model.metadata(f"{arch}.block_count"))


def state_job(spec: dict, work: Path) -> Callable[[Stage], None]:  # a runner job function (picklable)
    return functools.partial(_run_state_case, spec, work)
