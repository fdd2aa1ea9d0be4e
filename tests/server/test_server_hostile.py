"""The server against hostile or careless clients: malformed bodies, unimplemented fields, absurd max_tokens,
shutdown with requests in flight, a dead engine. Every answer is a 4xx in OpenAI's error shape or a
well-formed ending; never a 500, a truncated stream or a hang. Real model, real server process."""
from __future__ import annotations

import json
import signal
import threading
import time

import httpx
import pytest
from starlette.testclient import TestClient

import pyllama90a as pl
from pyllama90a.server import ServerState, create_app
from pyllama90a.tools.malformed_requests import MUTATIONS, campaign
from pyllama90a.tools.server_process import ServerProcess

pytestmark = pytest.mark.server  # (the test tier: tests/conftest.py)

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def server(model_path):
    with ServerProcess(["--model", str(model_path), "--parallel", "2", "--n-ctx", "2048", "--threads", "2",
                        "--max-tokens-default", "3", "--max-tokens-limit", "64",
                        "--max-request-bytes", "300000"]) as srv:
        yield srv


def _post(server, path: str, **kwargs) -> httpx.Response:
    return httpx.post(server.base_url + path, timeout=60, **kwargs)


def _error(response: httpx.Response, status: int = 400) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error


def _chat_with(content_json: str) -> bytes:
    return (f'{{"messages": [{{"role": "user", "content": {content_json}}}], "max_tokens": 2}}').encode()


MALFORMED = {
    "5000-digit integer": b'{"prompt": "hi", "max_tokens": ' + b"9" * 5000 + b"}",
    "5000-digit negative integer": b'{"prompt": "hi", "seed": -' + b"9" * 5000 + b"}",
    "100000 nested [ (unclosed)": b'{"prompt": ' + b"[" * 100_000,
    "100000 nested [ (closed)": b'{"prompt": "hi", "stop": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    "40 nested objects": b'{"prompt": "hi", "user": ' + b'{"a": ' * 40 + b"1" + b"}" * 40 + b"}",
    "lone surrogate in chat content": _chat_with(r'"caf\ud800e"'),
    "lone low surrogate in chat content": _chat_with(r'"\udfff"'),
    "lone surrogate in a key": b'{"prompt": "hi", "\\ud800": 1}',
    "NaN": b'{"prompt": "hi", "temperature": NaN}',
    "Infinity": b'{"prompt": "hi", "top_p": -Infinity}',
    "a number past a double": b'{"prompt": "hi", "temperature": 1e999}',
    "truncated": b'{"prompt": "hi", "max_tok',
    "not UTF-8": b'{"prompt": "\xff\xfe"}',
    "empty": b"",
    "a JSON string": b'"prompt"',
    "null": b"null",
}


@pytest.mark.parametrize("name", list(MALFORMED))
@pytest.mark.parametrize("path", [COMPLETIONS, CHAT, "/v1/embeddings", "/completion", "/tokenize", "/detokenize",
                                  "/apply-template", "/embeddings"])
def test_malformed_bodies_are_400(server, path, name) -> None:
    _error(_post(server, path, content=MALFORMED[name], headers={"content-type": "application/json"}))


def test_surrogates_name_the_field(server) -> None:
    assert _error(_post(server, CHAT, content=_chat_with(r'"\ud800"')))["param"] == "messages[0].content"
    error = _error(_post(server, COMPLETIONS, content=b'{"prompt": "hi", "stop": ["a", "\\udc00"]}'))
    assert error["param"] == "stop[1]"


def test_a_body_over_the_limit_is_413(server) -> None:
    body = json.dumps({"prompt": "word " * 70_000, "max_tokens": 1}).encode()
    assert _error(_post(server, COMPLETIONS, content=body), 413)["code"] == "request_too_large"

    def chunks():  # no Content-Length: the limit holds while the body streams in
        yield body[:200_000]
        yield body[200_000:]
    _error(_post(server, COMPLETIONS, content=chunks()), 413)


def test_a_wrong_content_type_is_read_as_json(server) -> None:
    """(like OpenAI, and like `curl -d`, which sends form encoding): valid JSON is served, garbage is a 400"""
    r = _post(server, COMPLETIONS, content=b'{"prompt": "Hi", "max_tokens": 2}', headers={"content-type": "text/plain"})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
    _error(_post(server, COMPLETIONS, content=b"prompt=Hi",
                 headers={"content-type": "application/x-www-form-urlencoded"}))


# (response_format, grammar, json_schema and logit_bias are implemented: tests/server/test_server_structured.py)
@pytest.mark.parametrize("field, value", [
    ("tools", [{"type": "function", "function": {"name": "f"}}]),
    ("tool_choice", "auto"),
    ("tool_choice", {"type": "function", "function": {"name": "f"}}),
    ("functions", [{"name": "f"}]),
    ("function_call", "auto"),
    ("best_of", 2),
    ("echo", True),
    ("suffix", "end"),
    ("n_predict", 5),
    ("mirostat", 2),
    ("repeat_last_n", 128),  # (llama-server's name of penalty_last_n)
    ("repetition_penalty", 1.3),
    ("guided_json", {"type": "object"}),
    ("modalities", ["text", "audio"]),
    ("reasoning_effort", "high"),
])
def test_unimplemented_fields_are_refused_by_name(server, field, value) -> None:
    routes = [(CHAT, {"messages": HI}), (COMPLETIONS, {"prompt": "Hi"})]
    if field == "tools":  # served on chat (tests/server/test_server_tools.py); a prompt has no tools
        routes = routes[1:]
    for path, base in routes:
        error = _error(_post(server, path, json={**base, "max_tokens": 2, field: value}))
        assert error["param"] == field and field in error["message"]


# llama-server's fields that change its answer (images, a time limit, post-sampling probabilities): answered
# from the text alone, they were only named in X-Ignored-Fields (issue 33 item 9); response_fields and id_slot
# are served since issue 36 (test_server_llama_shapes.py), post_sampling_probs on /completion only
# (test_server_llama_stream.py)
LLAMA_SERVER_REFUSED = [("image_data", [{"data": "aGk=", "id": 1}]), ("multimodal_data", ["aGk="]),
                        ("t_max_predict_ms", 1), ("post_sampling_probs", True)]
ROUTES = [("/completion", {"prompt": "Hi"}), (COMPLETIONS, {"prompt": "Hi"}), (CHAT, {"messages": HI})]


@pytest.mark.parametrize("field, value", LLAMA_SERVER_REFUSED)
def test_llama_server_fields_that_change_the_answer_are_refused(server, field, value) -> None:
    for path, base in ROUTES[1:] if field == "post_sampling_probs" else ROUTES:
        error = _error(_post(server, path, json={**base, "max_tokens": 2, field: value}))
        assert error["param"] == field and field in error["message"], path


def test_llama_server_fields_at_their_defaults_are_served(server) -> None:
    body = {"prompt": "Hi", "n_predict": 2, "image_data": [], "multimodal_data": [], "t_max_predict_ms": -1,
            "response_fields": [], "post_sampling_probs": False, "id_slot": -1}
    response = _post(server, "/completion", json=body)
    assert response.status_code == 200 and "X-Ignored-Fields" not in response.headers
    assert _post(server, COMPLETIONS, json={"prompt": "Hi", "max_tokens": 2, "t_max_predict_ms": 0}).status_code == 200


def test_no_op_values_of_unimplemented_fields_are_served(server) -> None:
    body = {"messages": HI, "max_tokens": 2, "response_format": {"type": "text"}, "tools": [], "tool_choice": "none",
            "logit_bias": {}, "best_of": 1, "echo": False, "n": 1, "user": "u", "metadata": {"k": "v"}, "store": False,
            "parallel_tool_calls": True, "modalities": ["text"]}
    assert _post(server, CHAT, json=body).status_code == 200


@pytest.mark.parametrize("message", [
    {"role": "user", "content": "Hi", "name": "alice"},
    {"role": "user", "content": "Hi", "function_call": {"name": "f", "arguments": "{}"}},
])
def test_message_fields_the_template_would_drop_are_refused(server, message) -> None:
    error = _error(_post(server, CHAT, json={"messages": [message], "max_tokens": 2}))
    assert error["param"].startswith("messages[0].")


def test_tool_calls_and_results_in_the_history_are_served(server) -> None:
    call = {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    history = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": "1", "name": "f", "content": "done"}]
    assert _post(server, CHAT, json={"messages": history, "max_tokens": 2}).status_code == 200


@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("value", [65, 2**31, 10**30, 0, -1])
def test_max_tokens_beyond_the_limit(server, field, value) -> None:
    error = _error(_post(server, CHAT, json={"messages": HI, field: value}))
    assert error["param"] == field
    assert "between 1 and 64" in error["message"]


def test_max_tokens_default_and_limit(server) -> None:
    usage = _post(server, CHAT, json={"messages": HI, "ignore_eos": True}).json()["usage"]
    assert usage["completion_tokens"] == 3  # --max-tokens-default, not "until the slot is full"
    usage = _post(server, CHAT, json={"messages": HI, "ignore_eos": True, "max_completion_tokens": 64}).json()["usage"]
    assert usage["completion_tokens"] == 64


def test_no_500_and_still_serving_after_all_that(server) -> None:
    metrics = httpx.get(server.base_url + "/metrics").text
    assert 'code="500"' not in metrics and "pyllama90a_engine_up 1" in metrics
    assert _post(server, COMPLETIONS, json={"prompt": "Hi", "max_tokens": 2}).status_code == 200


# -- shutdown ------------------------------------------------------------------------------------------------

def _wait_for(predicate, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    return predicate()


def _read_stream(url: str, body: dict, events: list, started: threading.Event) -> None:
    try:
        with httpx.stream("POST", url, json=body, timeout=120) as r:
            events.append(r.status_code)
            for line in r.iter_lines():
                if line:
                    events.append(line)
                    started.set()
    except httpx.HTTPError as e:  # a cut connection: recorded, and the test fails on it
        events.append(e)


def test_sigterm_ends_generating_and_queued_streams_with_an_error_event_and_done(model_path) -> None:
    srv = ServerProcess(["--model", str(model_path), "--parallel", "4", "--n-ctx", "4096", "--threads", "2",
                         "--shutdown-grace", "1", "--log-level", "info"]).start()
    body = {"prompt": "Count:", "max_tokens": 1000, "ignore_eos": True, "stream": True}
    clients = [([], threading.Event()) for _ in range(8)]
    threads = [threading.Thread(target=_read_stream, args=(srv.base_url + COMPLETIONS, body, ev, st))
               for ev, st in clients]
    for t in threads[:4]:
        t.start()
    assert all(started.wait(60) for _, started in clients[:4])  # 4 slots generating
    for t in threads[4:]:
        t.start()
    whole: list[httpx.Response] = []  # and a request for a whole answer, queued too
    threads.append(threading.Thread(target=lambda: whole.append(httpx.post(
        srv.base_url + COMPLETIONS, json={**body, "stream": False}, timeout=120))))
    threads[-1].start()
    assert _wait_for(lambda: httpx.get(srv.base_url + "/health").json()["queue_depth"] == 5)  # 5 queued
    code, output = srv.stop(signal.SIGTERM, timeout=60)
    for t in threads:
        t.join(timeout=60)
    assert code == 0, output
    assert _error(whole[0], 503)["code"] == "server_shutting_down"
    for events, _ in clients:
        assert events[0] == 200 and events[-1] == "data: [DONE]", events[-3:]
        last = json.loads(events[-2][len("data: "):])
        assert last["error"]["code"] == "server_shutting_down" and last["error"]["type"] == "server_error"
    assert "Traceback" not in output and "CancelledError" not in output and "stopped" in output


def test_requests_that_finish_within_the_grace_period_end_normally(model_path) -> None:
    srv = ServerProcess(["--model", str(model_path), "--parallel", "2", "--n-ctx", "2048", "--threads", "2",
                         "--shutdown-grace", "60"]).start()
    body = {"prompt": "Count:", "max_tokens": 40, "ignore_eos": True, "stream": True}
    events: list = []
    started = threading.Event()
    reader = threading.Thread(target=_read_stream, args=(srv.base_url + COMPLETIONS, body, events, started))
    reader.start()
    assert started.wait(60)
    srv.proc.send_signal(signal.SIGTERM)
    refused = False
    with pytest.raises(httpx.HTTPError):  # the listener is closed: no new requests
        for _ in range(100):
            r = httpx.post(srv.base_url + COMPLETIONS, json={"prompt": "Hi", "max_tokens": 1}, timeout=10)
            # a request may still be served in full if it arrived before uvicorn's loop saw the signal;
            # once one has been refused, none is served again
            if refused or r.status_code != 200:
                _error(r, 503)
                refused = True
            time.sleep(0.05)
    reader.join(timeout=120)
    # no second SIGTERM: one arriving after the server gave the signal handlers back (while it closes the engine)
    # would end it with -15, as a second signal should
    code, output = srv.stop(None, timeout=60)
    assert code == 0, output
    assert events[-1] == "data: [DONE]" and json.loads(events[-2][6:])["choices"][0]["finish_reason"] == "length"


# -- a dead engine -------------------------------------------------------------------------------------------

def test_a_dead_engine_is_reported_and_requests_get_503(model_path) -> None:
    """The engine thread is ended for real (a consumer's SystemExit escapes a step); the app reports it."""
    engine = pl.BatchEngine(model_path, parallel=1, n_ctx=512, n_threads=2)
    try:
        client = TestClient(create_app(ServerState(engine, "m")))
        assert client.get("/health").status_code == 200
        assert "pyllama90a_engine_up 1" in client.get("/metrics").text

        def exits(chunk: pl.Chunk) -> None:
            raise SystemExit

        engine.submit("Hi", exits, max_tokens=4)
        assert _wait_for(lambda: not engine.running)
        health = client.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "error"
        assert "SystemExit" in health.json()["reason"]
        assert "pyllama90a_engine_up 0" in client.get("/metrics").text
        error = _error(client.post(COMPLETIONS, json={"prompt": "Hi", "max_tokens": 2}), 503)
        assert error["code"] == "engine_stopped"
        assert _error(client.post(CHAT, json={"messages": HI}), 503)["code"] == "engine_stopped"
    finally:
        engine.close()


def test_a_malformed_request_campaign_gets_no_5xx(server) -> None:
    """A bounded sample of pyllama90a.tools.malformed_requests (the long run is its command line)."""
    outcomes, failures = campaign(server.base_url, 150, seed=1)
    assert not failures
    assert {name for name, _ in outcomes} >= set(MUTATIONS)  # every class was sent
    assert sum(n for (_, status), n in outcomes.items() if 400 <= status < 500) > 100
    assert httpx.get(server.base_url + "/health").status_code == 200


def test_limit_flags_are_checked_and_read_from_the_environment(monkeypatch, capsys) -> None:
    from pyllama90a.server.__main__ import parse_args

    monkeypatch.setenv("PYLLAMA90A_MAX_TOKENS_LIMIT", "100")
    monkeypatch.setenv("PYLLAMA90A_SHUTDOWN_GRACE", "2.5")
    args = parse_args(["--max-tokens-default", "50"])
    assert (args.max_tokens_default, args.max_tokens_limit, args.shutdown_grace) == (50, 100, 2.5)
    for bad in (["--max-tokens-default", "101"], ["--max-tokens-limit", "0"], ["--shutdown-grace", "nan"],
                ["--max-request-bytes", "-1"], ["--max-tokens-limit", str(2**31)]):
        with pytest.raises(SystemExit) as e:
            parse_args(bad)
        assert e.value.code == 2 and bad[0] in capsys.readouterr().err
