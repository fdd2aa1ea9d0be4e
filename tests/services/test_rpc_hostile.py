"""A hostile peer against `python -m pyllama90a.worker` (issue 33, patch 0022): raw ggml-rpc messages over
loopback, each of which read or wrote outside the worker's buffers, ended it, or handed one client what another
left. Each is refused (the worker closes that connection) and the worker serves the next client; a valid graph
still computes. The link's secret (patch 0023): a peer without it is closed after HELLO, a recorded or reflected
answer does not pass, and a client refuses a worker that does not prove it holds it, or reports absurd sizes."""
from __future__ import annotations

import contextlib
import hashlib
import hmac
import socket
import struct
import threading
import time
from pathlib import Path

import pytest

import pyllama90a as pl
from pyllama90a.fuzz.rpc_protocol import (
    ALLOC_BUFFER,
    BUFFER_GET_BASE,
    DEVICE_COUNT,
    GET_TENSOR,
    GRAPH_COMPUTE,
    HELLO,
    SET_TENSOR,
)
from pyllama90a.fuzz.rpc_protocol import TENSOR as RPC_TENSOR
from pyllama90a.fuzz.rpc_protocol import TYPE_F32 as F32
from pyllama90a.fuzz.rpc_protocol import TYPE_I32 as I32
from pyllama90a.native import rpc
from pyllama90a.native._ffi import ffi
from pyllama90a.native.rpc import recv_exact
from pyllama90a.tools.worker_process import WorkerProcess
from support.rpc_fakes import loopback_listener

# ggml-rpc's wire format (commands, the serialized tensor, framing) is pyllama90a.fuzz.rpc_protocol's and native.rpc's
# ggml's op and type numbers of this build (GGML_OP_COUNT 101: ggml-rpc's protocol patch version pins them)
OP_NONE, OP_ADD, OP_ACC, OP_RMS_NORM, OP_MUL_MAT, OP_SCALE, OP_GET_ROWS, OP_MAP_CUSTOM1 = 0, 2, 5, 25, 29, 32, 40, 92
OP_GLU, OP_COUNT = 100, 101
FLAG_COMPUTE = 16  # GGML_TENSOR_FLAG_COMPUTE: the CPU backend skips nodes without it
BUFFER_SIZE = 4096


class Peer:
    """A ggml-rpc client speaking the wire format directly."""

    def __init__(self, endpoint: str, timeout: float = 30.0) -> None:
        host, _, port = endpoint.partition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.call(HELLO, bytes(rpc.CONN_CAPS_SIZE))

    def send(self, cmd: int, payload: bytes, declared: int | None = None) -> None:
        self.sock.sendall(struct.pack("<BQ", cmd, len(payload) if declared is None else declared) + payload)

    def call(self, cmd: int, payload: bytes) -> bytes:
        self.send(cmd, payload)
        (size,) = struct.unpack("<Q", recv_exact(self.sock, 8))
        return recv_exact(self.sock, size)

    def alloc(self, size: int = BUFFER_SIZE) -> tuple[int, int]:
        """A buffer on device 0: (its id, its base address)."""
        remote, _ = struct.unpack("<QQ", self.call(ALLOC_BUFFER, struct.pack("<IQ", 0, size)))
        assert remote
        (base,) = struct.unpack("<Q", self.call(BUFFER_GET_BASE, struct.pack("<Q", remote)))
        return remote, base

    def set_tensor(self, t: bytes, data: bytes, offset: int = 0) -> None:
        self.send(SET_TENSOR, t + struct.pack("<BQ", 0, offset) + data)

    def get_tensor(self, t: bytes, size: int, offset: int = 0) -> bytes:
        return self.call(GET_TENSOR, t + struct.pack("<QQ", offset, size))

    def compute(self, nodes: list[int], tensors: list[bytes]) -> None:
        self.send(GRAPH_COMPUTE, struct.pack(f"<II{len(nodes)}QI", 0, len(nodes), *nodes, len(tensors))
                  + b"".join(tensors))

    def closed(self) -> bool:
        """Whether the worker closed this connection (a DEVICE_COUNT gets no answer)."""
        try:
            self.call(DEVICE_COUNT, b"")
        except OSError:  # ConnectionError (EOF, reset) included
            return True
        return False

    def close(self) -> None:
        self.sock.close()


def tensor(tid: int, buffer: int, data: int, ne: tuple[int, ...] = (4,), *, type_: int = F32,
           nb: tuple[int, ...] | None = None, op: int = OP_NONE, op_params: tuple[int, ...] = (),
           src: tuple[int, ...] = (), name: bytes = b"") -> bytes:
    ne4 = (*ne, *(1,) * (4 - len(ne)))
    if nb is None:  # contiguous 4-byte elements
        nb = (4, 4 * ne4[0], 4 * ne4[0] * ne4[1], 4 * ne4[0] * ne4[1] * ne4[2])
    flags = FLAG_COMPUTE if op != OP_NONE else 0
    return RPC_TENSOR.pack(tid, type_, buffer, *ne4, *nb, op, *op_params, *(0,) * (16 - len(op_params)), flags,
                           *src, *(0,) * (10 - len(src)), 0, 0, data, name, 0)


def floats(*values: float) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


@pytest.fixture
def worker():  # one per test: a worker an attack ended would fail the tests after it too
    with WorkerProcess(extra=("--timeout", "2")) as w:
        yield w


@pytest.fixture
def peer(worker):
    """A client of the worker; after the test, the worker is still alive and serves the next client."""
    p = Peer(worker.endpoint)
    yield p
    p.close()
    assert worker.proc is not None and worker.proc.poll() is None, worker.text()
    Peer(worker.endpoint).close()


def refused(peer: Peer, worker: WorkerProcess) -> bool:
    """The worker closed the peer's connection and is alive (a worker that aborted closes it too: give it the time
    to exit)."""
    closed = peer.closed()
    time.sleep(0.3)
    return closed and worker.proc is not None and worker.proc.poll() is None


def test_a_valid_graph_still_computes(peer):
    """ADD and ACC within their tensors: the checks let what llama.cpp's graphs do through."""
    buf, base = peer.alloc()
    a, b, out = (tensor(i + 1, buf, base + 64 * i) for i in range(3))
    peer.set_tensor(a, floats(1, 2, 3, 4))
    peer.set_tensor(b, floats(10, 20, 30, 40))
    add = tensor(3, buf, base + 128, op=OP_ADD, src=(1, 2))
    peer.compute([3], [a, b, add])
    assert peer.get_tensor(out, 16) == floats(11, 22, 33, 44)
    small = tensor(4, buf, base + 192, ne=(2,))
    peer.set_tensor(small, floats(100, 200))
    acc = tensor(5, buf, base + 256, op=OP_ACC, op_params=(16, 16, 16, 8, 0), src=(1, 4))
    peer.compute([5], [a, small, acc])
    assert peer.get_tensor(tensor(5, buf, base + 256), 16) == floats(1, 2, 103, 204)


@pytest.mark.parametrize("offset, stride", [(-4096, 16), (BUFFER_SIZE * 4, 16), (0, 1 << 30)],
                         ids=["before", "after", "stride"])
def test_acc_with_a_view_outside_its_buffer_is_refused(peer, worker, offset, stride):
    """GGML_OP_ACC's view offset and strides come from op_params: they reached before and after the buffer
    (another buffer's contents read and written, the heap corrupted)."""
    buf, base = peer.alloc()
    other, other_base = peer.alloc()
    peer.set_tensor(tensor(9, other, other_base), floats(7, 7, 7, 7))
    a = tensor(1, buf, base, ne=(4,))
    b = tensor(2, buf, base + 64, ne=(4, 2))
    acc = tensor(3, buf, base + 128, op=OP_ACC, op_params=(stride, stride, stride, offset, 0), src=(1, 2))
    peer.compute([3], [a, b, acc])
    assert refused(peer, worker)


def test_set_tensor_declaring_2_63_bytes_is_refused(peer, worker):
    peer.send(SET_TENSOR, b"", declared=1 << 63)
    assert refused(peer, worker)


def test_a_declared_size_costs_no_memory_before_its_bytes_come(peer, worker):
    """9 bytes declaring 1.5 GiB made the worker zero-fill 1.5 GiB, then wait for the body."""
    rss = rss_kib(worker)
    peer.send(SET_TENSOR, b"", declared=3 << 29)
    time.sleep(1.0)
    assert rss_kib(worker) - rss < 64 << 10
    assert refused(peer, worker)  # after --timeout 2 without the body


def rss_kib(worker: WorkerProcess) -> int:
    assert worker.proc is not None
    status = Path(f"/proc/{worker.proc.pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")))


def test_a_tensor_before_its_buffer_is_refused(peer, worker):
    buf, base = peer.alloc()
    peer.get_tensor(tensor(1, buf, base), 16)  # inside: answered
    with pytest.raises(OSError):
        peer.get_tensor(tensor(1, buf, base - 4096), 16)
    assert refused(peer, worker)


def test_a_tensor_of_more_than_2_63_elements_is_refused(peer, worker):
    """ne of 2^32-1 in every dimension: ggml_new_tensor asserted that the count fits in int64_t."""
    buf, base = peer.alloc()
    with pytest.raises(OSError):
        peer.get_tensor(tensor(1, buf, base, ne=(2**32 - 1,) * 4, nb=(4, 0, 0, 0)), 4)
    assert refused(peer, worker)


def test_sources_without_buffer_or_data_are_refused(peer, worker):
    buf, base = peer.alloc()
    add = tensor(3, buf, base, op=OP_ADD, src=(1, 2))
    peer.compute([3], [tensor(1, 0, 0), tensor(2, 0, 0), add])
    assert refused(peer, worker)


def test_a_300000_deep_source_chain_is_refused(peer, worker):
    """Sources nested 300,000 deep overflowed the stack of the recursive graph builder."""
    buf, base = peer.alloc()
    depth = 300_000
    chain = [tensor(1, buf, base)] + [tensor(i, buf, base, op=OP_ADD, src=(i - 1, i - 1)) for i in range(2, depth)]
    peer.compute([depth - 1], chain)
    assert refused(peer, worker)


def test_get_rows_with_an_out_of_range_row_is_refused(peer, worker):
    buf, base = peer.alloc()
    rows = tensor(1, buf, base, ne=(4, 2))
    ids = tensor(2, buf, base + 64, ne=(1,), type_=I32)
    peer.set_tensor(ids, struct.pack("<i", 1000))
    get = tensor(3, buf, base + 128, ne=(4, 1), op=OP_GET_ROWS, src=(1, 2))
    peer.compute([3], [rows, ids, get])
    assert refused(peer, worker)


@pytest.mark.parametrize("op", [OP_COUNT + 99, OP_MAP_CUSTOM1], ids=["unknown", "custom-function-pointer"])
def test_an_op_outside_the_allow_list_is_refused(peer, worker, op):
    buf, base = peer.alloc()
    node = tensor(2, buf, base + 64, op=op, src=(1,))
    peer.compute([2], [tensor(1, buf, base), node])
    assert refused(peer, worker)


def test_an_op_over_types_its_kernel_cannot_read_is_refused(peer, worker):
    """MUL_MAT over I32: the CPU backend's supports_op takes it, and its kernel has no dot product for I32."""
    buf, base = peer.alloc()
    a = tensor(1, buf, base, ne=(4, 1), type_=I32)
    b = tensor(2, buf, base + 64, ne=(4, 1))
    mul_mat = tensor(3, buf, base + 128, ne=(1, 1), op=OP_MUL_MAT, src=(1, 2))
    peer.compute([3], [a, b, mul_mat])
    assert refused(peer, worker)


def test_op_params_its_kernel_asserts_on_are_refused(peer, worker):
    """RMS_NORM with a negative epsilon: the CPU kernel's GGML_ASSERT ended the worker."""
    buf, base = peer.alloc()
    (eps,) = struct.unpack("<i", struct.pack("<f", -1.0))
    norm = tensor(2, buf, base + 64, op=OP_RMS_NORM, op_params=(eps,), src=(1,))
    peer.compute([2], [tensor(1, buf, base), norm])
    assert refused(peer, worker)


def test_a_glu_with_a_negative_sub_op_is_refused(peer, worker):
    """GLU's sub-op is op_params[0]: a negative one passed a range check on the (unsigned) enum, and the refusal's
    own log line indexed ggml's name table with it (SIGSEGV)."""
    buf, base = peer.alloc()
    glu = tensor(2, buf, base + 64, ne=(2,), op=OP_GLU, op_params=(-4096,), src=(1,))
    peer.compute([2], [tensor(1, buf, base, ne=(4,), type_=I32), glu])
    assert refused(peer, worker)


def test_strides_its_kernel_asserts_on_are_refused(peer, worker):
    """SCALE of a transposed view (rows contiguous, the whole not): the CPU kernel asserts both are contiguous."""
    buf, base = peer.alloc()
    transposed = tensor(1, buf, base, ne=(2, 2), nb=(4, 16, 32, 32))
    scale = tensor(2, buf, base + 64, ne=(2, 2), nb=(4, 16, 32, 32), op=OP_SCALE, op_params=(0x3F800000,),
                   src=(1,))
    peer.compute([2], [transposed, scale])
    assert refused(peer, worker)


def test_a_new_client_never_reads_what_the_last_one_left(worker):
    """Freed buffers were not cleared: a new client's allocation at the same address returned all 1024 of the
    last client's 64-byte blocks."""
    size = 1024 * 64
    secret = bytes(range(1, 65)) * 1024
    first = Peer(worker.endpoint)
    buf, base = first.alloc(size)
    whole = tensor(1, buf, base, ne=(size // 4,))
    first.set_tensor(whole, secret)
    assert first.get_tensor(whole, size) == secret
    first.close()  # the worker frees its buffers
    second = Peer(worker.endpoint)
    buf, base = second.alloc(size)
    try:
        assert second.get_tensor(tensor(1, buf, base, ne=(size // 4,)), size) == bytes(size)
    finally:
        second.close()


def test_an_idle_peer_before_its_handshake_does_not_hold_the_worker(worker):
    """A peer that connects and says nothing is closed after --timeout (2 s here); the next client is served."""
    host, _, port = worker.endpoint.partition(":")
    with socket.create_connection((host, int(port))):
        start = time.monotonic()
        Peer(worker.endpoint, timeout=20).close()
        assert time.monotonic() - start < 10


# -- the link's secret (patch 0023) --------------------------------------------------------------------------------


def test_hmac_sha256_of_the_patch_matches_python():
    """ggml takes no crypto dependency: patch 0023 carries its own SHA-256 and HMAC. Keys shorter than, equal to
    and longer than the block (hashed first); messages around the padding boundaries (55, 56, 64 bytes)."""
    native = rpc._proc("ggml_backend_rpc_hmac_sha256",
                       "void (*)(const uint8_t *, size_t, const uint8_t *, size_t, uint8_t *)")
    for key_len in (0, 1, 16, 63, 64, 65, 200):
        for msg_len in (0, 1, 55, 56, 63, 64, 65, 119, 120, 1000):
            key = bytes((7 * i + 1) % 256 for i in range(key_len))
            msg = bytes((13 * i + 5) % 256 for i in range(msg_len))
            out = ffi.new("uint8_t[32]")
            native(ffi.from_buffer(key), key_len, ffi.from_buffer(msg), msg_len, out)
            assert bytes(out) == hmac.new(key, msg, hashlib.sha256).digest(), (key_len, msg_len)


@pytest.fixture
def secret_file(tmp_path):
    path = tmp_path / "rpc-secret"
    path.write_bytes(b"a shared secret of the link\n")
    path.chmod(0o600)
    return path


@pytest.fixture
def locked_worker(secret_file, monkeypatch):
    """A worker that asks for the secret; this process holds it too (PYLLAMA90A_RPC_SECRET_FILE)."""
    monkeypatch.setenv(rpc.SECRET_FILE_ENV, str(secret_file))
    with WorkerProcess(extra=("--timeout", "2", "--secret-file", str(secret_file))) as w:
        yield w


class Handshake:
    """A raw client of a worker that asks for the secret: HELLO, then its challenge."""

    def __init__(self, endpoint: str) -> None:
        host, _, port = endpoint.partition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=30)
        self.sock.sendall(struct.pack("<BQ", HELLO, 24) + bytes(24))
        reply = recv_exact(self.sock, 8 + 28)
        assert reply[8 + 3] & 1  # the worker asks for the secret
        (size,) = struct.unpack("<Q", recv_exact(self.sock, 8))
        self.server_nonce = recv_exact(self.sock, size)

    def answer(self, client_nonce: bytes, mac: bytes) -> bytes | None:
        """The worker's answer to ours; None when it closed the connection."""
        self.sock.sendall(struct.pack("<Q", 64) + client_nonce + mac)
        try:
            (size,) = struct.unpack("<Q", recv_exact(self.sock, 8))
            return recv_exact(self.sock, size)
        except OSError:
            return None


def test_a_worker_with_a_secret_serves_its_holders_only(locked_worker, secret_file, model_path):
    secret = secret_file.read_bytes().strip()
    nonce = bytes(range(32))
    # without the secret: closed right after HELLO (the next command is taken as the answer, and fails)
    peer = Peer.__new__(Peer)
    host, _, port = locked_worker.endpoint.partition(":")
    peer.sock = socket.create_connection((host, int(port)), timeout=30)
    peer.send(HELLO, bytes(24))
    recv_exact(peer.sock, 8 + 28 + 8 + 32)  # HELLO's reply, the challenge
    assert refused(peer, locked_worker)
    # another secret
    assert Handshake(locked_worker.endpoint).answer(nonce, rpc.auth_mac(b"x" * 32, "client", bytes(32), nonce)) is None
    # the right one: the worker proves it holds it too
    first = Handshake(locked_worker.endpoint)
    mac = rpc.auth_mac(secret, "client", first.server_nonce, nonce)
    assert first.answer(nonce, mac) == rpc.auth_mac(secret, "server", first.server_nonce, nonce)
    first.sock.close()
    # a recorded answer does not pass a new challenge (replay)
    second = Handshake(locked_worker.endpoint)
    assert second.server_nonce != first.server_nonce
    assert second.answer(nonce, mac) is None
    # the worker's own answer sent back to it does not pass either (reflection: the labels differ)
    third = Handshake(locked_worker.endpoint)
    assert third.answer(nonce, rpc.auth_mac(secret, "server", third.server_nonce, nonce)) is None
    # ggml's client (libggml-rpc) speaks it: a model loads and generates over the worker
    with pl.Model(model_path, rpc=[locked_worker.endpoint], n_ctx=256, n_threads=1) as model:
        assert model.generate("The capital of France is", max_tokens=3, temperature=0).tokens


def test_a_client_without_the_secret_or_with_another_is_a_load_error(locked_worker, model_path, tmp_path,
                                                                      monkeypatch):
    monkeypatch.delenv(rpc.SECRET_FILE_ENV)
    with pytest.raises(pl.ModelLoadError, match=f"RPC worker {locked_worker.endpoint} asks for the link's secret"):
        pl.Model(model_path, rpc=[locked_worker.endpoint], n_ctx=256)
    other = tmp_path / "other"
    other.write_bytes(b"another secret, 32 bytes long..")
    other.chmod(0o600)
    monkeypatch.setenv(rpc.SECRET_FILE_ENV, str(other))
    with pytest.raises(pl.ModelLoadError, match="refused this process's secret"):
        pl.Model(model_path, rpc=[locked_worker.endpoint], n_ctx=256)
    other.chmod(0o644)
    with pytest.raises(pl.InvalidArgumentError, match="other users may read"):
        pl.Model(model_path, rpc=[locked_worker.endpoint], n_ctx=256)


@contextlib.contextmanager
def fake_worker(hello_flags: int, device_count: int, server_mac: bytes | None = None):
    """A listener on 127.0.0.1 that plays a worker: HELLO (asking for the secret when hello_flags has bit 0, then
    answering with server_mac), DEVICE_COUNT with device_count; one connection after another."""
    def answer(conn: socket.socket, stop: threading.Event) -> None:
        conn.settimeout(5)
        recv_exact(conn, 1 + 8 + 24)
        major, minor, patch = rpc.protocol_version()
        conn.sendall(struct.pack("<Q4B", 28, major, minor, patch, hello_flags) + bytes(24))
        if hello_flags & 1:
            conn.sendall(struct.pack("<Q", 32) + bytes(32))
            recv_exact(conn, 8 + 64)
            conn.sendall(struct.pack("<Q", 32) + (server_mac or bytes(32)))
        while recv_exact(conn, 9)[0] == DEVICE_COUNT:
            conn.sendall(struct.pack("<QI", 4, device_count))

    with loopback_listener(answer) as endpoint:
        yield endpoint


def test_a_spoofed_worker_is_a_load_error_naming_it(model_path, secret_file, monkeypatch):
    """A worker answering DEVICE_COUNT with 2^32-1 made Model(rpc=...) grow past 3 GiB; one that does not hold
    the secret, or asks for none while this process has one, could feed the model what it likes."""
    with fake_worker(0, 2**32 - 1) as endpoint:
        with pytest.raises(pl.ModelLoadError, match=f"RPC worker {endpoint} reports 4294967295 devices"):
            pl.Model(model_path, rpc=[endpoint], n_ctx=256)
        add_server = rpc._proc("ggml_backend_rpc_add_server", "ggml_backend_reg_t (*)(const char *)")
        assert add_server(endpoint.encode()) == ffi.NULL  # ggml's client bounds it too, without the probe
    monkeypatch.setenv(rpc.SECRET_FILE_ENV, str(secret_file))
    with fake_worker(0, 1) as endpoint, pytest.raises(pl.ModelLoadError, match="asks for no secret"):
        pl.Model(model_path, rpc=[endpoint], n_ctx=256)
    with fake_worker(1, 1, bytes(32)) as endpoint, pytest.raises(pl.ModelLoadError, match="does not hold the"):
        pl.Model(model_path, rpc=[endpoint], n_ctx=256)
