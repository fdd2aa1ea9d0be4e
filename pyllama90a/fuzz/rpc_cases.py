"""RPC protocol cases: recorded sessions replayed with mutations, and the attack classes of issue 33.

A case is `{"target": "rpc", "base": session, "mutations": [{"cls": name, "ops": [...]}, ...]}`, so that the
runner, the shrinker and the reports of the other targets serve it. rpc_replay plays the ops in the order given,
on connections the case opens; an op is one of

    {"op": "send", "s": session, "m": i, "edits": [...]}  recorded request i, the live addresses put in
    {"op": "msg", "cmd": c, "parts": [...], "size": n}     a request built here ("size": a declared size that lies)
    {"op": "conn", "hello": bool} / {"op": "close"} / {"op": "hold"} / {"op": "idle", "seconds": s} / {"op": "free_all"}
    {"op": "expect", "buf": k, "filled" | "absent": byte}  buffer k unchanged / free of another buffer's bytes

Parts are ["I"|"Q"|"B"|"i", value], ["tensor", fields], ["graph", {"nodes", "tensors", "chain"}], ["fill", n, byte],
["hex", s]. Values are ints or the live worker's addresses: {"buf": k} (the handle of the k-th buffer the worker
gave this case, negative k counting from the last), {"base": k, "off": n}, {"size": k}, {"base_diff": [k, j]}.
Edits (of a recorded request): {"t": k, "f": field, "i": index, "v": value} (tensor k's field), {"s": name, "v"}
(a scalar: size, offset, device, ...), {"node": j, "v"}, {"n_tensors": n}, {"truncate": n}, {"byte": at, "v"},
{"declared": n}, {"cmd": c}.
"""
from __future__ import annotations

import functools
import json
import os
import random
from typing import Any

from .rpc_protocol import (
    ALLOC_BUFFER,
    BUFFER_CLEAR,
    BUFFER_GET_BASE,
    COMMAND_COUNT,
    COPY_TENSOR,
    FIELDS,
    FREE_BUFFER,
    GET_ALIGNMENT,
    GET_ALLOC_SIZE,
    GET_DEVICE_MEMORY,
    GET_MAX_SIZE,
    GET_TENSOR,
    GRAPH_COMPUTE,
    GRAPH_RECOMPUTE,
    HELLO,
    INIT_TENSOR,
    MEMSET_TENSOR,
    OP_COUNT,
    OPS,
    SCALARS,
    SET_TENSOR,
    SET_TENSOR_HASH,
    TYPE_F32,
    TYPE_I32,
    tensor_offsets,
)
from .rpc_sessions import SESSIONS, Session
from .rpc_worker import Settings

INTS = [0, 1, 2, 3, 4, 7, 8, 16, 31, 32, 64, 255, 256, 4096, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
        2**48, 2**63 - 1, 2**63, 2**64 - 1, -1, -2, -4096, -2**31]
FLAG_COMPUTE = 16  # GGML_TENSOR_FLAG_COMPUTE
# element sizes of the types the attack cases build
TYPE_SIZE = {TYPE_F32: 4, TYPE_I32: 4}


# -- building blocks ---------------------------------------------------------------------------------------

def alloc(size: int) -> dict[str, Any]:
    return {"op": "msg", "cmd": ALLOC_BUFFER, "parts": [["I", 0], ["Q", size]]}


def tensor(tid: int, ne: list[int], *, buf: int | None = -1, off: int | dict[str, Any] = 0, type_: int = TYPE_F32,
           op: int = 0, op_params: list[Any] | None = None, src: list[int] | None = None,
           nb: list[int] | None = None, **more: Any) -> dict[str, Any]:
    """A tensor's fields: in the case's buffer `buf` at offset `off` (None: no buffer, NULL data)."""
    ne = [*ne, 1, 1, 1][:4]
    size = TYPE_SIZE.get(type_, 4)
    fields: dict[str, Any] = {"id": tid, "type": type_, "ne": ne, "op": op,
                              "nb": nb or [size, size * ne[0], size * ne[0] * ne[1], size * ne[0] * ne[1] * ne[2]]}
    if buf is not None:
        fields["buffer"] = {"buf": buf}
        fields["data"] = off if isinstance(off, dict) else {"base": buf, "off": off}
    if op:
        fields["flags"] = FLAG_COMPUTE  # ggml-cpu skips a node without it
    if op_params:
        fields["op_params"] = op_params
    if src:
        fields["src"] = src
    fields.update(more)
    return fields


def set_tensor(t: dict[str, Any], data: list[Any], offset: int = 0) -> dict[str, Any]:
    return {"op": "msg", "cmd": SET_TENSOR, "parts": [["tensor", t], ["B", 0], ["Q", offset], *data]}


def graph(tensors: list[dict[str, Any]], nodes: list[int] | None = None, **more: Any) -> dict[str, Any]:
    return {"op": "msg", "cmd": GRAPH_COMPUTE, "parts": [["graph", {"nodes": nodes or [1], "tensors": tensors,
                                                                    **more}]]}


def _pick(rng: random.Random, values: list[Any]) -> Any:
    return values[rng.randrange(len(values))]


def _offset(rng: random.Random, k: int = -1) -> dict[str, Any]:
    """An address near buffer k: inside, just outside either end, or far."""
    off = _pick(rng, [0, 4, -4, -64, -4096, 4092, 4096, 4100, 1 << 20, -(1 << 20), 2**31, 2**63, -2**63])
    return {"base": k, "off": off}


# -- the attack classes (issue 33) ---------------------------------------------------------------------------

def acc_oob(rng: random.Random) -> list[dict[str, Any]]:
    """ACC's view of dst comes from op_params (nb1..nb3, offset as int32, cast to size_t): an offset to the other
    buffer, with a stride that wraps the bounds check's sum around, writes there (buffers: -2 the other, -1 dst's)."""
    if rng.random() < 0.5:  # row 0 at the other buffer, row 1 back in dst: offset + nb1 + 64 wraps to 64
        nb1: Any = {"base_diff": [-2, -1], "off": _pick(rng, [0, 0, 64, -64])}
        offset: Any = {"base_diff": [-1, -2], "off": _pick(rng, [0, 0, 64, 4032])}
    else:
        nb1 = _pick(rng, [64, 0, -64, 2**31 - 1, 4096])
        offset = _pick(rng, [{"base_diff": [-1, -2]}, -4096, -64, -1, 2**31 - 1, -2**31, 4096, 256,
                             rng.randrange(-2**31, 2**31)])
    params = [nb1, _pick(rng, [64, 2**20, -1]), _pick(rng, [64, 2**20, -1]), offset, rng.randrange(2)]
    # the other buffer holds 0x3F3F3F3F (0.75f) and the added rows 3.0f: a write into it changes its bytes
    return [alloc(4096), alloc(4096), set_tensor(tensor(9, [1024], buf=-2), [["fill", 4096, 0x3F]]),
            set_tensor(tensor(3, [16, 2], off=1024), [["fill", 128, 0x40]]),
            graph([tensor(1, [64], op=OPS["ACC"], op_params=params, src=[2, 3]), tensor(2, [64]),
                   tensor(3, [16, 2], off=1024)]),
            {"op": "expect", "buf": -2, "filled": 0x3F}, {"op": "expect", "buf": -1, "absent": 0x3F}]


def view_oob(rng: random.Random) -> list[dict[str, Any]]:
    """Views: view_src/view_offs, op_params offsets and strides that leave the buffer."""
    big = _pick(rng, [2**31, 2**32 - 1, 2**20, 4096, 64])
    view = tensor(2, [_pick(rng, [16, big]), 1], off=_offset(rng), op=OPS["VIEW"], view_src=3,
                  view_offs=_pick(rng, [0, 4096, 2**63, 2**64 - 64]), op_params=[_pick(rng, INTS), _pick(rng, INTS)],
                  nb=[4, _pick(rng, [64, 0, 2**32 - 1]), 64, 64])
    node_op = _pick(rng, [OPS["CPY"], OPS["DUP"], OPS["ADD"], OPS["CONT"], OPS["SUM_ROWS"]])
    return [alloc(4096), graph([tensor(1, [16], op=node_op, src=[2, 2] if node_op == OPS["ADD"] else [2]), view,
                                tensor(3, [16])])]


def tensor_outside(rng: random.Random) -> list[dict[str, Any]]:
    """Requests naming a tensor outside (or across the end of) a buffer, or with another buffer's handle."""
    cmd = _pick(rng, [SET_TENSOR, GET_TENSOR, MEMSET_TENSOR, INIT_TENSOR, COPY_TENSOR, SET_TENSOR_HASH])
    ne = [_pick(rng, [1, 16, 1024, 2**20, 2**32 - 1])]
    if rng.random() < 0.3:  # element counts past int64 (each ne is a uint32 on the wire)
        ne += [_pick(rng, [2**32 - 1, 2**31, 65536]) for _ in range(3)]
    t = tensor(1, ne, off=_offset(rng), buf=_pick(rng, [-1, -1, -2]),
               type_=_pick(rng, [TYPE_F32, TYPE_I32, 2, 14, 43, 4, 2**32 - 1]))
    tail: list[list[Any]] = {
        SET_TENSOR: [["B", 0], ["Q", _pick(rng, INTS)], ["fill", _pick(rng, [4, 64, 8192]), 1]],
        GET_TENSOR: [["Q", _pick(rng, INTS)], ["Q", _pick(rng, [4, 64, 4096, 8192, 2**63])]],
        MEMSET_TENSOR: [["Q", _pick(rng, INTS)], ["Q", _pick(rng, [4, 4096, 2**64 - 1])], ["B", 7]],
        INIT_TENSOR: [], SET_TENSOR_HASH: [["Q", _pick(rng, INTS)], ["Q", rng.getrandbits(64)]],
        COPY_TENSOR: [["tensor", tensor(2, [_pick(rng, [16, 1024, 2048])], off=_offset(rng, -2), buf=-2)]],
    }[cmd]
    return [alloc(4096), alloc(8192), {"op": "msg", "cmd": cmd, "parts": [["tensor", t], *tail]}]


def huge_size(rng: random.Random) -> list[dict[str, Any]]:
    """A size field far beyond what follows, allocations and clears of any size."""
    choice = rng.randrange(4)
    if choice == 0:
        cmd = _pick(rng, [SET_TENSOR, GRAPH_COMPUTE, HELLO, ALLOC_BUFFER, GET_TENSOR])
        return [{"op": "msg", "cmd": cmd, "parts": [], "size": _pick(rng, [2**63, 2**64 - 1, 3 << 29, 2**40])}]
    if choice == 1:  # more than any device here has, or nothing
        return [alloc(_pick(rng, [2**62, 2**40, 2**64 - 1, 0, 1]))]
    if choice == 2:  # a large buffer, cleared: the worker's RSS limit (2 GiB) is above it
        size = _pick(rng, [1 << 30, 256 << 20, 64 << 20])
        return [alloc(size), {"op": "msg", "cmd": BUFFER_CLEAR, "parts": [["Q", {"buf": -1}], ["B", 0xAB]]}]
    return [{"op": "msg", "cmd": _pick(rng, [GET_ALIGNMENT, GET_MAX_SIZE, GET_DEVICE_MEMORY, GRAPH_RECOMPUTE]),
             "parts": [["I", _pick(rng, [1, 2, 2**31, 2**32 - 1])]]}]


def null_sources(rng: random.Random) -> list[dict[str, Any]]:
    """A node whose sources have no buffer and NULL data (or a missing source id)."""
    op = _pick(rng, [OPS["ADD"], OPS["MUL"], OPS["MUL_MAT"], OPS["CPY"], OPS["GET_ROWS"], OPS["SOFT_MAX"]])
    dst_buf = _pick(rng, [-1, None])
    return [alloc(4096), graph([tensor(1, [16], buf=dst_buf, op=op, src=[2, _pick(rng, [3, 77])]),
                                tensor(2, [16], buf=None), tensor(3, [16], buf=None)])]


def deep_chain(rng: random.Random) -> list[dict[str, Any]]:
    """A graph node with a source chain thousands deep (create_node recurses per source)."""
    n = _pick(rng, [1000, 20000, 70000, 100000])  # 2**16 is the hardened worker's bound
    return [alloc(4096), graph([], nodes=[1001], chain={"n": n, "tensor": tensor(0, [16], op=OPS["ADD"])})]


def get_rows_oob(rng: random.Random) -> list[dict[str, Any]]:
    """GET_ROWS with a row index outside the matrix (the indices are data, set before the compute)."""
    row = _pick(rng, [4, 5, -1, 2**31 - 1, -2**31, 1000])
    op = _pick(rng, [OPS["GET_ROWS"], OPS["GET_ROWS"], OPS["SET_ROWS"]])
    return [alloc(4096), set_tensor(tensor(3, [2], type_=TYPE_I32, off=512), [["i", 0], ["i", row]]),
            graph([tensor(1, [8, 2], op=op, src=[2, 3], off=1024), tensor(2, [8, 4]),
                   tensor(3, [2], type_=TYPE_I32, off=512)])]


def unknown_op(rng: random.Random) -> list[dict[str, Any]]:
    """An op past the last, or UNARY/GLU naming a sub-op past theirs (op_params[0])."""
    if rng.random() < 0.3:
        op, params = _pick(rng, [OPS["UNARY"], OPS["GLU"]]), [_pick(rng, [-1, 64, 1000, 2**31 - 1, -2**31])]
    else:
        op, params = _pick(rng, [OP_COUNT, OP_COUNT + 1, 255, 2**31, 2**32 - 1, rng.randrange(OP_COUNT, 2**32)]), []
    return [alloc(4096), graph([tensor(1, [16], op=op, src=[2, 2], op_params=params), tensor(2, [16], off=64)])]


def custom_op(rng: random.Random) -> list[dict[str, Any]]:
    """Custom ops keep a function pointer in op_params: a peer would choose the code the worker runs."""
    fn = _pick(rng, [[0x41414141, 0x41414141], [{"base": -1}, {"base": -1, "shift": 32}], [0, 0], [1, 0]])
    op = _pick(rng, [OPS["MAP_CUSTOM1"], OPS["MAP_CUSTOM2"], OPS["CUSTOM"], 94])
    return [alloc(4096), graph([tensor(1, [16], op=op, src=[2, 2], op_params=[*fn, 1, 0, 0, 0]),
                                tensor(2, [16], off=64)])]


def random_op(rng: random.Random) -> list[dict[str, Any]]:
    """Any op over sources of random small shapes and types: each op's own shape rules are the only guard."""
    types = [TYPE_F32, TYPE_F32, TYPE_I32, 1, 2, 8, 30]

    same = [_pick(rng, [1, 2, 4, 8, 16]) for _ in range(rng.randrange(1, 4))]

    def shape() -> list[int]:  # half the cases: one shape for all, so that the ops' own shape rules pass more often
        if rng.random() < 0.5:
            return same
        return [_pick(rng, [1, 2, 3, 4, 8, 16, 32]) for _ in range(rng.randrange(1, 5))]

    srcs = [tensor(2 + i, shape(), type_=_pick(rng, types), off=256 * (i + 1)) for i in range(rng.randrange(1, 4))]
    for s in srcs:  # quantized types: rows of whole blocks, contiguous strides left as they come
        s["nb"] = s["nb"] if s["type"] in TYPE_SIZE else [2, 64, 256, 1024]
    op_params = [_pick(rng, [0, 1, 2, -1, 4, 64, 2**31 - 1]) for _ in range(rng.randrange(0, 8))]
    dst = tensor(1, shape(), op=rng.randrange(1, OP_COUNT), src=[s["id"] for s in srcs],
                 op_params=op_params or None, off=2048)
    return [alloc(4096), graph([dst, *srcs])]


def idle_peer(rng: random.Random) -> list[dict[str, Any]]:
    """A connection that says nothing (or HELLO, or half a request) and stays open while the next client comes."""
    ops: list[dict[str, Any]] = [{"op": "close"}, {"op": "conn", "hello": rng.random() < 0.5}]
    if rng.random() < 0.5:
        ops.append({"op": "msg", "cmd": SET_TENSOR, "parts": [["fill", 100, 0]], "size": 4096})
    return [*ops, {"op": "hold"}]


def cross_client(rng: random.Random) -> list[dict[str, Any]]:
    """A client fills a buffer and goes away (freeing it or not); the check's fresh buffer must not show it."""
    size = _pick(rng, [4096, 65536, 1 << 20, 3 << 20])
    ops = [alloc(size), set_tensor(tensor(1, [size // 4]), [["fill", size, 0xA5]])]
    if rng.random() < 0.5:
        ops.append({"op": "free_all"})
    if rng.random() < 0.5:  # and a second client that tries the first one's (now stale) handle
        ops += [{"op": "close"}, {"op": "conn", "hello": True},
                {"op": "msg", "cmd": GET_TENSOR, "parts": [["tensor", tensor(1, [16])], ["Q", 0], ["Q", 64]]}]
    return ops


def auth_peer(rng: random.Random) -> list[dict[str, Any]]:
    """A peer without the link's secret (patch 0023): no answer, a wrong one, a lying size, or silence. The worker
    must close it without answering a command, and serve the next client."""
    ops: list[dict[str, Any]] = [{"op": "close"}, {"op": "conn", "hello": False},
                                 {"op": "msg", "cmd": HELLO, "parts": [["fill", 24, 0]]}]
    kind = _pick(rng, ["command", "wrong", "size", "short", "silent"])
    if kind == "command":  # a command where the answer belongs (read as the answer)
        return [*ops, {"op": "recv"}, {"op": "expect_refused"}]
    if kind == "wrong":
        return [*ops, {"op": "recv"}, {"op": "raw", "parts": [["Q", 64], ["hex", rng.randbytes(64).hex()]]},
                {"op": "expect_refused"}]
    if kind == "size":
        size = _pick(rng, [0, 63, 65, 2**63, 2**64 - 1])
        return [*ops, {"op": "recv"}, {"op": "raw", "parts": [["Q", size], ["fill", 64, 0]]}, {"op": "expect_refused"}]
    if kind == "short":  # half an answer, then nothing: the handshake timeout must end it
        return [*ops, {"op": "recv"}, {"op": "raw", "parts": [["Q", 64], ["fill", 20, 7]]}, {"op": "hold"}]
    return [*ops, {"op": "hold"}]


def recompute(rng: random.Random, session: Session) -> list[dict[str, Any]]:
    """GRAPH_RECOMPUTE after the graph's buffers changed under it."""
    graphs = session.indices(GRAPH_COMPUTE)
    ops = [{"op": "send", "s": session.name, "m": i} for i in session.indices(ALLOC_BUFFER)]
    ops.append({"op": "send", "s": session.name, "m": _pick(rng, graphs)})
    between = _pick(rng, ["free_all", "clear", "alloc", "nothing"])
    if between == "free_all":
        ops.append({"op": "free_all"})
    elif between == "clear":
        ops.append({"op": "msg", "cmd": BUFFER_CLEAR, "parts": [["Q", {"buf": -1}], ["B", 0xFF]]})
    elif between == "alloc":
        ops.append(alloc(1 << 20))
    return [*ops, {"op": "msg", "cmd": GRAPH_RECOMPUTE, "parts": [["I", 0]]}]


ATTACKS = {"acc_oob": acc_oob, "view_oob": view_oob, "tensor_outside": tensor_outside, "huge_size": huge_size,
           "null_sources": null_sources, "deep_chain": deep_chain, "get_rows_oob": get_rows_oob,
           "unknown_op": unknown_op, "custom_op": custom_op, "random_op": random_op, "idle_peer": idle_peer,
           "cross_client": cross_client}
# how often each is drawn (idle peers cost a worker's idle timeout each; deep chains send up to 89 MB)
WEIGHTS = {"idle_peer": 0.2, "deep_chain": 0.4, "random_op": 3.0, "tensor_outside": 2.0, "acc_oob": 1.5}


# -- recorded sessions, mutated ------------------------------------------------------------------------------

def _field_value(rng: random.Random, field: str, current: int, ids: list[int]) -> Any:
    if field in ("src", "view_src", "id") and ids and rng.random() < 0.6:
        return _pick(rng, [*ids, 0, current])  # another tensor of the message: cycles, self references
    if field == "buffer":
        return _pick(rng, [{"buf": rng.randrange(-3, 3)}, 0, {"base": -1}, rng.getrandbits(64)])
    if field == "data":
        return _pick(rng, [_offset(rng, rng.randrange(-3, 3)), 0, current + _pick(rng, [-4096, 4096, 2**32, 2**63])])
    if field == "op":
        return _pick(rng, [rng.randrange(OP_COUNT), OP_COUNT, 2**32 - 1, *OPS.values()])
    if field == "type":
        return _pick(rng, [rng.randrange(45), 4, 5, 31, 43, 2**32 - 1])
    if field == "op_params":
        return _pick(rng, [*INTS, {"base_diff": [0, -1]}, current ^ (1 << rng.randrange(32))])
    if rng.random() < 0.3:
        return current ^ (1 << rng.randrange(32))  # one bit flipped
    return _pick(rng, [*INTS, current + 1, current - 1, current * 2])


def _edits(rng: random.Random, session: Session, m: int) -> list[dict[str, Any]]:
    """1-4 field edits of recorded request m: tensor fields, scalars, graph node ids and counts."""
    message = session.requests[m]
    starts = tensor_offsets(message.cmd, message.payload)
    ids = [int.from_bytes(message.payload[s:s + 8], "little") for s in starts[:64]]
    edits: list[dict[str, Any]] = []
    for _ in range(rng.randint(1, 4)):
        r = rng.random()
        if starts and r < 0.7:
            t = rng.randrange(len(starts))
            field = _pick(rng, ["type", "buffer", "ne", "nb", "op", "op_params", "flags", "src", "view_src",
                                "view_offs", "data", "id", "ne", "nb", "data", "op_params"])
            index = rng.randrange(FIELDS[field][2])
            at = starts[t] + FIELDS[field][0]
            current = int.from_bytes(message.payload[at:at + 8], "little") if field in ("data", "buffer") else 0
            edits.append({"t": t, "f": field, "i": index, "v": _field_value(rng, field, current, ids)})
        elif message.cmd == GRAPH_COMPUTE and r < 0.85:
            edits.append(_pick(rng, [{"node": rng.randrange(1 << 16), "v": _pick(rng, [0, *ids[:8], 2**64 - 1])},
                                     {"n_tensors": _pick(rng, [0, 1, len(starts) + 1, 2**32 - 1])},
                                     {"s": "n_nodes", "v": _pick(rng, [0, 1, 2**32 - 1, 2**29])}]))
        elif SCALARS.get(message.cmd):
            name = _pick(rng, list(SCALARS[message.cmd]))
            edits.append({"s": name, "v": _pick(rng, [*INTS, {"buf": -1}, {"size": -1}])})
        else:
            edits.append({"byte": rng.randrange(1 << 20), "v": rng.randrange(256)})
    return edits


def _structure_edit(rng: random.Random, session: Session, m: int) -> dict[str, Any]:
    size = len(session.requests[m].payload)
    return _pick(rng, [{"truncate": rng.randrange(size + 1)}, {"declared": size + _pick(rng, [1, -1, 8, 4096])},
                       {"declared": _pick(rng, [0, 2**63, 3 << 29])}, {"cmd": rng.randrange(COMMAND_COUNT + 2)},
                       {"byte": rng.randrange(max(size, 1)), "v": rng.randrange(256)}])


def replay_ops(rng: random.Random, session: Session, cls: str, other: Session | None) -> list[dict[str, Any]]:
    """The session's allocations, then a sample of its other requests (a graph compute now and then), mutated
    as `cls` says: "replay" (as recorded), "field", "structure" (truncated, lying sizes, other commands,
    repeated, reordered), "splice" (requests of another session among them)."""
    setup = session.indices(ALLOC_BUFFER)
    rest = [i for i in range(len(session.requests)) if i not in setup and session.requests[i].cmd != HELLO]
    graphs = set(session.indices(GRAPH_COMPUTE))
    cheap = [i for i in rest if i not in graphs]
    picked = sorted(rng.sample(cheap, min(len(cheap), rng.randint(2, 24))))
    if graphs and rng.random() < 0.3:
        picked.append(_pick(rng, sorted(graphs)))
    ops: list[dict[str, Any]] = [{"op": "send", "s": session.name, "m": i} for i in setup]
    body: list[dict[str, Any]] = [{"op": "send", "s": session.name, "m": i} for i in picked]
    if cls == "field":
        for op in rng.sample(body, min(len(body), rng.randint(1, 3))):
            op["edits"] = _edits(rng, session, op["m"])
    elif cls == "structure":
        for op in rng.sample(body, min(len(body), rng.randint(1, 2))):
            op["edits"] = [_structure_edit(rng, session, op["m"])]
        if rng.random() < 0.5:
            body += [dict(op) for op in rng.sample(body, min(len(body), 3))]  # repeated
        if rng.random() < 0.5:
            rng.shuffle(body)
    elif cls == "splice" and other is not None:
        for _ in range(rng.randint(1, 6)):
            m = rng.randrange(len(other.requests))
            op = {"op": "send", "s": other.name, "m": m}
            if rng.random() < 0.5:
                op["edits"] = _edits(rng, other, m)
            body.insert(rng.randrange(len(body) + 1), op)
    return ops + body


def generate_rpc_case(seed: int, index: int, sessions: dict[str, Session]) -> dict[str, Any]:
    rng = random.Random(f"rpc-{seed}-{index}")
    names = sorted(sessions)
    # the whole model's session is the costly one (150 MB of buffers a hardened worker clears): one case in five
    base = rng.choices(names, [1.0 if n == "load-generate" else 2.0 for n in names])[0]
    session, other = sessions[base], sessions[_pick(rng, [n for n in names if n != base] or names)]
    mutations: list[dict[str, Any]] = []
    if rng.random() < 0.55:
        cls = _pick(rng, ["replay", "field", "field", "field", "structure", "structure", "splice"])
        mutations.append({"cls": cls, "ops": replay_ops(rng, session, cls, other)})
    elif rng.random() < 0.1:
        mutations.append({"cls": "recompute", "ops": recompute(rng, session)})
    n_attacks = 0 if mutations and rng.random() < 0.5 else rng.randint(1, 2)
    # PYLLAMA90A_FUZZ_RPC_SKIP: attack classes left out (e.g. idle_peer, for a worker without an idle timeout)
    skipped = set(os.environ.get("PYLLAMA90A_FUZZ_RPC_SKIP", "").split(","))
    settings = Settings.from_environment()
    attacks = sorted((set(ATTACKS) | ({"auth_peer"} if settings.secret_file else set())) - skipped)
    weights = [WEIGHTS.get(a, 1.0) for a in attacks]
    for cls in rng.choices(attacks, weights, k=n_attacks):
        mutations.append({"cls": cls, "ops": (auth_peer if cls == "auth_peer" else ATTACKS[cls])(rng)})
    spec = {"target": "rpc", "base": base, "mutations": mutations}
    worker = settings.to_json()
    return {**spec, "model_args": worker} if worker else spec


def known_crash_case() -> dict[str, Any]:
    """A case that ends ggml-rpc's unpatched server (issue 33: a tensor 4096 bytes before its buffer)."""
    t = tensor(1, [16], off=-4096)
    return {"target": "rpc", "base": next(iter(SESSIONS)), "mutations": [
        {"cls": "tensor_outside", "ops": [alloc(4096), {"op": "msg", "cmd": GET_TENSOR,
                                                         "parts": [["tensor", t], ["Q", 0], ["Q", 64]]}]}]}


# -- describing a case --------------------------------------------------------------------------------------

_CMD_NAMES = {ALLOC_BUFFER: "ALLOC_BUFFER", BUFFER_GET_BASE: "BUFFER_GET_BASE", FREE_BUFFER: "FREE_BUFFER",
              BUFFER_CLEAR: "BUFFER_CLEAR", SET_TENSOR: "SET_TENSOR", SET_TENSOR_HASH: "SET_TENSOR_HASH",
              GET_TENSOR: "GET_TENSOR", COPY_TENSOR: "COPY_TENSOR", GRAPH_COMPUTE: "GRAPH_COMPUTE",
              GRAPH_RECOMPUTE: "GRAPH_RECOMPUTE", INIT_TENSOR: "INIT_TENSOR", GET_ALLOC_SIZE: "GET_ALLOC_SIZE",
              MEMSET_TENSOR: "MEMSET_TENSOR", HELLO: "HELLO", GET_ALIGNMENT: "GET_ALIGNMENT",
              GET_MAX_SIZE: "GET_MAX_SIZE", GET_DEVICE_MEMORY: "GET_DEVICE_MEMORY"}


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value, separators=(",", ":"))
    return text if len(text) <= limit else text[:limit] + "..."


@functools.cache
def _recorded_name(session: str, m: int) -> str:
    from .rpc_replay import corpus_sessions

    s = corpus_sessions().get(session)
    return s.requests[m % len(s.requests)].name if s else "?"


def describe_op(op: dict[str, Any]) -> str:
    kind = op["op"]
    if kind == "send":
        edits = f" with {_short(op['edits'])}" if op.get("edits") else ""
        return f"{op['s']}#{op['m']} ({_recorded_name(op['s'], op['m'])}){edits}"
    if kind == "msg":
        size = f" declaring {op['size']} bytes" if "size" in op else ""
        name = _CMD_NAMES.get(op["cmd"], f"cmd {op['cmd']}")
        return f"{name}{size} {_short(op['parts'])}"
    if kind == "conn":
        return "new connection" + (" (HELLO)" if op.get("hello") else " (says nothing)")
    return _short(op)


def describe_rpc(mutations: list[dict[str, Any]]) -> str:
    return "; ".join(f"[{m['cls']}] " + ", ".join(describe_op(op) for op in m["ops"]) for m in mutations)
