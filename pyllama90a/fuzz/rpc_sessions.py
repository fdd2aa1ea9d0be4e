"""The RPC fuzzer's corpus: real sessions between a Model and a worker, recorded through a proxy on loopback.

`python -m pyllama90a.fuzz.rpc_sessions DIR` starts a worker, puts a recording TCP proxy in front of it, loads the
default model with `rpc=[proxy]` and decodes a few tokens (SESSIONS: the whole model on the worker, or two of its
layers, with other context and batch sizes). Each connection's two byte streams are kept, SET_TENSOR's data cut
to MAX_DATA bytes (the weights are ~100 MB; a replay needs their framing, not their values). A session file is
| b"RPCS1" | u64 length | client-to-worker bytes | u64 length | worker-to-client bytes |.

Session pairs each request with its reply, and from ALLOC_BUFFER and BUFFER_GET_BASE replies it knows the
recorded buffer handles and base addresses, numbered in allocation order, so that a replay can put the live
worker's addresses in their place.
"""
from __future__ import annotations

import contextlib
import functools
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .rpc_protocol import ALLOC_BUFFER, BUFFER_GET_BASE, REPLIES, SET_TENSOR, Message, split_replies, split_requests

MAGIC = b"RPCS1"
MAX_DATA = 64  # bytes of SET_TENSOR data kept per request
# the whole model on the worker; and two layers of it (the rest on this CPU), whose buffers and graphs are a tenth
# of the size: most cases replay those, so that a case costs a fraction of a second
SESSIONS: dict[str, dict[str, Any]] = {
    "load-generate": {"n_ctx": 256, "prompt": "The capital of France is", "max_tokens": 4},
    "load-batch": {"n_ctx": 512, "n_batch": 64, "n_gpu_layers": 2, "prompt": "One two three four five six seven "
                   "eight nine ten eleven twelve thirteen fourteen fifteen sixteen", "max_tokens": 2},
    "two-layers": {"n_ctx": 256, "n_gpu_layers": 2, "prompt": "Hello, my name is", "max_tokens": 3}}


@dataclass
class Session:
    name: str
    requests: list[Message]
    replies: dict[int, bytes]  # request index -> its reply
    handles: dict[int, int] = field(default_factory=dict)  # recorded buffer handle -> allocation number
    bases: list[tuple[int, int]] = field(default_factory=list)  # allocation number -> (recorded base, size)

    def __post_init__(self) -> None:
        sizes: list[int] = []
        for i, m in enumerate(self.requests):
            reply = self.replies.get(i)
            if m.cmd == ALLOC_BUFFER and reply is not None and len(reply) >= 16:
                handle, size = struct.unpack_from("<QQ", reply)
                if handle:
                    self.handles[handle] = len(sizes)
                    sizes.append(size)
        self.bases = [(0, s) for s in sizes]
        for i, m in enumerate(self.requests):
            reply = self.replies.get(i)
            if m.cmd == BUFFER_GET_BASE and reply is not None and len(reply) >= 8 and len(m.payload) >= 8:
                k = self.handles.get(struct.unpack_from("<Q", m.payload)[0])
                if k is not None:
                    self.bases[k] = (struct.unpack_from("<Q", reply)[0], self.bases[k][1])

    def buffer_of(self, address: int) -> tuple[int, int] | None:
        """(allocation number, offset) of a recorded data address inside a recorded buffer."""
        for k, (base, size) in enumerate(self.bases):
            if base and base <= address < base + max(size, 1):
                return k, address - base
        return None

    def indices(self, *cmds: int) -> list[int]:
        return [i for i, m in enumerate(self.requests) if m.cmd in cmds]


def parse_session(name: str, c2w: bytes, w2c: bytes) -> Session:
    requests = list(split_requests(c2w))
    answered = [i for i, m in enumerate(requests) if m.cmd in REPLIES]
    return Session(name, requests, dict(zip(answered, split_replies(w2c), strict=False)))


def _cut(c2w: bytes) -> bytes:
    out = bytearray()
    for m in split_requests(c2w):
        if m.cmd == SET_TENSOR and len(m.payload) > 305 + MAX_DATA:
            m = Message(m.cmd, m.payload[:305 + MAX_DATA])
        out += m.frame()
    return bytes(out)


def write_session(path: Path, c2w: bytes, w2c: bytes) -> None:
    c2w = _cut(c2w)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(MAGIC + struct.pack("<Q", len(c2w)) + c2w + struct.pack("<Q", len(w2c)) + w2c)
    os.replace(tmp, path)


@functools.cache
def load_session(path: str) -> Session:
    data = Path(path).read_bytes()
    if not data.startswith(MAGIC):
        raise ValueError(f"{path} is not an RPC session recording")
    at = len(MAGIC)
    (n,) = struct.unpack_from("<Q", data, at)
    c2w = data[at + 8:at + 8 + n]
    at += 8 + n
    (n,) = struct.unpack_from("<Q", data, at)
    return parse_session(Path(path).stem, c2w, data[at + 8:at + 8 + n])


class RecordingProxy:
    """Accepts on an ephemeral loopback port, forwards each connection to `target` and keeps both streams."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.streams: list[tuple[bytearray, bytearray]] = []
        self.threads: list[threading.Thread] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            pair = (bytearray(), bytearray())
            self.streams.append(pair)
            for src, dst, keep in ((client, upstream, pair[0]), (upstream, client, pair[1])):
                t = threading.Thread(target=self._pump, args=(src, dst, keep), daemon=True)
                t.start()
                self.threads.append(t)

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, keep: bytearray) -> None:
        while True:
            try:
                data = src.recv(1 << 20)
            except OSError:
                data = b""
            if not data:
                for s in (dst, src):
                    with contextlib.suppress(OSError):
                        s.shutdown(socket.SHUT_RDWR)
                return
            keep += data
            try:
                dst.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self.listener.close()
        for t in self.threads:
            t.join(timeout=10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, timeout: float, pid: int | None = None) -> None:
    """Until something listens on the loopback port; RuntimeError at once if process `pid` (a child) ends first."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if pid is not None and os.waitpid(pid, os.WNOHANG)[0]:
                raise RuntimeError(f"the worker (pid {pid}) ended before it listened on port {port}") from None
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout:g} s") from None
            time.sleep(0.01)


def record(out_dir: Path, worker_args: list[str] | None = None) -> list[Path]:
    """Record SESSIONS into `out_dir` (one file per session: the connection that carried the model)."""
    import pyllama90a as pl

    out_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    worker = subprocess.Popen([sys.executable, "-m", "pyllama90a.worker", "--port", str(port), "--threads", "2",
                               *(worker_args or [])], stdout=subprocess.DEVNULL)
    paths = []
    try:
        wait_for_port(port, 60)
        time.sleep(0.2)  # the readiness probe's connection is served and closed first
        for name, params in SESSIONS.items():
            proxy = RecordingProxy(port)
            kwargs = {k: v for k, v in params.items() if k in ("n_ctx", "n_batch", "n_gpu_layers")}
            with pl.Model(pl.default_model(), rpc=[f"127.0.0.1:{proxy.port}"], n_threads=2, **kwargs) as model:
                model.generate(str(params["prompt"]), max_tokens=int(params["max_tokens"]), temperature=0)
            time.sleep(0.3)
            proxy.close()
            c2w, w2c = max(proxy.streams, key=lambda s: len(s[0]))  # not the probe's HELLO
            path = out_dir / f"{name}.rpcs"
            write_session(path, bytes(c2w), bytes(w2c))
            paths.append(path)
    finally:
        worker.kill()
        worker.wait()
    return paths


def corpus_dir() -> Path:
    home = Path(os.environ.get("PYLLAMA90A_HOME") or Path.home() / ".cache" / "pyllama90a")
    return home / "fuzz" / "rpc-corpus"


def ensure_corpus(directory: Path | None = None) -> list[Path]:
    """The recorded sessions, recording them first (in a fresh interpreter) when they are missing."""
    directory = directory or corpus_dir()
    paths = [directory / f"{name}.rpcs" for name in SESSIONS]
    if not all(p.exists() for p in paths):
        subprocess.run([sys.executable, "-m", "pyllama90a.fuzz.rpc_sessions", str(directory)], check=True,
                       timeout=600)
    return paths


if __name__ == "__main__":
    for p in record(Path(sys.argv[1])):
        s = load_session(str(p))
        print(f"{p}: {len(s.requests)} requests, {len(s.bases)} buffers, {p.stat().st_size} bytes")
