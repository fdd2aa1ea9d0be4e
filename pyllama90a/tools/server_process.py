"""Run a server in a child process until it answers /health, and stop it.

Used at run time by the server load benchmark (`python -m pyllama90a.bench server`, for this package's
server and llama.cpp's own llama-server, which share /health) and by the malformed-request campaign
(`python -m pyllama90a.tools.malformed_requests` without --url); the tests use it too.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from typing import IO


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`with ServerProcess([...flags]) as srv: srv.base_url` — started on a free port, stopped with SIGTERM.

    The child's stdout and stderr go to an unnamed temporary file, not a pipe: nothing reads a pipe until
    stop(), and a server that logs every request (llama-server does) would block once the pipe was full.
    """

    def __init__(self, args: list[str], *, command: list[str] | None = None, env: dict[str, str] | None = None,
                 timeout: float = 120.0, cwd: str | None = None) -> None:
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        command = command or [sys.executable, "-m", "pyllama90a.server"]
        self.argv = [*command, *args, "--port", str(self.port)]
        self.env = {**os.environ, **(env or {})}
        self.timeout = timeout
        self.cwd = cwd  # (`python -m` imports the package from here first: another checkout's server)
        self.proc: subprocess.Popen | None = None
        self._output: IO[bytes] | None = None

    def start(self) -> ServerProcess:
        self._output = tempfile.TemporaryFile()  # noqa: SIM115 (open while the server runs; stop() closes it)
        self.proc = subprocess.Popen(self.argv, env=self.env, stdout=self._output, stderr=subprocess.STDOUT,
                                     cwd=self.cwd)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code, output = self.stop()
                raise RuntimeError(f"server exited with {code}: {' '.join(self.argv)}\n{output}")
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        _, output = self.stop()
        raise TimeoutError(f"server did not answer /health within {self.timeout} s: {' '.join(self.argv)}\n"
                           f"{output[-4000:]}")

    def stop(self, sig: int | None = signal.SIGTERM, timeout: float = 20.0) -> tuple[int, str]:
        """Signal the server (sig=None: it was signalled already, only wait) and wait (SIGKILL after `timeout`
        s); returns (exit code, its output)."""
        if self.proc is None:
            return 0, ""
        if sig is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        code, self.proc = self.proc.returncode, None
        return code, self._take_output()

    def _take_output(self) -> str:
        out, self._output = self._output, None
        if out is None:
            return ""
        with out:
            out.seek(0)
            return out.read().decode(errors="replace")

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
