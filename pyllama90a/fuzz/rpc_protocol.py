"""ggml-rpc's wire format, as the fuzzer needs it: framing, the serialized tensor, where each command keeps its
tensors and its scalar fields, and a client that speaks it with timeouts.

A request is | command (1 byte) | size (8 bytes, little-endian) | payload (size bytes) |; a reply is
| size (8 bytes) | payload |. Only the commands in REPLIES are answered; the others (SET_TENSOR, GRAPH_COMPUTE, ...)
are not, and a worker refuses a request by closing the connection. This is read from ggml-rpc's server (protocol
7.0.0, the pinned llama.cpp); `native.rpc` speaks the same HELLO for its probe.
"""
from __future__ import annotations

import contextlib
import hmac
import os
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass

from ..native.rpc import CMD_DEVICE_COUNT, CMD_HELLO, CONN_CAPS_SIZE, HELLO_FLAG_AUTH, NONCE_SIZE, auth_mac

# commands (ggml-rpc's enum rpc_cmd)
ALLOC_BUFFER, GET_ALIGNMENT, GET_MAX_SIZE, BUFFER_GET_BASE, FREE_BUFFER, BUFFER_CLEAR = range(6)
SET_TENSOR, SET_TENSOR_HASH, GET_TENSOR, COPY_TENSOR, GRAPH_COMPUTE, GET_DEVICE_MEMORY = range(6, 12)
INIT_TENSOR, GET_ALLOC_SIZE, HELLO, DEVICE_COUNT, GRAPH_RECOMPUTE, MEMSET_TENSOR, NONE = range(12, 19)
COMMAND_COUNT = 19
assert (HELLO, DEVICE_COUNT) == (CMD_HELLO, CMD_DEVICE_COUNT)
NAMES = ("ALLOC_BUFFER GET_ALIGNMENT GET_MAX_SIZE BUFFER_GET_BASE FREE_BUFFER BUFFER_CLEAR SET_TENSOR "
         "SET_TENSOR_HASH GET_TENSOR COPY_TENSOR GRAPH_COMPUTE GET_DEVICE_MEMORY INIT_TENSOR GET_ALLOC_SIZE HELLO "
         "DEVICE_COUNT GRAPH_RECOMPUTE MEMSET_TENSOR NONE").split()
# the commands a worker answers
REPLIES = frozenset({ALLOC_BUFFER, GET_ALIGNMENT, GET_MAX_SIZE, BUFFER_GET_BASE, SET_TENSOR_HASH, GET_TENSOR,
                     COPY_TENSOR, GET_DEVICE_MEMORY, GET_ALLOC_SIZE, HELLO, DEVICE_COUNT})
# HELLO's payload (CONN_CAPS_SIZE zeros) and patch 0023's challenge-response: native.rpc's (HELLO_FLAG_AUTH, NONCE_SIZE,
# auth_mac), the one home of the handshake's format

# ggml's limits and the operations the attack cases name (ggml.h's enum ggml_op; 101 ops in this protocol version)
MAX_DIMS, MAX_SRC, MAX_OP_PARAMS, MAX_NAME = 4, 10, 64, 64
OP_COUNT = 101
OPS = {"NONE": 0, "DUP": 1, "ADD": 2, "ACC": 5, "MUL": 7, "SUM_ROWS": 15, "CPY": 34, "CONT": 35, "RESHAPE": 36,
       "VIEW": 37, "PERMUTE": 38, "TRANSPOSE": 39, "GET_ROWS": 40, "SET_ROWS": 42, "SOFT_MAX": 46, "ROPE": 48,
       "SET": 33, "MUL_MAT": 29, "UNARY": 91, "MAP_CUSTOM1": 92, "MAP_CUSTOM2": 93, "CUSTOM": 95, "GLU": 100}
TYPE_F32, TYPE_F16, TYPE_Q4_0, TYPE_I32 = 0, 1, 2, 26

# rpc_tensor, packed: id type buffer ne[4] nb[4] op op_params[16] flags src[10] view_src view_offs data name use_count
TENSOR = struct.Struct(f"<QIQ{MAX_DIMS}I{MAX_DIMS}II{MAX_OP_PARAMS // 4}i i{MAX_SRC}QQQQ{MAX_NAME}si")
TENSOR_SIZE = TENSOR.size  # 296
# each field: (byte offset in the tensor, struct code of one element, number of elements)
FIELDS: dict[str, tuple[int, str, int]] = {
    "id": (0, "Q", 1), "type": (8, "I", 1), "buffer": (12, "Q", 1), "ne": (20, "I", 4), "nb": (36, "I", 4),
    "op": (52, "I", 1), "op_params": (56, "i", 16), "flags": (120, "i", 1), "src": (124, "Q", MAX_SRC),
    "view_src": (204, "Q", 1), "view_offs": (212, "Q", 1), "data": (220, "Q", 1), "use_count": (292, "i", 1),
}
assert TENSOR_SIZE == 296 and FIELDS["use_count"][0] == 292
# each command's scalar fields: name -> (byte offset in the payload, struct code)
SCALARS: dict[int, dict[str, tuple[int, str]]] = {
    ALLOC_BUFFER: {"device": (0, "I"), "size": (4, "Q")},
    GET_ALIGNMENT: {"device": (0, "I")}, GET_MAX_SIZE: {"device": (0, "I")}, GET_DEVICE_MEMORY: {"device": (0, "I")},
    GRAPH_RECOMPUTE: {"device": (0, "I")},
    BUFFER_GET_BASE: {"remote_ptr": (0, "Q")}, FREE_BUFFER: {"remote_ptr": (0, "Q")},
    BUFFER_CLEAR: {"remote_ptr": (0, "Q"), "value": (8, "B")},
    SET_TENSOR: {"cache_flag": (296, "B"), "offset": (297, "Q")},
    SET_TENSOR_HASH: {"offset": (296, "Q"), "hash": (304, "Q")},
    GET_TENSOR: {"offset": (296, "Q"), "size": (304, "Q")},
    MEMSET_TENSOR: {"offset": (296, "Q"), "size": (304, "Q"), "value": (312, "B")},
    GET_ALLOC_SIZE: {"device": (0, "I")},
    GRAPH_COMPUTE: {"device": (0, "I"), "n_nodes": (4, "I")},
}
MASKS = {"B": 0xFF, "I": 0xFFFFFFFF, "i": 0xFFFFFFFF, "Q": 2**64 - 1}


def pack_field(code: str, value: int) -> bytes:
    """`value` in the field's width, two's complement for negative numbers (so any int fits)."""
    masked = value & MASKS[code]
    if code == "i" and masked >= 2**31:
        masked -= 2**32
    return struct.pack("<" + code, masked)


def tensor_bytes(fields: dict[str, int | list[int]], name: bytes = b"") -> bytes:
    """A serialized tensor: every field zero unless given (lists for ne, nb, op_params, src)."""
    out = bytearray(TENSOR_SIZE)
    for key, value in fields.items():
        offset, code, count = FIELDS[key]
        values = value if isinstance(value, list) else [value]
        for i, v in enumerate(values[:count]):
            out[offset + i * struct.calcsize(code):offset + (i + 1) * struct.calcsize(code)] = pack_field(code, v)
    out[228:228 + min(len(name), MAX_NAME - 1)] = name[:MAX_NAME - 1]
    return bytes(out)


def tensor_field(data: bytes | bytearray, base: int, key: str, index: int = 0) -> int:
    offset, code, _ = FIELDS[key]
    (value,) = struct.unpack_from("<" + code, data, base + offset + index * struct.calcsize(code))
    return int(value)


def graph_layout(payload: bytes | bytearray) -> tuple[int, int, int]:
    """GRAPH_COMPUTE's | device | n_nodes | node ids | n_tensors | tensors |: (n_nodes, n_tensors, offset of the
    first tensor), the counts as the payload holds them (clamped to what it can hold)."""
    if len(payload) < 8:
        return 0, 0, len(payload)
    (n_nodes,) = struct.unpack_from("<I", payload, 4)
    at = 8 + 8 * n_nodes
    if at + 4 > len(payload):
        return 0, 0, len(payload)
    (n_tensors,) = struct.unpack_from("<I", payload, at)
    return n_nodes, n_tensors, at + 4


def tensor_offsets(cmd: int, payload: bytes | bytearray) -> list[int]:
    """Where the serialized tensors of a request start (only those wholly inside the payload)."""
    if cmd in (SET_TENSOR, SET_TENSOR_HASH, GET_TENSOR, MEMSET_TENSOR, INIT_TENSOR):
        starts = [0]
    elif cmd == COPY_TENSOR:
        starts = [0, TENSOR_SIZE]
    elif cmd == GET_ALLOC_SIZE:
        starts = [4 + k * TENSOR_SIZE for k in range(1 + MAX_SRC)]
    elif cmd == GRAPH_COMPUTE:  # the count as sent may be anything (2**32-1): only those the payload holds
        _, n_tensors, first = graph_layout(payload)
        starts = [first + k * TENSOR_SIZE for k in range(min(n_tensors, (len(payload) - first) // TENSOR_SIZE))]
    else:
        starts = []
    return [s for s in starts if s + TENSOR_SIZE <= len(payload)]


@dataclass
class Message:
    cmd: int
    payload: bytes
    declared: int | None = None  # the size field when it is not len(payload) (a lie the fuzzer tells)

    def frame(self) -> bytes:
        size = len(self.payload) if self.declared is None else self.declared
        return bytes([self.cmd & 0xFF]) + struct.pack("<Q", size & (2**64 - 1)) + self.payload

    @property
    def name(self) -> str:
        return NAMES[self.cmd] if self.cmd < COMMAND_COUNT else f"cmd{self.cmd}"


def split_requests(stream: bytes) -> Iterator[Message]:
    """The requests of a recorded client-to-worker byte stream (a torn last one is dropped)."""
    at = 0
    while at + 9 <= len(stream):
        cmd = stream[at]
        (size,) = struct.unpack_from("<Q", stream, at + 1)
        if at + 9 + size > len(stream):
            return
        yield Message(cmd, stream[at + 9:at + 9 + size])
        at += 9 + size


def split_replies(stream: bytes) -> Iterator[bytes]:
    at = 0
    while at + 8 <= len(stream):
        (size,) = struct.unpack_from("<Q", stream, at)
        if at + 8 + size > len(stream):
            return
        yield stream[at + 8:at + 8 + size]
        at += 8 + size


class Closed(Exception):
    """The worker closed the connection (how it refuses a request) or did not answer in time."""


class Client:
    """One connection to a worker. send() returns the reply's payload for the commands that have one."""

    def __init__(self, host: str, port: int, timeout: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, message: Message, expect_reply: bool | None = None) -> bytes | None:
        try:
            self.sock.sendall(message.frame())
        except OSError as e:
            raise Closed(f"send {message.name}: {e}") from None
        if not (message.cmd in REPLIES if expect_reply is None else expect_reply):
            return None
        return self.recv_msg()

    def recv_exact(self, n: int) -> bytes:
        chunks, got = [], 0
        while got < n:
            try:
                chunk = self.sock.recv(min(n - got, 1 << 20))
            except TimeoutError:
                raise TimeoutError("no answer") from None
            except OSError as e:
                raise Closed(str(e)) from None
            if not chunk:
                raise Closed("closed by the worker")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def hello(self, secret: bytes | None = None) -> tuple[int, int, int]:
        """HELLO, and the challenge-response when the worker asks for it (with `secret`; Closed without one)."""
        reply = self.send(Message(HELLO, bytes(CONN_CAPS_SIZE)))
        assert reply is not None
        if len(reply) < 4:
            raise Closed(f"HELLO answered with {len(reply)} bytes")
        if reply[3] & HELLO_FLAG_AUTH:
            if secret is None:
                raise Closed("the worker asks for a secret")
            self.authenticate(secret)
        return reply[0], reply[1], reply[2]

    def recv_msg(self) -> bytes:
        (size,) = struct.unpack("<Q", self.recv_exact(8))
        return self.recv_exact(size)

    def authenticate(self, secret: bytes) -> None:
        server_nonce, client_nonce = self.recv_msg(), os.urandom(NONCE_SIZE)
        mac = auth_mac(secret, "client", server_nonce, client_nonce)
        try:
            self.sock.sendall(struct.pack("<Q", NONCE_SIZE + len(mac)) + client_nonce + mac)
        except OSError as e:
            raise Closed(f"send the answer: {e}") from None
        expected = auth_mac(secret, "server", server_nonce, client_nonce)
        if not hmac.compare_digest(self.recv_msg(), expected):
            raise Closed("the worker's answer to the challenge is wrong")

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
