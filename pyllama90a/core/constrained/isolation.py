"""Untrusted programs (a request's grammar or JSON schema, a chat template) run in child processes.

A GBNF grammar, a JSON schema and a Jinja chat template are programs that a request or a model file brings.
The constraint library compiles a grammar with recursion as deep as the grammar (a 5,000-rule chain overflows
an 8 MiB stack: SIGSEGV), and a template can loop for hours or fill the memory. Neither can be stopped from
inside the process (a native call cannot be interrupted; a thread cannot be killed), so they run here:

    run("template", payload, timeout_s=5.0, what="chat template")

sends `payload` to a worker process that calls the task's function (TASKS) and returns its result. A worker
is a fresh interpreter (subprocess: fork + exec, never a plain fork of this process, whose native threads may
hold locks), with its address space limited (`memory_mb` beyond what it had after its imports), no core
dumps, and its output streams closed. Workers are kept for the next call (an idle one costs ~40 MB), at most
`max_workers` at a time; a worker that runs past its time is killed.

A task's own exception comes back as an IsolatedError with the exception's type name and message (the
caller maps it to its own error); a worker killed for its time gives IsolationTimeout, one that died (a
signal, the memory limit) IsolationCrash. `shutdown()` kills every worker (the server at SIGTERM): calls in
flight then end with IsolationCrash at once, later calls start new workers.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ...errors import PositiveSettings

__all__ = [
    "TASKS",
    "IsolatedError",
    "IsolationCrash",
    "IsolationTimeout",
    "Settings",
    "UnsendablePayload",
    "Wording",
    "configure",
    "run",
    "run_as",
    "settings",
    "shutdown",
]

# task name -> "module:function" imported in the worker (only these run there)
TASKS = {
    "constraint": "pyllama90a.core.constrained.compile:compile_constraint",
    "template": "pyllama90a.core.chat.render:render_in_worker",
    "template_check": "pyllama90a.core.chat.render:check_in_worker",
    "ping": "pyllama90a.core.constrained.isolation:_ping",
}


@dataclass(frozen=True)
class Settings(PositiveSettings):
    """memory_mb: address space a worker may add to what it had after its imports (MiB); max_workers: workers
    at a time (more callers wait for one)."""
    WHAT = "isolation setting"
    memory_mb: int = 1024
    max_workers: int = 4


_settings = Settings()


def settings() -> Settings:
    return _settings


def configure(**changes: Any) -> Settings:
    """Change Settings (e.g. the server's --isolation-memory-mb); workers started later use them."""
    global _settings
    _settings = replace(_settings, **changes)
    return _settings


class IsolatedError(Exception):
    """The task raised: `kind` is the exception's type name, `param` its param attribute (if any)."""

    def __init__(self, kind: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.kind, self.message, self.param = kind, message, param


class IsolationTimeout(Exception):
    """The task ran past its time limit; its worker was killed."""


class IsolationCrash(Exception):
    """The worker died during the task (a signal, or the memory limit): `detail` says how."""


class UnsendablePayload(IsolatedError):
    """The payload cannot be pickled for the worker (`original`: pickle's exception); nothing was run."""

    def __init__(self, original: BaseException) -> None:
        message = ("is nested too deeply to be sent to the worker process" if isinstance(original, RecursionError)
                   else str(original))
        super().__init__(type(original).__name__, message)
        self.original = original


@dataclass(frozen=True)
class Wording:
    """How a caller reports the ways its isolated task can fail, as its own `error`. The formats take
    {message} and {kind} (the task's exception, or pickle's for an unsendable payload), {timeout} (seconds),
    {crash} (how the worker died) and {memory_mb}. The task's own `error` comes through as it is;
    `unsendable`, when given, makes the exception for a payload that cannot be sent."""
    error: type[Exception]
    memory: str
    other: str
    timeout: str
    crash: str
    unsendable: Callable[[UnsendablePayload], Exception] | None = None


# -- the worker side ------------------------------------------------------------------------------------------

def _ping(payload: Any) -> Any:
    return payload


def _read_frame(fd: int) -> bytes | None:
    head = _read_exact(fd, 8)
    if head is None:
        return None
    data = _read_exact(fd, struct.unpack("<Q", head)[0])
    if data is None:
        raise EOFError("truncated frame")
    return data


def _read_exact(fd: int, n: int) -> bytes | None:
    parts, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def _write_frame(fd: int, data: bytes) -> None:
    view = memoryview(struct.pack("<Q", len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _worker_main() -> None:  # pragma: no cover - runs in the worker process
    import importlib
    import resource

    inp, out = os.dup(0), os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # nothing a task prints (or a native library logs) reaches the parent's streams
        os.dup2(devnull, fd)
    memory_mb = int(sys.argv[1])
    functions = {}
    for name, ref in TASKS.items():  # imported before the memory limit: the limit is what a task adds
        module, _, fn = ref.partition(":")
        functions[name] = getattr(importlib.import_module(module), fn)
    for module in ("jinja2", "llguidance"):
        importlib.import_module(module)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    with open("/proc/self/statm") as f:
        vm_bytes = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    limit = vm_bytes + memory_mb * 2**20
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    _write_frame(out, b"ready")
    while True:
        frame = _read_frame(inp)
        if frame is None:
            return
        task, payload = pickle.loads(frame)
        try:
            reply: tuple[object, ...] = ("ok", functions[task](payload))
        except MemoryError:
            reply = ("error", "MemoryError", f"used more than the memory limit of {memory_mb} MiB", None)
        except BaseException as e:  # noqa: BLE001 - every failure of a task goes back to the caller
            param = getattr(e, "param", None)
            reply = ("error", type(e).__name__, str(e), param if isinstance(param, str) else None)
        try:
            data = pickle.dumps(reply)
        except MemoryError:
            data = pickle.dumps(("error", "MemoryError", f"used more than the memory limit of {memory_mb} MiB",
                                 None))
        _write_frame(out, data)


# -- the parent side ------------------------------------------------------------------------------------------

_PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


class _Worker:
    def __init__(self, memory_mb: int) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([_PACKAGE_ROOT, *sys.path[1:]])
        code = "import sys; from pyllama90a.core.constrained.isolation import _worker_main; _worker_main()"
        self.proc = subprocess.Popen([sys.executable, "-c", code, str(memory_mb)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, close_fds=True,
                                     start_new_session=True)  # (a Ctrl-C in the terminal goes to the server only)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.pipes = self.proc.stdin, self.proc.stdout
        self.wfd, self.rfd = self.proc.stdin.fileno(), self.proc.stdout.fileno()
        self.ready = False

    def receive(self, deadline: float) -> bytes:
        """One frame from the worker before `deadline` (IsolationTimeout after it, IsolationCrash at EOF)."""
        head = self._read(8, deadline)
        return self._read(struct.unpack("<Q", head)[0], deadline)

    def _read(self, n: int, deadline: float) -> bytes:
        parts, got = [], 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise IsolationTimeout
            ready, _, _ = select.select([self.rfd], [], [], left)
            if not ready:
                continue
            chunk = os.read(self.rfd, min(n - got, 1 << 20))
            if not chunk:
                raise IsolationCrash(self.death())
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)

    def death(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            return "stopped answering"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exited with status {code}"

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):  # (not expected: SIGKILL is not refused)
            self.proc.wait(timeout=5)
        for stream in self.pipes:
            with contextlib.suppress(OSError):
                stream.close()


_lock = threading.Condition()
_idle: list[_Worker] = []
_busy: set[_Worker] = set()
_generation = 0  # shutdown() increments it: workers of an older generation are not reused

# a fresh interpreter imports the package (and its native module) before it answers
_START_TIMEOUT_S = 60.0


def _take() -> tuple[_Worker, int]:
    with _lock:
        while not _idle and len(_busy) >= _settings.max_workers:
            _lock.wait()
        worker = _idle.pop() if _idle else _Worker(_settings.memory_mb)
        _busy.add(worker)
        return worker, _generation


def _give_back(worker: _Worker, generation: int, healthy: bool) -> None:
    with _lock:
        _busy.discard(worker)
        if healthy and generation == _generation:
            _idle.append(worker)
        else:
            worker.kill()
        _lock.notify()


def run(task: str, payload: Any, *, timeout_s: float) -> Any:
    """The result of TASKS[task](payload) in a worker process, within `timeout_s` seconds (the worker's
    start-up not counted). Raises IsolatedError, IsolationTimeout or IsolationCrash."""
    if task not in TASKS:
        raise ValueError(f"unknown isolated task {task!r}")
    try:
        data = pickle.dumps((task, payload))
    except Exception as e:  # noqa: BLE001 - e.g. nested deeper than Python's recursion limit, or not plain data
        raise UnsendablePayload(e) from None
    worker, generation = _take()
    healthy = False
    try:
        if not worker.ready:
            if worker.receive(time.monotonic() + _START_TIMEOUT_S) != b"ready":
                raise IsolationCrash("the worker did not start")
            worker.ready = True
        try:
            _write_frame(worker.wfd, data)
        except (BrokenPipeError, OSError):
            raise IsolationCrash(worker.death()) from None
        reply = pickle.loads(worker.receive(time.monotonic() + timeout_s))
        healthy = True
    except IsolationTimeout:
        worker.kill()
        raise
    finally:
        _give_back(worker, generation, healthy)
    if reply[0] == "ok":
        return reply[1]
    raise IsolatedError(*reply[1:])


def run_as(task: str, payload: Any, *, timeout_s: float, wording: Wording) -> Any:
    """run(), with every failure raised as the caller's error, worded as `wording` says."""
    w = wording
    try:
        return run(task, payload, timeout_s=timeout_s)
    except UnsendablePayload as e:
        if w.unsendable is not None:
            raise w.unsendable(e) from None
        raise w.error(w.other.format(kind=e.kind, message=e.message)) from None
    except IsolatedError as e:
        if e.kind == w.error.__name__:
            raise w.error(e.message) from None
        text = w.memory if e.kind == "MemoryError" else w.other
        raise w.error(text.format(kind=e.kind, message=e.message)) from None
    except IsolationTimeout:
        raise w.error(w.timeout.format(timeout=timeout_s)) from None
    except IsolationCrash as e:
        raise w.error(w.crash.format(crash=e, memory_mb=settings().memory_mb)) from None


def shutdown() -> None:
    """Kill every worker, idle or busy (their callers get IsolationCrash)."""
    global _generation
    with _lock:
        _generation += 1
        idle, busy = list(_idle), list(_busy)
        _idle.clear()
    for worker in idle:
        worker.kill()
    for worker in busy:  # its caller reads EOF, then closes it (_give_back)
        with contextlib.suppress(OSError):
            worker.proc.kill()


def _forget_workers_after_fork() -> None:
    """In a child made by a plain fork (the fuzz runner's): the parent's workers are not this process's."""
    global _lock
    _lock = threading.Condition()
    for worker in [*_idle, *_busy]:
        for fd in (worker.wfd, worker.rfd):
            with contextlib.suppress(OSError):
                os.close(fd)
    _idle.clear()
    _busy.clear()


atexit.register(shutdown)
os.register_at_fork(after_in_child=_forget_workers_after_fork)
