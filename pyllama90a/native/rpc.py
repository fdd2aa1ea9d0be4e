"""ggml-rpc, both ends: connect to workers (their devices join a model's placement) and serve this build's
devices as a worker (pyllama90a.worker).

ggml-rpc is a backend module like the others; its functions are reached through its registry's proc addresses.
Patch 0014 makes a worker that cannot be reached, or that goes away, fail the calls instead of ending this
process, and adds ggml_backend_rpc_connection, the number of this process's connection to a worker (negative once
it is lost), which tells a model which of its workers is gone.

Before ggml connects to a worker, `probe` says hello itself, with a timeout: ggml's own connect has none (a
worker busy with another client, or something else listening on the port, would hang the load forever) and
names a refused connection or a protocol mismatch only in its log.
"""
from __future__ import annotations

import functools
import socket
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._ffi import ffi, lib
from .._log import NativeCall
from ..errors import ModelLoadError

if TYPE_CHECKING:  # pragma: no cover
    from .._native import CData  # (only in the stub, _native.pyi)

PROBE_TIMEOUT_S = 10.0
# the wire format of ggml-rpc's HELLO (ggml-rpc.cpp): | command (1 byte) | size (8 bytes) | payload |, payload the
# client's transport capabilities (zeros: plain TCP); the reply | size (8) | major minor patch pad | capabilities |
_RPC_CMD_HELLO = 14
_CONN_CAPS_SIZE = 24
_HELLO_REPLY_SIZE = 4 + _CONN_CAPS_SIZE


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


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("the worker closed the connection during the handshake")
        data += chunk
    return data


def probe(endpoint: Endpoint, timeout: float | None = None) -> tuple[int, int, int]:
    """The protocol version the worker at `endpoint` answers HELLO with; ModelLoadError saying why when there is
    no worker, it does not answer within `timeout`, or it speaks a version this build cannot use (ggml's rule:
    the same major version, a minor version no newer than ours). timeout: PROBE_TIMEOUT_S by default."""
    timeout = PROBE_TIMEOUT_S if timeout is None else timeout
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout) as sock:
            sock.sendall(struct.pack("<BQ", _RPC_CMD_HELLO, _CONN_CAPS_SIZE) + bytes(_CONN_CAPS_SIZE))
            (size,) = struct.unpack("<Q", _recv_exact(sock, 8))
            if size != _HELLO_REPLY_SIZE:
                raise ConnectionError(f"its reply to HELLO has {size} bytes, not {_HELLO_REPLY_SIZE}: not a "
                                      "ggml-rpc worker, or one of another protocol generation")
            major, minor, patch = _recv_exact(sock, size)[:3]
    except TimeoutError:
        raise ModelLoadError(f"RPC worker {endpoint} did not answer within {timeout:g} s (a worker serves one "
                             "client at a time: is another process using it? is something else listening on that "
                             "port?)") from None
    except OSError as e:  # ConnectionError included
        raise ModelLoadError(f"cannot reach RPC worker {endpoint}: {e.strerror or e}") from None
    ours = protocol_version()
    if major != ours[0] or minor > ours[1]:
        raise ModelLoadError(f"RPC worker {endpoint} speaks protocol {major}.{minor}.{patch}, this build "
                             f"{ours[0]}.{ours[1]}.{ours[2]} (the major versions must match and the worker's minor "
                             "be no newer): run a worker from the same pyllama90a build")
    if patch != ours[2]:  # ggml accepts it, but the ops (their numbering follows GGML_OP_COUNT) may differ
        raise ModelLoadError(f"RPC worker {endpoint} speaks protocol {major}.{minor}.{patch}, this build "
                             f"{ours[0]}.{ours[1]}.{ours[2]}: the patch version follows ggml's list of operations, "
                             "so a graph could run other ops there; run a worker from the same pyllama90a build")
    return major, minor, patch


def worker_devices(endpoint: Endpoint) -> list[CData]:
    """The ggml devices (ggml_backend_dev_t) of the worker at `endpoint`, connecting to it unless this process
    already is; ModelLoadError when it cannot be reached or refuses."""
    if connection(endpoint) <= 0:  # probing over a live connection would wait for ourselves
        probe(endpoint)
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
          limits: ServerLimits = ServerLimits()) -> None:
    """Serve `devices` (ggml_backend_dev_t) to RPC clients on `endpoint`, one client at a time; returns only when
    the server could not start (ggml printed why)."""
    set_limits = _proc("ggml_backend_rpc_server_limits", "void (*)(uint64_t, uint64_t, uint64_t)")
    set_limits(round(limits.timeout_s * 1000), round(limits.idle_timeout_s * 1000), limits.cache_max_bytes)
    start = _proc("ggml_backend_rpc_start_server",
                  "void (*)(const char *, const char *, size_t, size_t, ggml_backend_dev_t *)")
    array = ffi.new("ggml_backend_dev_t[]", devices)
    start(str(endpoint).encode(), cache_dir if cache_dir is not None else ffi.NULL, n_threads, len(devices), array)
