"""Mutations of GGUF files as JSON specs (gguf_generator.py makes them from a seed), applied to a base to write a file.

A case is `{"base": name, "mutations": [m, ...], "model_args": {...}}` (model_args optional: Model keyword
arguments such as a quantized KV cache); a mutation is `{"cls": class, "ops": [op, ...]}`, the unit
that shrinking removes. Ops are plain JSON so that a reproducer can be read, edited and replayed:

    {"op": "set", "key": k, "value": V}            set (or add) a key; V = {"type": "u32", "value": 0}
    {"op": "delete", "key": k}
    {"op": "set_item", "key": k, "index": i, "value": x}    one array element
    {"op": "copy_item", "key": k, "src": i, "dst": j}       array[j] = array[i] (duplicates)
    {"op": "resize", "key": k, "length": n}        cut an array, or extend it with new distinct elements
    {"op": "tensor", "name": n, "field": "dims" | "type" | "offset" | "name", "value": x}
    {"op": "drop_tensor", "name": n}
    {"op": "retype", "name": n, "type": t, "fill": byte}   new type, new data of its size (tensor_types.py)
    {"op": "header", "field": "version" | "n_tensors" | "n_kv", "value": n}
    {"op": "flip", "at": byte, "xor": mask}        on the written header
    {"op": "truncate", "of": "header" | "file", "fraction": f}

Strings are JSON text when they are valid UTF-8, else {"hex": ...}; a long one is {"repeat": s, "times": n}.
Floats may be NaN / Infinity (Python's json reads and writes them).
"""
from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from .gguf_file import ARRAY, BOOL, FLOAT_TYPES, INT_TYPES, STRING, TYPE_IDS, TYPE_NAMES, GGUFFile, Value
from .tensor_types import retype

# -- JSON encoding of values -----------------------------------------------------------------------

def encode_string(b: bytes) -> Any:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return {"hex": b.hex()}


def decode_string(j: Any) -> bytes:
    if isinstance(j, str):
        return j.encode("utf-8", "surrogatepass")
    if "hex" in j:
        return bytes.fromhex(j["hex"])
    return j["repeat"].encode("utf-8") * j["times"]


def encode_value(v: Value) -> dict:
    if v.vtype == ARRAY:
        assert v.subtype is not None  # every ARRAY value carries its element type
        items = [encode_string(x) for x in v.value] if v.subtype == STRING else list(v.value)
        return {"type": "array", "subtype": TYPE_NAMES.get(v.subtype, v.subtype), "value": items}
    return {"type": TYPE_NAMES.get(v.vtype, v.vtype), "value": encode_string(v.value) if v.vtype == STRING else v.value}


def _type_id(name: Any) -> int:
    return TYPE_IDS[name] if isinstance(name, str) else int(name)


def decode_item(vtype: int, j: Any) -> Any:
    return decode_string(j) if vtype == STRING else j


def decode_value(j: dict) -> Value:
    vtype = _type_id(j["type"])
    if vtype == ARRAY:
        subtype = _type_id(j["subtype"])
        return Value(ARRAY, [decode_item(subtype, x) for x in j["value"]], subtype)
    return Value(vtype, decode_item(vtype, j["value"]))


def typed(vtype: int, value: Any, subtype: int | None = None) -> dict:
    if vtype == ARRAY:
        assert subtype is not None  # an array spec names its element type
        return {"type": "array", "subtype": TYPE_NAMES[subtype], "value": value}
    return {"type": TYPE_NAMES[vtype], "value": value}


# -- applying --------------------------------------------------------------------------------------

def apply_ops(base: GGUFFile, mutations: list[dict]) -> tuple[GGUFFile, list[dict]]:
    """A mutated copy of `base`, and the ops that act on the written bytes (flip, truncate).
    An op on a key or tensor that is not there (removed by an earlier op) does nothing."""
    f = base.copy()
    post: list[dict] = []
    for mutation in mutations:
        for op in mutation["ops"]:
            if op["op"] in ("flip", "truncate"):
                post.append(op)
            else:
                _apply(f, op)
    return f, post


def _apply(f: GGUFFile, op: dict) -> None:
    kind = op["op"]
    if kind == "set":
        f.set(op["key"], decode_value(op["value"]))
    elif kind == "delete":
        f.delete(op["key"])
    elif kind in ("set_item", "copy_item", "resize"):
        old = f.get(op["key"])
        if old is None or old.vtype != ARRAY:
            return
        subtype = old.subtype
        assert subtype is not None  # every ARRAY value carries its element type
        items = list(old.value)
        if kind == "set_item":
            if op["index"] < len(items):
                items[op["index"]] = decode_item(subtype, op["value"])
        elif kind == "copy_item":
            if max(op["src"], op["dst"]) < len(items):
                items[op["dst"]] = items[op["src"]]
        else:
            items = items[:op["length"]] + [_filler(subtype, i) for i in range(len(items), op["length"])]
        f.set(op["key"], Value(ARRAY, items, subtype))
    elif kind in ("tensor", "drop_tensor"):
        i = f.tensor_index(op["name"])
        if i is None:
            return
        if kind == "drop_tensor":
            del f.tensors[i]
            return
        field = {"dims": "dims", "type": "ggml_type", "offset": "offset", "name": "name"}[op["field"]]
        value = op["value"]
        if field == "name":
            value = decode_string(value).decode("utf-8", "surrogateescape")
        f.tensors[i] = replace(f.tensors[i], **{field: value})
    elif kind == "retype":
        retype(f, op["name"], op["type"], op["fill"])
    elif kind == "header":
        setattr(f, op["field"], op["value"])
    else:
        raise ValueError(f"unknown op {kind!r}")


def _filler(vtype: int, i: int) -> Any:
    """A new, distinct array element for index i."""
    if vtype == STRING:
        return f"<fuzz-{i}>".encode()
    if vtype in FLOAT_TYPES:
        return -float(i)
    return 1 if vtype in INT_TYPES or vtype == BOOL else 0


def write_case(base: GGUFFile, mutations: list[dict], path: str | os.PathLike[str]) -> None:
    f, post = apply_ops(base, mutations)
    header = bytearray(f.header_bytes())
    for op in post:
        if op["op"] == "flip" and header:
            header[op["at"] % len(header)] ^= op["xor"]
    header_len = f.write(path, bytes(header))
    for op in post:
        if op["op"] == "truncate":
            size = header_len if op["of"] == "header" else os.path.getsize(path)
            os.truncate(path, min(int(size * op["fraction"]), os.path.getsize(path)))


# -- describing --------------------------------------------------------------------------------------

def _short(j: Any, limit: int = 60) -> str:
    if isinstance(j, dict) and "repeat" in j:
        return f"{j['repeat']!r} * {j['times']}"
    if isinstance(j, dict) and "hex" in j:
        return f"bytes {j['hex']}"
    text = repr(j)
    if len(text) <= limit:
        return text
    return text[:limit] + (f"... ({len(j)} items)" if isinstance(j, list) else "...")


def describe_op(op: dict) -> str:
    kind = op["op"]
    if kind == "set":
        v = op["value"]
        kind_name = v["type"] if v["type"] != "array" else f"array[{v['subtype']}]"
        return f"{op['key']} = {kind_name} {_short(v['value'])}"
    if kind == "delete":
        return f"delete {op['key']}"
    if kind == "set_item":
        return f"{op['key']}[{op['index']}] = {_short(op['value'])}"
    if kind == "copy_item":
        return f"{op['key']}[{op['dst']}] = {op['key']}[{op['src']}] (duplicate)"
    if kind == "resize":
        return f"{op['key']} resized to {op['length']} elements"
    if kind == "tensor":
        return f"tensor {op['name']} {op['field']} = {_short(op['value'])}"
    if kind == "drop_tensor":
        return f"drop tensor {op['name']}"
    if kind == "retype":
        return f"tensor {op['name']} retyped to ggml type {op['type']}, data bytes 0x{op['fill']:02x}"
    if kind == "header":
        return f"header {op['field']} = {op['value']}"
    if kind == "flip":
        return f"header byte {op['at']} ^= 0x{op['xor']:02x}"
    if kind == "truncate":
        return f"truncate at {op['fraction']:.4f} of the {op['of']}"
    if kind == "arg":  # API cases (api_cases.py)
        return f"Model({op['name']}={_short(op['value'])})"
    if kind == "call":
        if "args" not in op:
            return f"read .{op['method']}"
        args = [_short(a, 40) for a in op["args"]] + [f"{k}={_short(v, 40)}" for k, v in op["kwargs"].items()]
        return f".{op['method']}({', '.join(args)})"
    return repr(op)


def describe(mutations: list[dict]) -> str:
    return "; ".join(describe_op(op) for m in mutations for op in m["ops"])
