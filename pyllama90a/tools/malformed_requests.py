"""Malformed and hostile HTTP requests against a running server, counted by answer: a fuzz campaign for the
server's input handling (issue 9's target: 0 answers with a 5xx, the server alive at the end).

    python -m pyllama90a.tools.malformed_requests --count 2000            # starts its own server
    python -m pyllama90a.tools.malformed_requests --url http://127.0.0.1:8000 --count 500

Each request starts from a valid body of one route and breaks it one way (a class below): cut short, a field
of the wrong type, numbers JSON or Python cannot hold, deep nesting, lone surrogates and invalid UTF-8, huge
strings, an unimplemented field, a wrong content type or method, random bytes. The same seed sends the same
requests.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import httpx

CHAT, COMPLETIONS, EMBEDDINGS = "/v1/chat/completions", "/v1/completions", "/v1/embeddings"
BASES: dict[str, dict[str, Any]] = {
    COMPLETIONS: {"model": "m", "prompt": "The capital of France is", "max_tokens": 3, "temperature": 0.5,
                  "stop": ["\n"], "seed": 1},
    CHAT: {"model": "m", "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
           "max_tokens": 3, "top_p": 0.9, "stream": False},
    EMBEDDINGS: {"model": "m", "input": ["hello", "world"], "encoding_format": "float"},
}
ODD_VALUES: list[Any] = [None, True, False, 0, -1, 1.5, -0.0, 2**31, 2**63, -(2**63) - 1, 10**39, "", "x", "🦙" * 3,
                         [], [1], [[]], {}, {"a": 1}, ["a", None], 1e308]
REFUSED = ["response_format", "tools", "tool_choice", "logit_bias", "grammar", "json_schema", "best_of", "echo",
           "suffix", "functions", "function_call", "n", "n_predict", "mirostat", "guided_json", "modalities"]

Request = tuple[str, str, dict[str, str], bytes]  # method, path, headers, body


def _json(body: Any) -> bytes:
    return json.dumps(body).encode()


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a JSON value (key paths) where a value can be swapped."""
    found = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            found += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            found += _paths(v, (*prefix, i))
    return found


def _set(body: Any, path: tuple, value: Any) -> Any:
    body = json.loads(json.dumps(body))
    node = body
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return body


def _raw_at(rng: random.Random, body: dict, raw: str) -> bytes:
    """`body` with the value at a random place replaced by raw JSON text (which json.dumps could not write)."""
    marker = "\u0000MARK\u0000"
    return _json(_set(body, rng.choice(_paths(body)), marker)).replace(json.dumps(marker).encode(), raw.encode())


def wrong_type(rng: random.Random, body: dict) -> bytes:
    return _json(_set(body, rng.choice(_paths(body)), rng.choice(ODD_VALUES)))


def truncated(rng: random.Random, body: dict) -> bytes:
    raw = _json(body)
    return raw[:rng.randrange(len(raw))]


def huge_number(rng: random.Random, body: dict) -> bytes:
    digits = rng.choice([20, 400, 4301, 5000, 100_000])
    raw = rng.choice(["9" * digits, "-" + "9" * digits, "1e" + "9" * min(digits, 30), "1." + "5" * digits,
                      "NaN", "Infinity", "-Infinity", "1e999", "0x10", "01", "+1", ".5", "1.", "--1"])
    return _raw_at(rng, body, raw)


def deep_nesting(rng: random.Random, body: dict) -> bytes:
    depth = rng.choice([33, 100, 1000, 5000, 100_000])
    opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
    tail = closer * depth if rng.random() < 0.7 else ""
    return _raw_at(rng, body, opener * depth + "1" + tail)


def bad_text(rng: random.Random, body: dict) -> bytes:
    if rng.random() < 0.5:  # escapes JSON allows but Unicode does not: lone or reversed surrogates
        escape = rng.choice([r'"\ud800"', r'"a\udfffb"', r'"\udc00\ud800"', r'"\ud83e"', r'"x\u0000y"', r'"\uDBFF"'])
        return _raw_at(rng, body, escape)
    raw = _json(body)  # bytes that are not UTF-8, inside a string
    at = raw.index(b'"') + 1
    return raw[:at] + rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80"]) + raw[at:]


def huge_string(rng: random.Random, body: dict) -> bytes:
    size = rng.choice([10_000, 1_000_000, 17 * 2**20])  # the last one is over the default --max-request-bytes
    return _json(_set(body, rng.choice(_paths(body)), rng.choice(["a", "é", "🦙 ", "\n"]) * (size // 4)))


def refused_field(rng: random.Random, body: dict) -> bytes:
    return _json({**body, rng.choice(REFUSED): rng.choice([*ODD_VALUES[1:], {"type": "json_object"}, "auto"])})


def structure(rng: random.Random, body: dict) -> bytes:
    return rng.choice([b"", b" ", b"null", b"[]", b"[{}]", b'"text"', b"{}", b"{", b"}", b'{"a" 1}', b"{'a': 1}",
                       _json(body) + b"garbage", _json(body) + b"{}", b"\xef\xbb\xbf" + _json(body),
                       _json(body).replace(b"{", b'{"model": 1, ', 1),  # a duplicate key
                       bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))])


MUTATIONS: dict[str, Callable[[random.Random, dict], bytes]] = {
    "wrong_type": wrong_type, "truncated": truncated, "huge_number": huge_number, "deep_nesting": deep_nesting,
    "bad_text": bad_text, "huge_string": huge_string, "refused_field": refused_field, "structure": structure,
}
CONTENT_TYPES = ["application/json", "text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                 "application/json; charset=latin-1", ""]


def generate(rng: random.Random) -> tuple[str, Request]:
    """One request and the name of its class."""
    if rng.random() < 0.05:  # a method or a path the API does not have
        method, path = rng.choice([("GET", CHAT), ("PUT", COMPLETIONS), ("DELETE", "/v1/models"),
                                   ("POST", "/v1/models/" + "x" * rng.choice([1, 5000])), ("GET", "/v1/" + "../" * 50),
                                   ("POST", "/health"), ("GET", "/v1/models/%ff%fe")])
        return "method_or_path", (method, path, {}, b"{}")
    path = rng.choice(list(BASES))
    body = json.loads(json.dumps(BASES[path]))
    if path != EMBEDDINGS and rng.random() < 0.3:
        body["stream"] = True
    name = rng.choice(list(MUTATIONS))
    headers = {"content-type": rng.choice(CONTENT_TYPES) if rng.random() < 0.15 else "application/json"}
    return name, ("POST", path, headers, MUTATIONS[name](rng, body))


def campaign(base_url: str, count: int, seed: int = 0) -> tuple[Counter, list[str]]:
    """Send `count` requests; returns the answers by (class, status) and the descriptions of 5xx answers."""
    rng = random.Random(seed)
    outcomes: Counter = Counter()
    failures: list[str] = []
    with httpx.Client(base_url=base_url, timeout=120) as client:
        for i in range(count):
            name, (method, path, headers, body) = generate(rng)
            try:
                r = client.request(method, path, headers=headers, content=body)
                status: int | str = r.status_code
            except httpx.HTTPError as e:  # a cut connection counts as a failure too
                status = type(e).__name__
            outcomes[(name, status)] += 1
            if not isinstance(status, int) or status >= 500:
                failures.append(f"#{i} {name} {method} {path} -> {status}: {body[:200]!r}")
    return outcomes, failures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pyllama90a.tools.malformed_requests",
                                description=__doc__.split("\n")[0])
    p.add_argument("--url", help="a running server (default: start one with the default model)")
    p.add_argument("--count", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    server = None
    if args.url is None:
        from .server_process import ServerProcess

        server = ServerProcess(["--parallel", "2", "--n-ctx", "2048", "--max-tokens-default", "4",
                                "--max-tokens-limit", "16"]).start()
    try:
        base_url = args.url if server is None else server.base_url
        outcomes, failures = campaign(base_url, args.count, args.seed)
        alive = httpx.get(base_url + "/health", timeout=30).status_code == 200
    finally:
        code, output = server.stop() if server is not None else (0, "")
    by_status: Counter[int | str] = Counter()
    for (_, status), n in outcomes.items():
        by_status[status] += n
    print(f"{args.count} requests (seed {args.seed}): by status {dict(sorted(by_status.items(), key=str))}")
    for name in MUTATIONS:
        print(f"  {name}: {dict(sorted(((s, n) for (m, s), n in outcomes.items() if m == name), key=str))}")
    print(f"5xx or cut connections: {len(failures)}; server healthy at the end: {alive}; "
          f"tracebacks in its log: {output.count('Traceback')}; exit code {code}")
    for line in failures[:20]:
        print("  " + line)
    return 0 if not failures and alive and "Traceback" not in output and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
