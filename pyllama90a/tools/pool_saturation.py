"""Pool saturation, a class of hostile load: hold a server's worker threads of one kind of work, then of every
kind at once (embeddings queued behind the embedder, huge texts tokenized, huge bodies parsed, huge prompts
tokenized on submit), and check that every route of another kind still answers 200 within a bound, that the
held kind's own routes answer (200, or 429 once its queue is full) instead of waiting without end, that
/health names what is saturated, and that nothing is a 5xx (issue 33, item 8).

    python -m pyllama90a.tools.pool_saturation                 # starts its own server (--pool-queue-size 4)
    python -m pyllama90a.tools.pool_saturation --url http://127.0.0.1:8000 [--api-key KEY]

A held request is sent on its own connection and not read; releasing it closes the connection (an embeddings
request then stops within one chunk of inputs). The tests and benchmarks/pool_starvation.py use HeldRequests.
"""
from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

# kind of work -> (path, body) of one request that holds a thread of it for a while
HOLD: dict[str, tuple[str, dict[str, Any]]] = {
    # 512 short texts, ~5,000 tokens to embed behind one embedder (stopped within 8 texts once its client left)
    "embeddings": ("/v1/embeddings", {"input": ["the quick brown fox jumps over the lazy dog"] * 512}),
    # 200,000 tokens: tokenized, then its answer made
    "text": ("/tokenize", {"content": "word " * 200_000}),
    # a 2.9 MB body of a million numbers: each one checked by the parser's hooks and the tree walk
    "parse": ("/v1/completions", {"prompt": [42] * 1_000_000, "max_tokens": 1}),
    # a 1 MB prompt tokenized in submit, then refused as longer than the context
    "submit": ("/v1/completions", {"prompt": "word " * 200_000, "max_tokens": 1}),
    "slot_files": ("/slots/0?action=save", {"filename": "pool-saturation.bin"}),
}

# route -> (method, path, body, the kinds of work it needs); each answers quickly on an idle server
PROBES: dict[str, tuple[str, str, dict[str, Any] | None, frozenset[str]]] = {
    "health": ("GET", "/health", None, frozenset()),
    "models": ("GET", "/v1/models", None, frozenset()),
    "slots": ("GET", "/slots", None, frozenset()),
    "metrics": ("GET", "/metrics", None, frozenset()),
    "completion": ("POST", "/completion", {"prompt": "Hi", "n_predict": 1}, frozenset({"parse", "submit"})),
    "chat": ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1},
             frozenset({"parse", "submit"})),
    "embeddings": ("POST", "/v1/embeddings", {"input": "Hi"}, frozenset({"embeddings"})),
    "tokenize": ("POST", "/tokenize", {"content": "Hi"}, frozenset({"text"})),
    "detokenize": ("POST", "/detokenize", {"tokens": [1, 2]}, frozenset({"text"})),
    "apply-template": ("POST", "/apply-template", {"messages": [{"role": "user", "content": "Hi"}]},
                       frozenset({"text"})),
    "props": ("GET", "/props", None, frozenset({"text"})),
    "slot-erase": ("POST", "/slots/1?action=erase", None, frozenset({"slot_files"})),
}
# the answers of a probe that count as served (a server without --slot-save-path answers the slot actions 501)
SERVED = {"slot-erase": (200, 501)}


class HeldRequests:
    """Requests sent on their own connections and not read until `release()` (which reads any answer that
    came, then closes them). `with HeldRequests(url) as held: held.hold(path, body, 64)`."""

    def __init__(self, base_url: str, api_key: str | None = None) -> None:
        parts = urlsplit(base_url)
        self.address = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.api_key = api_key
        self.sockets: list[tuple[str, socket.socket]] = []

    def hold(self, path: str, body: dict[str, Any] | bytes, count: int = 1) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.address[0]}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(data)}\r\n" + (f"X-Api-Key: {self.api_key}\r\n" if self.api_key else "")
                + "\r\n").encode()
        for _ in range(count):
            sock = socket.create_connection(self.address, timeout=60)
            sock.sendall(head + data)
            self.sockets.append((path, sock))

    def release(self) -> Counter[tuple[str, int | str]]:
        """Close every held connection; returns the answers that had come, by (path, status) ("none": no
        answer yet)."""
        answers: Counter[tuple[str, int | str]] = Counter()
        for path, sock in self.sockets:
            sock.setblocking(False)
            try:
                first = sock.recv(64)
                status: int | str = int(first.split(b" ", 2)[1]) if first.startswith(b"HTTP/1.1 ") else "none"
            except (BlockingIOError, OSError, ValueError, IndexError):
                status = "none"
            answers[(path, status)] += 1
            sock.close()
        self.sockets.clear()
        return answers

    def __enter__(self) -> HeldRequests:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@dataclass
class Report:
    """What a campaign saw: each probe's (phase, route, status, seconds), the held requests' answers, and the
    violations (a 5xx, a route of another kind not answered 200 within the bound, a held kind's route that
    did not answer, /health not naming a held kind)."""
    probes: list[tuple[str, str, int | str, float]] = field(default_factory=list)
    held_answers: Counter[tuple[str, int | str]] = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)


def probe(client: httpx.Client, route: str, timeout: float) -> tuple[int | str, float]:
    """(status or the exception's name, seconds) of one PROBES request."""
    method, path, body, _ = PROBES[route]
    start = time.perf_counter()
    try:
        status: int | str = client.request(method, path, json=body, timeout=timeout).status_code
    except httpx.HTTPError as e:
        status = type(e).__name__
    return status, time.perf_counter() - start


def probe_all(client: httpx.Client, routes: list[str], timeout: float) -> dict[str, tuple[int | str, float]]:
    """Every route of `routes` probed at once (one thread each): {route: (status, seconds)}."""
    results: dict[str, tuple[int | str, float]] = {}

    def one(route: str) -> None:
        results[route] = probe(client, route, timeout)
    threads = [threading.Thread(target=one, args=(r,)) for r in routes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def wait_saturated(client: httpx.Client, kinds: set[str], timeout: float) -> set[str]:
    """The kinds of `kinds` that /health named saturated within `timeout` seconds (polled)."""
    seen: set[str] = set()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and seen != kinds:
        seen |= kinds & set(client.get("/health", timeout=30).json().get("saturated", []))
        time.sleep(0.05)
    return seen


def hold_and_probe(base_url: str, kinds: list[str], count: int, report: Report, *, api_key: str | None = None,
                   bound: float = 5.0, own_bound: float = 120.0) -> None:
    """Hold `count` requests of each kind of `kinds` (HOLD), then probe every route (PROBES) and note the
    violations in `report`."""
    phase = "+".join(kinds)
    headers = {"X-Api-Key": api_key} if api_key else {}
    with httpx.Client(base_url=base_url, headers=headers) as client, HeldRequests(base_url, api_key) as held:
        deadline = time.monotonic() + 120  # (what the last phase left, e.g. a /tokenize nothing cancels, drains)
        while client.get("/health", timeout=30).json().get("saturated") and time.monotonic() < deadline:
            time.sleep(0.1)
        for kind in kinds:
            path, body = HOLD[kind]
            held.hold(path, body, count)
        named = wait_saturated(client, set(kinds) - {"slot_files"}, timeout=60)  # (a save is too quick to see)
        for kind in set(kinds) - {"slot_files"} - named:
            report.violations.append(f"{phase}: /health never named {kind} saturated")
        results = probe_all(client, list(PROBES), own_bound)
        report.held_answers.update(held.release())
    for route, (status, seconds) in results.items():
        report.probes.append((phase, route, status, seconds))
        own = bool(PROBES[route][3] & set(kinds))
        if not isinstance(status, int) or status >= 500:
            report.violations.append(f"{phase}: {route} -> {status} after {seconds:.2f} s")
        elif own and status not in (*SERVED.get(route, (200,)), 429):
            report.violations.append(f"{phase}: {route} (a held kind's route) -> {status}")
        elif not own and (status not in SERVED.get(route, (200,)) or seconds > bound):
            report.violations.append(f"{phase}: {route} -> {status} after {seconds:.2f} s (bound {bound} s)")
    for (path, status), n in report.held_answers.items():
        if isinstance(status, int) and status >= 500:
            report.violations.append(f"{phase}: {n} held {path} -> {status}")


def campaign(base_url: str, kinds: list[str], count: int, *, api_key: str | None = None,
             bound: float = 5.0) -> Report:
    """Each kind held alone, then all at once."""
    report = Report()
    for kind in kinds:
        hold_and_probe(base_url, [kind], count, report, api_key=api_key, bound=bound)
    hold_and_probe(base_url, kinds, count, report, api_key=api_key, bound=bound)
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pyllama90a.tools.pool_saturation", description=__doc__.split("\n")[0])
    p.add_argument("--url", help="a running server (default: start one with the default model)")
    p.add_argument("--api-key")
    p.add_argument("--count", type=int, default=8, help="requests held per kind (default 8: past the threads and "
                                                        "queue of the server this tool starts)")
    p.add_argument("--bound", type=float, default=5.0, help="seconds a route of another kind may take (default 5)")
    p.add_argument("--kinds", default="embeddings,text,parse,submit,slot_files")
    args = p.parse_args(argv)
    kinds = args.kinds.split(",")
    server, folder = None, None
    if args.url is None:
        from .server_process import ServerProcess

        folder = tempfile.TemporaryDirectory()
        server = ServerProcess(["--parallel", "2", "--n-ctx", "2048", "--threads", "2", "--pool-queue-size", "4",
                                "--slot-save-path", folder.name]).start()
    try:
        base_url = args.url if server is None else server.base_url
        report = campaign(base_url, kinds, args.count, api_key=args.api_key, bound=args.bound)
        alive = httpx.get(base_url + "/health", timeout=30).status_code == 200
    finally:
        code, output = server.stop() if server is not None else (0, "")
        if folder is not None:
            folder.cleanup()
    for phase, route, status, seconds in report.probes:
        print(f"{phase:40} {route:15} {status!s:>6} {seconds:7.3f} s")
    print(f"held requests' answers: {dict(sorted(report.held_answers.items(), key=str))}")
    print(f"violations: {len(report.violations)}; server healthy at the end: {alive}; "
          f"tracebacks in its log: {output.count('Traceback')}; exit code {code}")
    for line in report.violations[:40]:
        print("  " + line)
    return 0 if not report.violations and alive and "Traceback" not in output and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
