"""Run functions in forked children under a wall timeout and an RSS limit, and classify how each ended.

Forking from a parent that already imported pyllama90a (and parsed the fuzz bases) costs milliseconds,
where a fresh interpreter costs a second. The parent never loads a model and runs no threads, so the
fork is safe. Memory is watched by polling the child's RSS: RLIMIT_AS would also count mmap'd model
files and large virtual reservations that are never touched.

Outcomes:
    ok        the function returned
    clean     it raised an exception from pyllama90a.errors (what untrusted input should give)
    leaked    it raised any other exception                 (defect)
    crash     the child died by a signal or exited on its own (defect; e.g. SIGABRT from a GGML_ASSERT)
    hang      it ran past the timeout and was killed         (defect)
    memory    its RSS went over the limit and it was killed  (defect)
    harness   the fuzzer itself failed while preparing the case (a bug here, not in pyllama90a)
"""
from __future__ import annotations

import faulthandler
import json
import os
import re
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

DEFECTS = ("crash", "hang", "memory", "leaked", "harness")
OUTCOMES = ("ok", "clean") + DEFECTS
POLL_S = 0.01
STDERR_TAIL_LINES = 12
# the line of a native abort that names the failure best, most telling first
_TELLING = [re.compile(p) for p in (r"GGML_ASSERT|GGML_ABORT|fatal error|Assertion .* failed", r"what\(\):",
                                    r"\berror\b|\bfailed\b", r"terminate called")]


class Stage:
    """Given to the child's function: `stage("load")` records how far it got, so that a crash or a hang can
    say where it happened."""

    def __init__(self, status_path: Path) -> None:
        self.status_path, self.name = status_path, "start"

    def __call__(self, name: str) -> None:
        self.name = name
        _write_json(self.status_path, {"stage": name})


@dataclass
class Outcome:
    kind: str
    stage: str = ""
    error_type: str = ""  # the exception's class, for clean / leaked / harness
    message: str = ""  # the exception's first line, or the telling line of the native output
    signal: str = ""  # e.g. SIGABRT, for crash
    exit_code: int | None = None
    stderr_tail: list[str] = field(default_factory=list)
    seconds: float = 0.0
    peak_rss_mb: float = 0.0

    @property
    def is_defect(self) -> bool:
        return self.kind in DEFECTS

    def signature(self) -> str:
        """What makes two failures the same: class, signal and message, numbers ignored except file:line."""
        if self.kind in ("hang", "memory"):
            return f"{self.kind} at {self.stage}"
        message = re.sub(r"\S*[.]gguf\b", "FILE", self.message)  # case files have different names
        message = re.sub(r"\S*/(?=[^/\s]+[.](?:c|cpp|h|cu):\d)", "", message)  # llama.cpp's source folder
        # source file:line stays (it names the assert); other numbers are the values of this case
        message = re.sub(r"([\w.-]+[.](?:c|cpp|h|cu):\d+)|0x[0-9a-fA-F]+|\d+", lambda m: m.group(1) or "#", message)
        return " | ".join(x for x in (self.kind, self.signal, self.error_type, message) if x)

    def to_json(self) -> dict:
        return asdict(self)


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _child(func: Callable[[Stage], None], status_path: Path, stderr_path: Path) -> int:
    """Runs in the forked child; returns its exit status."""
    fd = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.environ["GGML_NO_BACKTRACE"] = "1"  # ggml_abort would otherwise attach gdb to print a backtrace
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    faulthandler.disable()  # a signal is an outcome here, not something to dump a traceback for
    stage = Stage(status_path)
    result: dict[str, Any] = {}
    try:
        func(stage)
        result = {"kind": "ok"}
    except BaseException as e:  # noqa: BLE001 - every exception is an outcome to classify
        from ..errors import LlamaError

        lines = str(e).splitlines()
        kind = "clean" if isinstance(e, LlamaError) else "harness" if stage.name == "build" else "leaked"
        result = {"kind": kind, "error_type": f"{type(e).__module__}.{type(e).__qualname__}",
                  "message": lines[0] if lines else ""}
        if kind != "clean":
            traceback.print_exc()
    result["stage"] = stage.name
    sys.stdout.flush()
    sys.stderr.flush()
    _write_json(status_path, result)
    return 0


def _tail(stderr_path: Path) -> list[str]:
    try:
        with open(stderr_path, "rb") as f:
            f.seek(max(0, os.path.getsize(stderr_path) - 8192))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line.rstrip() for line in text.splitlines() if line.strip()][-STDERR_TAIL_LINES:]


def _telling_line(lines: list[str]) -> str:
    for pattern in _TELLING:
        for line in reversed(lines):
            if pattern.search(line):
                return line.strip()[:300]
    return lines[-1].strip()[:300] if lines else ""


@dataclass
class _Running:
    key: Any
    pid: int
    proc: psutil.Process | None
    started: float
    status_path: Path
    stderr_path: Path
    peak_rss: int = 0
    killed_for: str = ""


def _start(key: Any, func: Callable[[Stage], None], work: Path) -> _Running:
    status_path = work / f"{os.getpid()}-{id(func)}-{time.monotonic_ns()}.json"
    stderr_path = status_path.with_suffix(".stderr")
    sys.stdout.flush()  # else the child would write the parent's buffered output again
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child never returns into the caller's code
        code = 70
        try:
            code = _child(func, status_path, stderr_path)
        finally:
            os._exit(code)
    try:
        proc = psutil.Process(pid)
    except psutil.Error:
        proc = None
    return _Running(key, pid, proc, time.monotonic(), status_path, stderr_path)


def _finish(r: _Running, wait_status: int) -> Outcome:
    seconds = time.monotonic() - r.started
    try:
        status = json.loads(r.status_path.read_text())
    except (OSError, ValueError):
        status = {}
    tail = _tail(r.stderr_path)
    for p in (r.status_path, r.stderr_path, r.status_path.with_suffix(".tmp")):
        p.unlink(missing_ok=True)
    common = {"stage": status.get("stage", "start"), "stderr_tail": tail, "seconds": round(seconds, 3),
              "peak_rss_mb": round(r.peak_rss / 2**20, 1)}
    if r.killed_for:
        return Outcome(r.killed_for, **common)
    if os.WIFSIGNALED(wait_status):
        sig = signal.Signals(os.WTERMSIG(wait_status)).name
        return Outcome("crash", signal=sig, message=_telling_line(tail), **common)
    code = os.WEXITSTATUS(wait_status)
    if "kind" not in status or code != 0:  # exited from native code (exit(), quick_exit) or died mid-write
        return Outcome("crash", exit_code=code, message=_telling_line(tail), **common)
    return Outcome(status["kind"], error_type=status.get("error_type", ""), message=status.get("message", ""),
                   exit_code=code, **common)


def run_jobs(jobs: Iterable[tuple[Any, Callable[[Stage], None]]], *, n_jobs: int = 2, timeout: float = 20.0,
             mem_limit_mb: float = 4096.0, work_dir: str | os.PathLike[str] | None = None
             ) -> Iterator[tuple[Any, Outcome]]:
    """Run each job's function in its own forked child, `n_jobs` at a time; yield (key, Outcome) as they end."""
    pending = iter(jobs)
    running: list[_Running] = []
    limit = mem_limit_mb * 2**20
    with tempfile.TemporaryDirectory(prefix="pyllama90a-fuzz-", dir=work_dir) as tmp:
        work = Path(tmp)
        exhausted = False
        try:
            while running or not exhausted:
                while not exhausted and len(running) < n_jobs:
                    job = next(pending, None)
                    if job is None:
                        exhausted = True
                    else:
                        running.append(_start(job[0], job[1], work))
                time.sleep(POLL_S)
                for r in list(running):
                    pid, wait_status = os.waitpid(r.pid, os.WNOHANG)
                    if pid:
                        running.remove(r)
                        yield r.key, _finish(r, wait_status)
                        continue
                    try:
                        rss = r.proc.memory_info().rss if r.proc else 0
                    except psutil.Error:
                        rss = 0
                    r.peak_rss = max(r.peak_rss, rss)
                    if not r.killed_for and rss > limit:
                        r.killed_for = "memory"
                    elif not r.killed_for and time.monotonic() - r.started > timeout:
                        r.killed_for = "hang"
                    if r.killed_for:
                        os.kill(r.pid, signal.SIGKILL)
        finally:  # interrupted: no child outlives the run
            for r in running:
                try:
                    os.kill(r.pid, signal.SIGKILL)
                    os.waitpid(r.pid, 0)
                except OSError:
                    pass


def run_one(func: Callable[[Stage], None], **limits: Any) -> Outcome:
    """Run one function in a child (see run_jobs for the limits)."""
    return next(run_jobs([(None, func)], n_jobs=1, **limits))[1]
