"""Run `python -m pyllama90a.worker` in a child process on 127.0.0.1 until it answers HELLO, and stop it; read the
bytes its connections carried (the kernel's TCP counters). Used by the RPC loopback benchmark
(benchmarks/rpc_loopback.py) and the tests."""
from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..errors import ModelLoadError
from ..native.rpc import Endpoint, client_secret, probe
from .server_process import free_port


def loopback_bytes() -> int:
    """Bytes sent over this machine's loopback interface since boot (/proc/net/dev): every connection's, so a
    measure of the workers' links only where nothing else talks over 127.0.0.1; for machines without `ss`."""
    for line in Path("/proc/net/dev").read_text().splitlines():
        name, _, counters = line.partition(":")
        if name.strip() == "lo":
            return int(counters.split()[8])  # transmit bytes (what lo sends it also receives)
    raise OSError("/proc/net/dev has no loopback interface")


class WorkerProcess:
    """`WorkerProcess().start()`: a worker on a free port (or `port`), `endpoint` to give Model(rpc=...)."""

    def __init__(self, port: int | None = None, *, threads: int = 1, extra: tuple[str, ...] = ()) -> None:
        self.port = port or free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.argv = [sys.executable, "-m", "pyllama90a.worker", "--port", str(self.port), "--threads", str(threads),
                     *extra]
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> WorkerProcess:
        # not a pipe, which nobody would read until stop; open as long as this object (text() reads it)
        self.output = tempfile.TemporaryFile()  # noqa: SIM115
        self.proc = subprocess.Popen(self.argv, stdout=self.output, stderr=subprocess.STDOUT)
        secret, deadline = client_secret(), time.monotonic() + timeout  # the file is read once, not every poll
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the worker exited with {self.proc.returncode}:\n{self.text()}")
            with contextlib.suppress(ModelLoadError):
                probe(Endpoint("127.0.0.1", self.port), timeout=2.0, secret=secret)
                return self
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"the worker did not answer within {timeout} s:\n{self.text()}")

    def text(self) -> str:
        """What the worker printed so far."""
        self.output.seek(0)
        return self.output.read().decode(errors="replace")

    def link_bytes(self) -> int:
        """Bytes the worker's open client connections carried so far, both ways: the kernel's TCP counters
        (bytes_received + bytes_sent of `ss -ti`; /proc/<pid>/io does not count socket traffic)."""
        out = subprocess.run(["ss", "-tinH", "state", "established", f"( sport = :{self.port} )"],
                             capture_output=True, text=True, check=True).stdout
        return sum(int(n) for n in re.findall(r"\bbytes_(?:received|sent):(\d+)", out))

    def stop(self, sig: int = signal.SIGKILL) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)
        self.proc = None

    def __enter__(self) -> WorkerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
