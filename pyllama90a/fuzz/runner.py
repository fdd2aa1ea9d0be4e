"""Run functions in child processes under a wall timeout and an RSS limit, and classify how each ended.

Children come from a fork server (multiprocessing's "forkserver"): a fresh interpreter that imports
pyllama90a and the fuzz cases once and then forks a child per job, so a child never inherits native
threads. Forking the caller itself was wrong wherever the caller had run a model before (a test suite):
the child blocked in the OpenMP runtime of threads it did not inherit, and good cases read as hangs.
A fork from the server costs milliseconds, where a fresh interpreter costs a second. Job functions are
therefore picklable (module-level functions or functools.partial of them), and, as multiprocessing
requires, the caller's main module is safe to import (`if __name__ == "__main__":`). Memory is watched by polling
the child's RSS: RLIMIT_AS would also count mmap'd model files and large virtual reservations that are
never touched.

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
import multiprocessing
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
OUTCOMES = ("ok", "clean", *DEFECTS)
POLL_S = 0.01
STDERR_TAIL_LINES = 12
# the line of a native abort that names the failure best, most telling first
_TELLING = [re.compile(p) for p in (
    r"SUMMARY: AddressSanitizer", r"GGML_ASSERT|GGML_ABORT|fatal error|Assertion .* failed", r"what\(\):",
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


def _child(func: Callable[[Stage], None], status_path: Path, stderr_path: Path) -> None:
    """Runs in the child; the status file says how the function ended."""
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
    process: multiprocessing.process.BaseProcess
    proc: psutil.Process | None
    started: float
    status_path: Path
    stderr_path: Path
    peak_rss: int = 0
    killed_for: str = ""


# the modules every job function comes from, imported once by the fork server
_PRELOAD = ["pyllama90a.fuzz.model_case", "pyllama90a.fuzz.api_cases", "pyllama90a.fuzz.rpc_replay"]


def _context() -> multiprocessing.context.ForkServerContext:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return ctx


def _start(key: Any, func: Callable[[Stage], None], work: Path) -> _Running:
    status_path = work / f"{os.getpid()}-{id(func)}-{time.monotonic_ns()}.json"
    stderr_path = status_path.with_suffix(".stderr")
    process = _context().Process(target=_child, args=(func, status_path, stderr_path), daemon=True)
    process.start()
    try:
        proc = psutil.Process(process.pid)
    except psutil.Error:
        proc = None
    return _Running(key, process, proc, time.monotonic(), status_path, stderr_path)


def _finish(r: _Running) -> Outcome:
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
    code = r.process.exitcode
    assert code is not None
    if code < 0:
        return Outcome("crash", signal=signal.Signals(-code).name, message=_telling_line(tail), **common)
    if "kind" not in status or code != 0:  # exited from native code (exit(), quick_exit) or died mid-write
        return Outcome("crash", exit_code=code, message=_telling_line(tail), **common)
    return Outcome(status["kind"], error_type=status.get("error_type", ""), message=status.get("message", ""),
                   exit_code=code, **common)


def run_jobs(jobs: Iterable[tuple[Any, Callable[[Stage], None]]], *, n_jobs: int = 2, timeout: float = 20.0,
             mem_limit_mb: float = 4096.0, work_dir: str | os.PathLike[str] | None = None
             ) -> Iterator[tuple[Any, Outcome]]:
    """Run each job's function in its own child, `n_jobs` at a time; yield (key, Outcome) as they end."""
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
                    if not r.process.is_alive():
                        r.process.join()
                        running.remove(r)
                        yield r.key, _finish(r)
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
                        r.process.kill()
        finally:  # interrupted: no child outlives the run
            for r in running:
                r.process.kill()
                r.process.join()


def run_one(func: Callable[[Stage], None], **limits: Any) -> Outcome:
    """Run one function in a child (see run_jobs for the limits)."""
    return next(run_jobs([(None, func)], n_jobs=1, **limits))[1]
