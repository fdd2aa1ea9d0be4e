"""Server limits from issue 18's minor items: `n` that can never be queued, a logit_bias that bans every token,
an abandoned embeddings request, slow request headers (slowloris)."""
from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
import urllib.request

import pytest

from pyllama90a.tools.server_process import ServerProcess

pytestmark = pytest.mark.server  # (the test tier: tests/conftest.py)

QUEUE = 8


@pytest.fixture(scope="module")
def server(model_path):
    with ServerProcess(["--model", str(model_path), "--parallel", "2", "--queue-size", str(QUEUE), "--n-ctx", "2048",
                        "--threads", "2", "--header-timeout", "1.5"]) as srv:
        yield srv


def _post(server, route: str, body: dict, timeout: float = 120) -> tuple[int, dict | str]:
    req = urllib.request.Request(server.base_url + route, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            text = r.read().decode()
            return r.status, (json.loads(text) if not body.get("stream") else text)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode())


@pytest.mark.parametrize("n", [QUEUE + 1, QUEUE + 2])  # fit "slots + queue", but n requests are queued at once
def test_n_that_can_never_be_queued_is_a_400_not_a_429(server, n: int) -> None:
    for _ in range(3):  # an idle server: always the same answer
        status, body = _post(server, "/v1/completions", {"prompt": "hi", "max_tokens": 1, "n": n})
        assert status == 400 and body["error"]["param"] == "n", body  # type: ignore[index]
        assert "--queue-size" in body["error"]["message"]  # type: ignore[index]


def test_n_as_large_as_the_queue_is_served(server) -> None:
    status, body = _post(server, "/v1/completions", {"prompt": "hi", "max_tokens": 1, "n": QUEUE})
    assert status == 200 and len(body["choices"]) == QUEUE, body  # type: ignore[index]


@pytest.mark.parametrize("extra", [{}, {"logprobs": 2}, {"stream": True}])
def test_logit_bias_banning_every_token_is_a_400(server, extra: dict) -> None:
    bias = {str(t): -100 for t in range(49152)}  # SmolLM2's whole vocabulary
    status, body = _post(server, "/v1/completions", {"prompt": "hi", "max_tokens": 4, "logit_bias": bias, **extra})
    assert status == 400, body
    assert body["error"]["param"] == "logit_bias" and "bans all 49152 tokens" in body["error"]["message"], body  # type: ignore[index]


def test_logit_bias_banning_all_but_one_token_generates_it(server) -> None:
    bias = {str(t): -100 for t in range(49152) if t != 1000}
    status, body = _post(server, "/v1/completions", {"prompt": "hi", "max_tokens": 3, "logit_bias": bias,
                                                     "temperature": 0, "logprobs": 1})
    assert status == 200, body
    lp = body["choices"][0]["logprobs"]  # type: ignore[index]
    assert len(lp["tokens"]) == 3 and all(x == 0.0 for x in lp["token_logprobs"]), lp  # valid numbers, not NaN


def test_logit_bias_and_a_grammar_that_together_leave_no_token_is_a_400(server) -> None:
    bias = {str(t): -100 for t in range(49152) if t != 1000}  # token 1000 is no digit
    status, body = _post(server, "/v1/completions", {"prompt": "hi", "max_tokens": 3, "logit_bias": bias,
                                                     "grammar": 'root ::= [0-9]'})
    assert status == 400, body  # the request's own doing, not a server error
    assert body["error"]["param"] == "logit_bias" and "leave no token" in body["error"]["message"], body  # type: ignore[index]


def test_abandoned_embeddings_request_stops(server) -> None:
    """A client that leaves a 2,000-input request frees the embedder within a chunk of inputs."""
    _post(server, "/v1/embeddings", {"input": "warm up"})  # the embedder's context exists
    body = json.dumps({"input": ["a fairly long sentence about rivers and mountains " * 8] * 2000}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    time.sleep(2.0)  # embedding has begun
    sock.close()  # the client goes away
    time.sleep(0.5)
    t0 = time.monotonic()
    status, _ = _post(server, "/v1/embeddings", {"input": "hello"})
    waited = time.monotonic() - t0
    assert status == 200 and waited < 10, f"the next embedding waited {waited:.1f} s"


def test_slow_request_headers_are_cut_off(server) -> None:
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.settimeout(10)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # headers never finished
    stop = threading.Event()

    def trickle() -> None:  # one byte now and then, as slowloris does
        while not stop.wait(0.3):
            try:
                sock.sendall(b"X")
            except OSError:
                return

    threading.Thread(target=trickle, daemon=True).start()
    t0 = time.monotonic()
    try:
        assert sock.recv(1) == b"", "the server answered headers that never ended"
    except ConnectionResetError:
        pass
    finally:
        stop.set()
    assert time.monotonic() - t0 < 5
    sock.close()
    with urllib.request.urlopen(server.base_url + "/health", timeout=5) as r:  # a complete request is served
        assert r.status == 200


def _read_response(sock: socket.socket) -> bytes:
    """One whole HTTP response (headers and a Content-Length body), however TCP splits it."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(re.search(rb"content-length:\s*(\d+)", head, re.IGNORECASE).group(1))
    while len(body) < length:
        body += sock.recv(4096)
    return head


def test_kept_alive_connection_gets_the_timeout_again(server) -> None:
    sock = socket.create_connection(("127.0.0.1", server.port))
    sock.settimeout(10)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert _read_response(sock).startswith(b"HTTP/1.1 200")
    sock.sendall(b"GET /health HTTP/1.1\r\n")  # the next request's headers never end
    t0 = time.monotonic()
    with contextlib.suppress(ConnectionResetError):
        assert sock.recv(1) == b""
    assert time.monotonic() - t0 < 8
    sock.close()
