"""Run llama.cpp's own server tests (the pinned sdist's tools/server/tests) against this package's server.

    python benchmarks/peer_suite/run.py SDIST_LLAMA_CPP_DIR [test_file ...] [--out DIR]

Their code is never copied into this repository: at run time the suite is copied into a temporary folder,
where its harness is adapted without editing it: LLAMA_SERVER_BIN_PATH names a script that runs
llama_server_shim.py (llama-server's flags translated, the default model in place of the downloads), and the
modules of stubs/ are copied beside the suite's tests: a `wget` that refuses (nothing is downloaded), a pytest
plugin that lets `requests` reach this machine only (the tests fetch their images themselves), a `filelock`
that does nothing (one pytest process). Prints pass/fail/skip per file (pytest's JUnit XML)."""
from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
# modules the suite imports that the project's environment lacks: stubs for what the harness does with them
# (the draft model of test_speculative.py is the one download stood in for: a link to the default model, which
# then drafts for itself, so that the file exercises --model-draft; the shim passes the default model for it)
STUBS = HERE / "stubs"


def counts(report: Path) -> tuple[int, int, int]:
    suite = ET.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite[0]
    total, failed = int(suite.get("tests", 0)), int(suite.get("failures", 0)) + int(suite.get("errors", 0))
    skipped = int(suite.get("skipped", 0))
    return total - failed - skipped, failed, skipped


def free_port() -> int:
    """A loopback port no one listens on now: the suite's fixed 8080 would be shared by two runs at once (another
    run's server then answers this run's requests)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("llama_cpp", type=Path, help="the sdist's vendor/llama.cpp folder")
    p.add_argument("files", nargs="*", help="test file names (default: all), e.g. test_security.py")
    p.add_argument("--out", type=Path, default=None, help="where the JUnit reports go (default: a temp folder)")
    p.add_argument("--timeout", type=int, default=1800, help="seconds per file")
    p.add_argument("--port", type=int, default=0, help="the servers' port (default: a free one, the suite's PORT)")
    args = p.parse_args()
    import pyllama90a as pl

    model = str(pl.default_model(pull=True))
    work = Path(tempfile.mkdtemp(prefix="peer-suite-"))
    out = args.out or work / "reports"
    out.mkdir(parents=True, exist_ok=True)
    tests = work / "tests"
    shutil.copytree(args.llama_cpp / "tools" / "server" / "tests", tests)
    for stub in STUBS.glob("*.py"):
        shutil.copy(stub, tests / stub.name)
    (tests / "tmp").mkdir(exist_ok=True)  # (the suite's download folder, LLAMA_CACHE; its router tests write there)
    launcher = work / "llama-server"
    # (run where the suite runs, as llama-server would be: its relative paths, --slot-save-path ./tmp, are the
    # suite's; PYTHONPATH makes the server this checkout's)
    launcher.write_text(f"#!/bin/sh\nexec {sys.executable} {HERE / 'llama_server_shim.py'} \"$@\"\n")
    launcher.chmod(0o755)
    env = {**os.environ, "LLAMA_SERVER_BIN_PATH": str(launcher), "PEER_SUITE_MODEL": model,
           "PYTHONPATH": str(REPO), "PORT": str(args.port or free_port())}
    files = args.files or sorted(f.name for f in (tests / "unit").glob("test_*.py"))
    totals = [0, 0, 0]
    for name in files:
        report = out / f"{Path(name).stem}.xml"
        # (a session of its own: a file that runs out of time is stopped with the server it started, which
        # would otherwise keep the suite's fixed port for the next file)
        run = subprocess.Popen([sys.executable, "-m", "pytest", f"unit/{name}", "-q", "-p", "no:cacheprovider",
                                "-p", "peer_no_network",
                                f"--junitxml={report}"], cwd=tests, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            output, _ = run.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(run.pid, signal.SIGKILL)
            run.communicate()
            print(f"{name}: timed out after {args.timeout} s")
            continue
        if not report.is_file():
            print(f"{name}: no report\n{output[-3000:]}")
            continue
        passed, failed, skipped = counts(report)
        totals = [totals[0] + passed, totals[1] + failed, totals[2] + skipped]
        print(f"{name}: {passed} pass, {failed} fail, {skipped} skip", flush=True)
    print(f"all: {totals[0]} pass, {totals[1]} fail, {totals[2]} skip (reports: {out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
