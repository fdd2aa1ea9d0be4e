"""ggml-rpc, both ends: connect to workers (their devices join a model's placement) and serve this build's
devices as a worker (pyllama90a.worker).

ggml-rpc is a backend module like the others; its functions are reached through its registry's proc addresses.
Patch 0014 makes a worker that cannot be reached, or that goes away, fail the calls instead of ending this
process, and adds ggml_backend_rpc_connection, the number of this process's connection to a worker (negative once
it is lost), which tells a model which of its workers is gone.

Before ggml connects to a worker, `probe` says hello itself, with a timeout: ggml's own connect has none (a
worker busy with another client, or something else listening on the port, would hang the load forever) and
names a refused connection or a protocol mismatch only in its log. It also speaks patch 0023's authentication
(the link's shared secret, PYLLAMA90A_RPC_SECRET_FILE) and asks DEVICE_COUNT, so that a worker that refuses this
process's secret, asks for none, or reports an absurd number of devices is a ModelLoadError naming it.
"""
from __future__ import annotations

import functools
import hashlib
import hmac
import os
import secrets
import socket
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import InvalidArgumentError, ModelLoadError
from ._ffi import ffi, lib
from .log import NativeCall

if TYPE_CHECKING:  # pragma: no cover
    from .._native import CData  # (only in the stub, _native.pyi)

PROBE_TIMEOUT_S = 10.0
# the wire format of ggml-rpc's HELLO (ggml-rpc.cpp): | command (1 byte) | size (8 bytes) | payload |, payload the
# client's transport capabilities (zeros: plain TCP); the reply | size (8) | major minor patch pad | capabilities |
# (the one home of the handshake's format: pyllama90a.fuzz.rpc_protocol and the tests take these from here)
CMD_HELLO = 14
CMD_DEVICE_COUNT = 15
CONN_CAPS_SIZE = 24
_HELLO_REPLY_SIZE = 4 + CONN_CAPS_SIZE
# patch 0023: the HELLO reply's 4th byte has this bit when the worker asks for the secret; then | size | its nonce |,
# the client's | size | nonce | HMAC |, the worker's | size | HMAC | (HMAC-SHA256 over a label and both nonces)
HELLO_FLAG_AUTH = 1
NONCE_SIZE = _MAC_SIZE = 32
MAX_WORKER_DEVICES = 64  # what patch 0023's client believes a worker's DEVICE_COUNT up to
SECRET_FILE_ENV = "PYLLAMA90A_RPC_SECRET_FILE"
MIN_SECRET_BYTES, MAX_SECRET_BYTES = 16, 4096


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def protocol_version() -> tuple[int, int, int]:
    """The ggml-rpc protocol version this build speaks."""
    return lib.RPC_PROTO_MAJOR_VERSION, lib.RPC_PROTO_MINOR_VERSION, lib.RPC_PROTO_PATCH_VERSION


@functools.cache  # asked after every decode of a model with workers (check_workers): look it up once
def _proc(name: str, ctype: str) -> CData:
    reg = lib.ggml_backend_reg_by_name(b"RPC")
    address = ffi.NULL if reg == ffi.NULL else lib.ggml_backend_reg_get_proc_address(reg, name.encode())
    if address == ffi.NULL:
        raise ModelLoadError(f"this build of pyllama90a has no ggml-rpc backend ({name} not found): rebuild it with "
                             "the project's CMakeLists.txt, which turns GGML_RPC on")
    return ffi.cast(ctype, address)


def connection(endpoint: Endpoint) -> int:
    """The number of this process's current connection to the worker at `endpoint` (numbered from 1) while it
    works; minus that number once it is lost; 0 when there is none."""
    current = _proc("ggml_backend_rpc_connection", "int64_t (*)(const char *)")
    return int(current(str(endpoint).encode()))


def recv_exact(sock: socket.socket, n: int) -> bytes:
    """`n` bytes from `sock`; ConnectionError when the peer closes the connection first."""
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the worker closed the connection during the handshake")
        data += chunk
    return data


def read_secret(path: str, name: str) -> bytes:
    """The link's secret: the bytes of the file at `path`, without a trailing newline. InvalidArgumentError naming
    `name` (the flag or variable that gave the path) when it cannot be read, other users may read it, or it holds
    fewer than MIN_SECRET_BYTES or more than MAX_SECRET_BYTES."""
    try:
        if os.stat(path).st_mode & 0o077:
            raise InvalidArgumentError(f"{name}: other users may read {path} (chmod 600 it)", param=name)
        with open(path, "rb") as f:
            data = f.read(MAX_SECRET_BYTES + 3)
    except OSError as e:
        raise InvalidArgumentError(f"{name}: cannot read {path}: {e.strerror or e}", param=name) from None
    secret = data.rstrip(b"\r\n")
    if not MIN_SECRET_BYTES <= len(secret) <= MAX_SECRET_BYTES:
        raise InvalidArgumentError(f"{name}: the secret in {path} has {len(secret)} bytes; it needs "
                                   f"{MIN_SECRET_BYTES}-{MAX_SECRET_BYTES} (e.g. `openssl rand -hex 32`)", param=name)
    return secret


def client_secret() -> bytes | None:
    """This process's secret for the workers it connects to: the file PYLLAMA90A_RPC_SECRET_FILE names (None:
    unset)."""
    path = os.environ.get(SECRET_FILE_ENV)
    return read_secret(path, SECRET_FILE_ENV) if path else None


def use_secret(secret: bytes | None) -> None:
    """Give ggml-rpc the link's secret (None: none): every later connection, as a client or as the worker, uses
    it (patch 0023)."""
    set_secret = _proc("ggml_backend_rpc_set_secret", "void (*)(const uint8_t *, size_t)")
    data = secret or b""
    set_secret(ffi.from_buffer(data), len(data))


def auth_mac(secret: bytes, side: str, server_nonce: bytes, client_nonce: bytes) -> bytes:
    """One side's answer (side "client" or "server"): HMAC-SHA256(secret, label | server nonce | client nonce); the
    labels keep either answer from passing for the other's."""
    return hmac.new(secret, f"pyllama90a-rpc {side}".encode() + server_nonce + client_nonce, hashlib.sha256).digest()


def _message(sock: socket.socket, size: int, what: str) -> bytes:
    (got,) = struct.unpack("<Q", recv_exact(sock, 8))
    if got != size:
        raise ConnectionError(f"its {what} has {got} bytes, not {size}")
    return recv_exact(sock, size)


def _authenticate(sock: socket.socket, endpoint: Endpoint, asked: bool, secret: bytes | None) -> None:
    if asked and secret is None:
        raise ModelLoadError(f"RPC worker {endpoint} asks for the link's secret: set {SECRET_FILE_ENV} to a file "
                             "that holds it")
    if not asked and secret is not None:
        raise ModelLoadError(f"RPC worker {endpoint} asks for no secret, and {SECRET_FILE_ENV} is set: refused (a "
                             "worker started without --secret-file, or not the worker meant)")
    if secret is None:
        return
    server_nonce = _message(sock, NONCE_SIZE, "challenge")
    client_nonce = secrets.token_bytes(NONCE_SIZE)
    sock.sendall(struct.pack("<Q", NONCE_SIZE + _MAC_SIZE) + client_nonce
                 + auth_mac(secret, "client", server_nonce, client_nonce))
    try:
        answer = _message(sock, _MAC_SIZE, "answer")
    except ConnectionError:
        raise ModelLoadError(f"RPC worker {endpoint} refused this process's secret ({SECRET_FILE_ENV}): not the "
                             "worker's") from None
    if not hmac.compare_digest(answer, auth_mac(secret, "server", server_nonce, client_nonce)):
        raise ModelLoadError(f"RPC worker {endpoint} does not hold the link's secret: refused")


def probe(endpoint: Endpoint, timeout: float | None = None, secret: bytes | None = None) -> tuple[int, int, int]:
    """The protocol version the worker at `endpoint` answers HELLO with; ModelLoadError saying why when there is
    no worker, it does not answer within `timeout`, it speaks a version this build cannot use (ggml's rule:
    the same major version, a minor version no newer than ours), the two sides' secrets (`secret`: this one's)
    do not match, or it reports no devices or more than MAX_WORKER_DEVICES. timeout: PROBE_TIMEOUT_S by default."""
    timeout = PROBE_TIMEOUT_S if timeout is None else timeout
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout) as sock:
            sock.sendall(struct.pack("<BQ", CMD_HELLO, CONN_CAPS_SIZE) + bytes(CONN_CAPS_SIZE))
            (size,) = struct.unpack("<Q", recv_exact(sock, 8))
            if size != _HELLO_REPLY_SIZE:
                raise ConnectionError(f"its reply to HELLO has {size} bytes, not {_HELLO_REPLY_SIZE}: not a "
                                      "ggml-rpc worker, or one of another protocol generation")
            major, minor, patch, flags = recv_exact(sock, size)[:4]
            _check_version(endpoint, major, minor, patch)
            _authenticate(sock, endpoint, bool(flags & HELLO_FLAG_AUTH), secret)
            sock.sendall(struct.pack("<BQ", CMD_DEVICE_COUNT, 0))
            (devices,) = struct.unpack("<I", _message(sock, 4, "device count"))
    except TimeoutError:
        raise ModelLoadError(f"RPC worker {endpoint} did not answer within {timeout:g} s (a worker serves one "
                             "client at a time: is another process using it? is something else listening on that "
                             "port?)") from None
    except OSError as e:  # ConnectionError included
        raise ModelLoadError(f"cannot reach RPC worker {endpoint}: {e.strerror or e}") from None
    if not 0 < devices <= MAX_WORKER_DEVICES:
        raise ModelLoadError(f"RPC worker {endpoint} reports {devices} devices; a worker may have 1 to "
                             f"{MAX_WORKER_DEVICES}: not a pyllama90a worker, or a hostile one")
    return major, minor, patch


def _check_version(endpoint: Endpoint, major: int, minor: int, patch: int) -> None:
    ours = protocol_version()
    if major != ours[0] or minor > ours[1]:
        raise ModelLoadError(f"RPC worker {endpoint} speaks protocol {major}.{minor}.{patch}, this build "
                             f"{ours[0]}.{ours[1]}.{ours[2]} (the major versions must match and the worker's minor "
                             "be no newer): run a worker from the same pyllama90a build")
    if patch != ours[2]:  # ggml accepts it, but the ops (their numbering follows GGML_OP_COUNT) may differ
        raise ModelLoadError(f"RPC worker {endpoint} speaks protocol {major}.{minor}.{patch}, this build "
                             f"{ours[0]}.{ours[1]}.{ours[2]}: the patch version follows ggml's list of operations, "
                             "so a graph could run other ops there; run a worker from the same pyllama90a build")


def worker_devices(endpoint: Endpoint) -> list[CData]:
    """The ggml devices (ggml_backend_dev_t) of the worker at `endpoint`, connecting to it unless this process
    already is; ModelLoadError when it cannot be reached or refuses."""
    secret = client_secret()
    use_secret(secret)
    if connection(endpoint) <= 0:  # probing over a live connection would wait for ourselves
        probe(endpoint, secret=secret)
    add_server = _proc("ggml_backend_rpc_add_server", "ggml_backend_reg_t (*)(const char *)")
    with NativeCall() as call:
        reg = add_server(str(endpoint).encode())
    call.check(reg != ffi.NULL, ModelLoadError, f"ggml-rpc could not use worker {endpoint}")
    return [lib.ggml_backend_reg_dev_get(reg, i) for i in range(lib.ggml_backend_reg_dev_count(reg))]


@dataclass(frozen=True)
class ServerLimits:
    """What patch 0022's server allows a client. timeout_s: a client silent this long during the handshake or
    inside a message is disconnected; idle_timeout_s: the same between commands (0: never); cache_max_bytes: what
    the --cache directory may hold (a tensor that would not fit is not saved)."""
    timeout_s: float = 30.0
    idle_timeout_s: float = 0.0
    cache_max_bytes: int = 8 << 30


def serve(endpoint: Endpoint, devices: list[CData], n_threads: int, cache_dir: bytes | None,
          limits: ServerLimits = ServerLimits(), secret: bytes | None = None) -> None:
    """Serve `devices` (ggml_backend_dev_t) to RPC clients on `endpoint`, one client at a time, to those that hold
    `secret` when one is given; returns only when the server could not start (ggml printed why)."""
    use_secret(secret)
    set_limits = _proc("ggml_backend_rpc_server_limits", "void (*)(uint64_t, uint64_t, uint64_t)")
    set_limits(round(limits.timeout_s * 1000), round(limits.idle_timeout_s * 1000), limits.cache_max_bytes)
    start = _proc("ggml_backend_rpc_start_server",
                  "void (*)(const char *, const char *, size_t, size_t, ggml_backend_dev_t *)")
    array = ffi.new("ggml_backend_dev_t[]", devices)
    start(str(endpoint).encode(), cache_dir if cache_dir is not None else ffi.NULL, n_threads, len(devices), array)
