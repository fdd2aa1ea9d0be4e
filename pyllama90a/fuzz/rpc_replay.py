"""One RPC fuzz case in the runner's child: start a worker, play the case's requests to it, then check it.

The worker is the real one (`pyllama90a.worker.main`, forked from the child so that it starts in milliseconds),
or another command (e.g. an AddressSanitizer build of ggml's rpc-server). How it runs is the case's
"model_args" (the spec key the runner keeps with a reproducer): see Settings; generate_rpc_case fills it from the
PYLLAMA90A_FUZZ_RPC_* environment variables. The case's ops (rpc_cases describes them) run in order; a request
the worker refuses closes that connection, and the ops after it on that connection are skipped: that is what a
refusal should look like.

Then a fresh client says HELLO, allocates buffers of the sizes the case allocated (and 4 KiB), reads each whole and
requires zeros: a nonzero byte is another client's data (issue 33, item 3). The outcome is the runner's:
    the worker died by a signal        the child ends by the same signal ("crash", with the worker's stderr)
    the worker exited                  the child exits with its code ("crash")
    the worker does not answer the check in time  the child waits to be killed ("hang at check")
    data crossed, or the worker's RSS went too high  WorkerDefect ("leaked", a defect)
"""
from __future__ import annotations

import os
import signal
import struct
import sys
import time
from pathlib import Path
from typing import Any

from .rpc_protocol import (
    ALLOC_BUFFER,
    BUFFER_GET_BASE,
    FIELDS,
    FREE_BUFFER,
    GET_TENSOR,
    GRAPH_COMPUTE,
    HELLO,
    SCALARS,
    Client,
    Closed,
    Message,
    graph_layout,
    pack_field,
    tensor_bytes,
    tensor_field,
    tensor_offsets,
)
from .rpc_sessions import SESSIONS, Session, corpus_dir, free_port, load_session
from .rpc_worker import HOST, RssWatch, Settings, WorkerDefect, mirror, reap, start_worker
from .runner import Stage

CHECK_MAX_BYTES = 16 << 20  # the largest fresh buffer the check reads whole
TYPE_I8 = 24

# -- playing the ops ------------------------------------------------------------------------------------

class Replay:
    """The live side of a case: its connections, the buffers the worker gave it, and the recorded sessions whose
    requests it plays with the live addresses in place of the recorded ones."""

    def __init__(self, port: int, sessions: dict[str, Session], reply_timeout: float,
                 secret: bytes | None = None) -> None:
        self.port, self.sessions, self.reply_timeout, self.secret = port, sessions, reply_timeout, secret
        self.live: list[list[int]] = []  # allocation order -> [handle, size, base]
        self.recorded_to_live: dict[tuple[str, int], int] = {}
        self.conns: list[Client | None] = []
        self.current = -1
        self.held: list[Client] = []  # connections kept open through the check (idle peers)
        self.sizes: set[int] = set()
        self.refused = 0

    # symbolic values: {"buf": k}, {"base": k, "off": n}, {"base_diff": [k, j], "off": n}, {"size": k}; "shift": s
    # takes the bits from s up (the high half of a 64-bit address in two int32 op_params)
    def value(self, v: Any) -> int:
        if isinstance(v, int):
            return v
        return self._symbol(v) >> int(v.get("shift", 0))

    def _symbol(self, v: dict[str, Any]) -> int:
        def alloc(k: int) -> list[int]:
            return self.live[k] if -len(self.live) <= k < len(self.live) else [0, 0, 0]
        off = int(v.get("off", 0))
        if "buf" in v:
            return alloc(v["buf"])[0] + off
        if "base" in v:
            return alloc(v["base"])[2] + off
        if "size" in v:
            return alloc(v["size"])[1] + off
        if "base_diff" in v:
            k, j = v["base_diff"]
            return alloc(j)[2] - alloc(k)[2] + off
        raise ValueError(f"unknown value {v!r}")

    def connect(self, hello: bool = True) -> None:
        try:
            client = Client(HOST, self.port, self.reply_timeout)
            if hello:
                client.hello(self.secret)
        except (OSError, Closed):
            client = None
        self.conns.append(client)
        self.current = len(self.conns) - 1

    def close(self) -> None:
        if 0 <= self.current < len(self.conns) and self.conns[self.current] is not None:
            self.conns[self.current].close()  # type: ignore[union-attr]
            self.conns[self.current] = None
        open_ = [i for i, c in enumerate(self.conns) if c is not None]
        self.current = open_[-1] if open_ else -1

    def send(self, message: Message) -> bytes | None:
        client = self.conns[self.current] if 0 <= self.current < len(self.conns) else None
        if client is None:
            return None
        try:
            reply = client.send(message)
        except (Closed, TimeoutError):  # refused (closed), or still busy / waiting for bytes we never send
            self.refused += 1
            client.close()
            self.conns[self.current] = None
            return None
        if message.cmd == ALLOC_BUFFER and reply is not None and len(reply) >= 16:
            handle, size = struct.unpack_from("<QQ", reply)
            if handle:
                self.live.append([handle, size, 0])
                self.sizes.add(size)
                base = self.send(Message(BUFFER_GET_BASE, struct.pack("<Q", handle)))
                if base is not None and len(base) >= 8:
                    self.live[-1][2] = struct.unpack_from("<Q", base)[0]
        return reply

    # recorded requests, with the live worker's handles and addresses
    def _live_alloc(self, session: Session, k: int) -> list[int] | None:
        n = self.recorded_to_live.get((session.name, k), k)
        return self.live[n] if n < len(self.live) else None

    def translate(self, session: Session, message: Message) -> Message:
        payload = bytearray(message.payload)
        scalars = SCALARS.get(message.cmd, {})
        if "remote_ptr" in scalars and len(payload) >= 8:
            k = session.handles.get(struct.unpack_from("<Q", payload)[0])
            live = None if k is None else self._live_alloc(session, k)
            if live:
                payload[0:8] = pack_field("Q", live[0])
        for at in tensor_offsets(message.cmd, payload):
            k = session.handles.get(tensor_field(payload, at, "buffer"))
            live = None if k is None else self._live_alloc(session, k)
            if live:
                payload[at + 12:at + 20] = pack_field("Q", live[0])
            found = session.buffer_of(tensor_field(payload, at, "data"))
            live = None if found is None else self._live_alloc(session, found[0])
            if found and live and live[2]:
                payload[at + 220:at + 228] = pack_field("Q", live[2] + found[1])
        return Message(message.cmd, bytes(payload))

    def edit(self, message: Message, edits: list[dict]) -> Message:
        payload, cmd, declared = bytearray(message.payload), message.cmd, message.declared
        for e in edits:
            if "t" in e:
                starts = tensor_offsets(cmd, payload)
                if starts:
                    offset, code, count = FIELDS[e["f"]]
                    at = starts[e["t"] % len(starts)] + offset + (e.get("i", 0) % count) * struct.calcsize(code)
                    payload[at:at + struct.calcsize(code)] = pack_field(code, self.value(e["v"]))
            elif "s" in e and e["s"] in SCALARS.get(cmd, {}):
                at, code = SCALARS[cmd][e["s"]]
                if at + struct.calcsize(code) <= len(payload):
                    payload[at:at + struct.calcsize(code)] = pack_field(code, self.value(e["v"]))
            elif "node" in e and cmd == GRAPH_COMPUTE:
                n_nodes = graph_layout(payload)[0]
                if n_nodes:
                    at = 8 + 8 * (e["node"] % n_nodes)
                    payload[at:at + 8] = pack_field("Q", self.value(e["v"]))
            elif "n_tensors" in e and cmd == GRAPH_COMPUTE:
                at = 8 + 8 * graph_layout(payload)[0]
                if at + 4 <= len(payload):
                    payload[at:at + 4] = pack_field("I", self.value(e["n_tensors"]))
            elif "truncate" in e:
                del payload[e["truncate"] % (len(payload) + 1):]
            elif "byte" in e and payload:
                payload[e["byte"] % len(payload)] = e["v"] & 0xFF
            elif "declared" in e:
                declared = self.value(e["declared"])
            elif "cmd" in e:
                cmd = e["cmd"] & 0xFF
        return Message(cmd, bytes(payload), declared)

    def build(self, parts: list[list[Any]]) -> bytes:
        out = bytearray()
        for part in parts:
            kind = part[0]
            if kind in ("B", "I", "Q", "i"):
                out += pack_field(kind, self.value(part[1]))
            elif kind == "tensor":
                out += self.tensor(part[1])
            elif kind == "graph":
                out += self.graph(part[1])
            elif kind == "fill":
                out += bytes([part[2] & 0xFF]) * part[1]
            elif kind == "hex":
                out += bytes.fromhex(part[1])
        return bytes(out)

    def tensor(self, t: dict[str, Any]) -> bytes:
        return tensor_bytes({k: ([self.value(x) for x in v] if isinstance(v, list) else self.value(v))
                             for k, v in t.items() if k != "name"}, t.get("name", "").encode())

    def graph(self, g: dict[str, Any]) -> bytes:
        tensors = [self.tensor(t) for t in g.get("tensors", [])]
        chain = g.get("chain")  # {"n": depth, "tensor": template}: ids 1..n, each the source of the one before
        if chain:
            template = bytearray(self.tensor(chain["tensor"]))
            for i in range(1, chain["n"] + 1):
                template[0:8] = pack_field("Q", 1000 + i)
                template[124:132] = pack_field("Q", 1000 + i + 1 if i < chain["n"] else 0)
                tensors.append(bytes(template))
        nodes = g.get("nodes", [1])
        return (pack_field("I", g.get("device", 0)) + pack_field("I", len(nodes))
                + b"".join(pack_field("Q", self.value(n)) for n in nodes) + pack_field("I", len(tensors))
                + b"".join(tensors))

    def read_buffer(self, k: int) -> bytes | None:
        """Buffer k's bytes as the worker returns them (None when the connection is gone)."""
        handle, size, base = self.live[k] if -len(self.live) <= k < len(self.live) else (0, 0, 0)
        if not (handle and base and size):
            return None
        return self.send(read_whole_buffer(handle, size, base))

    def expect(self, op: dict[str, Any]) -> None:
        """{"buf": k, "filled": b}: buffer k still holds only b (no other tensor wrote into it); {"buf": k,
        "absent": b}: it holds no run of 16 b (no op read another buffer's bytes into it)."""
        data = self.read_buffer(op["buf"])
        if data is None:
            return  # refused before: nothing ran
        if "filled" in op and data != bytes([op["filled"]]) * len(data):
            raise WorkerDefect("cross-buffer write: a graph changed a buffer none of its tensors is in")
        if "absent" in op and bytes([op["absent"]]) * 16 in data:
            raise WorkerDefect("cross-buffer read: a graph copied another buffer's bytes into its own")

    def run(self, op: dict[str, Any]) -> None:
        kind = op["op"]
        if kind == "send":
            session = self.sessions[op["s"]]
            recorded = session.requests[op["m"] % len(session.requests)]
            if recorded.cmd == HELLO and not op.get("edits"):
                return
            message = self.edit(self.translate(session, recorded), op.get("edits", []))
            n_before = len(self.live)
            self.send(message)
            if recorded.cmd == ALLOC_BUFFER and len(self.live) > n_before:
                k = session.handles.get(struct.unpack_from("<Q", session.replies.get(op["m"], bytes(16)))[0])
                if k is not None:
                    self.recorded_to_live[(session.name, k)] = len(self.live) - 1
        elif kind == "msg":
            message = Message(op["cmd"], self.build(op.get("parts", [])),
                              None if "size" not in op else self.value(op["size"]))
            self.send(message)
        elif kind == "conn":
            self.connect(op.get("hello", True))
        elif kind == "close":
            self.close()
        elif kind == "hold":
            client = self.conns[self.current] if 0 <= self.current < len(self.conns) else None
            if client is not None:
                self.held.append(client)
                self.conns[self.current] = None
                self.current = max((i for i, c in enumerate(self.conns) if c is not None), default=-1)
        elif kind == "idle":
            time.sleep(min(float(op.get("seconds", 0)), 5.0))
        elif kind == "expect":
            self.expect(op)
        elif kind in ("raw", "recv"):  # bytes without a command byte (the challenge's answer), one reply read
            client = self.conns[self.current] if 0 <= self.current < len(self.conns) else None
            try:
                if client is not None and kind == "raw":
                    client.sock.sendall(self.build(op.get("parts", [])))
                elif client is not None:
                    client.recv_msg()
            except (OSError, Closed):
                client.close()  # type: ignore[union-attr]
                self.conns[self.current] = None
        elif kind == "expect_refused":  # a peer that failed the challenge: no command of its may be answered
            if self.send(Message(ALLOC_BUFFER, struct.pack("<IQ", 0, 4096))) is not None:
                raise WorkerDefect("authentication bypassed: a peer that failed the challenge got an answer")
        elif kind == "free_all":
            for handle, _, _ in list(self.live):
                self.send(Message(FREE_BUFFER, struct.pack("<Q", handle)))


# -- the check: a fresh client's fresh buffers hold zeros ---------------------------------------------

def read_whole_buffer(handle: int, size: int, base: int) -> Message:
    """GET_TENSOR of a buffer's every byte (one I8 row)."""
    whole = tensor_bytes({"type": TYPE_I8, "buffer": handle, "ne": [size, 1, 1, 1], "nb": [1, size, size, size],
                          "data": base})
    return Message(GET_TENSOR, whole + struct.pack("<QQ", 0, size))


def check_fresh_buffers(port: int, sizes: set[int], timeout: float, secret: bytes | None = None) -> None:
    client = Client(HOST, port, timeout)
    try:
        client.hello(secret)
        for size in sorted({4096, *(s for s in sizes if 0 < s <= CHECK_MAX_BYTES)})[-4:]:
            reply = client.send(Message(ALLOC_BUFFER, struct.pack("<IQ", 0, size)))
            assert reply is not None
            (handle,) = struct.unpack_from("<Q", reply)
            if not handle:
                raise WorkerDefect(f"the check could not allocate {size} bytes")
            base = client.send(Message(BUFFER_GET_BASE, struct.pack("<Q", handle)))
            assert base is not None
            (address,) = struct.unpack_from("<Q", base)
            data = client.send(read_whole_buffer(handle, size, address))
            assert data is not None
            nonzero = len(data) - data.count(0)
            if nonzero:
                first = next(i for i, b in enumerate(data) if b)
                print(f"fresh {size}-byte buffer: {nonzero} nonzero bytes, the first at {first}: "
                      f"{data[first:first + 32].hex()}", file=sys.stderr, flush=True)
                raise WorkerDefect("data crossing: a new client's fresh buffer is not zeroed (stale worker memory)")
            client.send(Message(FREE_BUFFER, struct.pack("<Q", handle)))
    finally:
        client.close()


def corpus_sessions() -> dict[str, Session]:
    """The recorded sessions (rpc_sessions.ensure_corpus records them), by name."""
    return {name: load_session(str(corpus_dir() / f"{name}.rpcs")) for name in SESSIONS}


def run_case(spec: dict[str, Any], stage: Stage) -> None:
    stage("build")
    sessions = corpus_sessions()
    settings = Settings(**spec.get("model_args", {}))
    port = free_port()
    pid = start_worker(port, settings)
    watch = RssWatch(pid, settings.rss_mb)
    watch.start()
    try:
        stage("replay")
        replay = Replay(port, sessions, settings.reply_timeout, settings.secret)
        replay.connect()
        for m in spec["mutations"]:
            for op in m["ops"]:
                replay.run(op)
        while replay.current >= 0:
            replay.close()
        stage("check")
        status = reap(pid, 0)
        if status is None:
            try:
                check_fresh_buffers(port, replay.sizes, settings.check_timeout, settings.secret)
            except TimeoutError:
                status = reap(pid, 0)
                if status is None and not watch.over:
                    print(f"rpc worker did not answer a new client within {settings.check_timeout:g} s",
                          file=sys.stderr, flush=True)
                    time.sleep(3600)  # the runner's timeout ends it: a hang
            except (Closed, OSError) as e:
                status = reap(pid, 2)
                if status is None:
                    raise WorkerDefect(f"rpc worker refused a well-formed new client: {e}") from None
        for client in replay.held:
            client.close()
        if watch.over:
            raise WorkerDefect(f"rpc worker's RSS went over {settings.rss_mb:g} MiB")
        if status is not None:
            mirror(status)
        stage("close")
    finally:
        watch.stopped.set()
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def rpc_job(spec: dict[str, Any], work: Path) -> Any:  # a runner job function (picklable)
    import functools

    return functools.partial(run_case, spec)

