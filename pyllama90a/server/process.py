"""Run a server in a child process until it answers /health: for tests, benchmarks and apps.

Works for `python -m pyllama90a.server` and for llama.cpp's own llama-server (the load benchmark's
reference), which share /health.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`with ServerProcess([...flags]) as srv: srv.base_url` — started on a free port, stopped with SIGTERM."""

    def __init__(self, args: list[str], *, command: list[str] | None = None, env: dict[str, str] | None = None,
                 port: int | None = None, timeout: float = 120.0, log: Path | None = None) -> None:
        self.port = port or free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        command = command or [sys.executable, "-m", "pyllama90a.server"]
        self.argv = [*command, *args, "--port", str(self.port)]
        self.env = {**os.environ, **(env or {})}
        self.timeout = timeout
        self.log = log
        self.proc: subprocess.Popen | None = None

    def start(self) -> ServerProcess:
        out = open(self.log, "wb") if self.log else subprocess.PIPE  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                output = self.proc.stdout.read().decode(errors="replace") if self.proc.stdout else ""
                raise RuntimeError(f"server exited with {self.proc.returncode}: {' '.join(self.argv)}\n{output}")
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"server did not answer /health within {self.timeout} s: {' '.join(self.argv)}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> tuple[int, str]:
        """Signal the server and wait; returns (exit code, its output if it was captured)."""
        if self.proc is None:
            return 0, ""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            output, _ = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            output, _ = self.proc.communicate()
        code, self.proc = self.proc.returncode, None
        return code, (output or b"").decode(errors="replace")

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
