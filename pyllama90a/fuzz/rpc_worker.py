"""The RPC fuzz case's worker: how it runs (Settings), its start in a fork or as a command, and its end mirrored
onto the case's child, so that the runner classifies the worker's signal as the child's (rpc_replay uses these).
"""
from __future__ import annotations

import ctypes
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .rpc_sessions import wait_for_port

HOST = "127.0.0.1"
ASAN_OPTIONS = "abort_on_error=1:halt_on_error=1:detect_leaks=0:allocator_may_return_null=1"


@dataclass
class Settings:
    """How a case runs its worker. worker: a command ("{port}" replaced), else pyllama90a.worker forked with
    worker_args; reply_timeout: seconds a case's request may wait for its reply before its connection is dropped
    (a busy or stalled worker); check_timeout: seconds the check's client waits (longer than the worker's own idle
    timeout, which idle peers must meet); rss_mb: the worker's RSS limit; secret_file: the link's secret (patch
    0023; the forked worker gets --secret-file, every client of the case but the auth class's proves it holds it)."""

    worker: list[str] = field(default_factory=list)
    worker_args: list[str] = field(default_factory=list)
    reply_timeout: float = 3.0
    check_timeout: float = 10.0
    rss_mb: float = 2048.0
    secret_file: str = ""

    @property
    def secret(self) -> bytes | None:
        return Path(self.secret_file).read_bytes().rstrip(b"\r\n") if self.secret_file else None

    @classmethod
    def from_environment(cls) -> Settings:
        env = os.environ.get
        return cls(shlex.split(env("PYLLAMA90A_FUZZ_RPC_WORKER", "")),
                   shlex.split(env("PYLLAMA90A_FUZZ_RPC_WORKER_ARGS", "")),
                   float(env("PYLLAMA90A_FUZZ_RPC_REPLY_TIMEOUT", "3")),
                   float(env("PYLLAMA90A_FUZZ_RPC_CHECK_TIMEOUT", "10")),
                   float(env("PYLLAMA90A_FUZZ_RPC_WORKER_RSS_MB", "2048")),
                   env("PYLLAMA90A_FUZZ_RPC_SECRET_FILE", ""))

    def to_json(self) -> dict[str, Any]:
        default = asdict(Settings())
        return {k: v for k, v in asdict(self).items() if v != default[k]}


class WorkerDefect(Exception):
    """The worker lived, but did what it must not: gave a client another client's data, or grew past the limit."""


# -- the worker -----------------------------------------------------------------------------------------

def _die_with_parent() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: a child killed for a hang takes its worker along


def start_worker(port: int, settings: Settings) -> int:
    """The worker's pid, listening on `port` once this returns."""
    sys.stdout.flush()
    sys.stderr.flush()
    if settings.worker:
        argv = [a.replace("{port}", str(port)) for a in settings.worker]
        # an AddressSanitizer report ends the worker by SIGABRT (a crash to the runner); leaks at exit are no finding.
        # SIGPIPE stays ignored, as in pyllama90a.worker (Python ignores it): ggml's own rpc-server binary would
        # otherwise die when a client closes while it writes, which the project's worker does not
        env = {**os.environ, "ASAN_OPTIONS": os.environ.get("ASAN_OPTIONS", ASAN_OPTIONS)}
        pid = subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=env, preexec_fn=_die_with_parent,
                               restore_signals=False).pid
    else:
        pid = os.fork()
        if pid == 0:  # the worker: the real entry point, in this fresh fork
            code = 3
            try:
                _die_with_parent()
                from .. import worker

                secret = ["--secret-file", settings.secret_file] if settings.secret_file else []
                code = worker.main(["--host", HOST, "--port", str(port), "--threads", "1", *secret,
                                    *settings.worker_args])
            finally:
                os._exit(code)
    wait_for_port(port, 30, pid)
    return pid


def reap(pid: int, wait_s: float) -> int | None:
    """The worker's wait status once it has ended (waiting up to `wait_s`), else None."""
    deadline = time.monotonic() + wait_s
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.02)


def _repeat_sanitizer_summary() -> None:
    """An ASan report ends with the shadow bytes' map, longer than the runner's stderr tail: say its SUMMARY line
    (the worker wrote to this child's stderr) again at the end."""
    try:
        with open(os.readlink("/proc/self/fd/2"), "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 65536))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return
    summary = [line for line in lines if line.startswith("SUMMARY: AddressSanitizer")]
    if summary:
        print(summary[-1], file=sys.stderr, flush=True)


def mirror(status: int) -> None:
    """End this child the way the worker ended, so that the runner classifies the worker's death."""
    _repeat_sanitizer_summary()
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        print(f"rpc worker died by {signal.Signals(sig).name}", file=sys.stderr, flush=True)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        time.sleep(1)
        os._exit(128 + sig)
    code = os.WEXITSTATUS(status)
    print(f"rpc worker exited with code {code}", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os._exit(code or 99)


class RssWatch(threading.Thread):
    def __init__(self, pid: int, limit_mb: float) -> None:
        super().__init__(daemon=True)
        self.pid, self.limit_mb, self.peak_mb, self.over = pid, limit_mb, 0.0, False
        self.stopped = threading.Event()

    def run(self) -> None:
        import psutil

        try:
            proc = psutil.Process(self.pid)
            while not self.stopped.wait(0.02):
                self.peak_mb = max(self.peak_mb, proc.memory_info().rss / 2**20)
                if self.peak_mb > self.limit_mb:
                    self.over = True
                    proc.kill()
                    return
        except psutil.Error:
            return
