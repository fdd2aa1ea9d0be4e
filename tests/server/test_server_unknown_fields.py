"""Request fields the server does not know (a typo, another server's extension) are never silently ignored:
--unknown-fields warn (the default) serves the request and names them in an X-Ignored-Fields header and a log
line; --unknown-fields reject answers a 400 naming them. Fields that would change the answer but are not
implemented are a 400 in both modes; fields that change nothing (user, ...) are accepted without a word.
Real model; the app in-process (starlette's TestClient) and once as a real server process."""
from __future__ import annotations

import logging

import httpx
import pytest
from starlette.testclient import TestClient

import pyllama90a as pl
from pyllama90a.server import ServerState, create_app
from pyllama90a.server.app import openapi_document
from pyllama90a.server.protocol.base import Limits
from pyllama90a.server.protocol.embeddings import EmbeddingRequest
from pyllama90a.server.protocol.requests import ChatRequest, CompletionRequest
from pyllama90a.tools.server_process import ServerProcess

pytestmark = pytest.mark.server  # (the test tier: tests/conftest.py)

CHAT, COMPLETIONS, EMBEDDINGS = "/v1/chat/completions", "/v1/completions", "/v1/embeddings"
HI = [{"role": "user", "content": "Hi"}]
BASES = {CHAT: {"messages": HI, "max_tokens": 1}, COMPLETIONS: {"prompt": "Hi", "max_tokens": 1},
         EMBEDDINGS: {"input": "Hi"}}
HEADER = "x-ignored-fields"


@pytest.fixture(scope="module")
def engine(model_path):
    engine = pl.BatchEngine(model_path, parallel=2, n_ctx=512, n_threads=2)
    yield engine
    engine.close()


def _client(engine, mode: str):
    state = ServerState(engine, "m", limits=Limits(unknown_fields=mode))
    with TestClient(create_app(state)) as client:
        yield client
    if state.embedder is not None:
        state.embedder.close()


@pytest.fixture(scope="module")
def warn(engine):
    yield from _client(engine, "warn")


@pytest.fixture(scope="module")
def reject(engine):
    yield from _client(engine, "reject")


def _error(response, status: int = 400) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS, EMBEDDINGS])
def test_warn_serves_and_names_the_unknown_fields_sorted(warn, path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="pyllama90a.server"):
        r = warn.post(path, json={**BASES[path], "temprature": 0.2, "another_servers_field": {"a": 1}})
    assert r.status_code == 200, r.text
    assert r.headers[HEADER] == "another_servers_field, temprature"
    lines = [rec.getMessage() for rec in caplog.records if rec.name.startswith("pyllama90a.server")]
    assert lines == [f"{path}: unknown request field(s) ignored: another_servers_field, temprature"]


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_warn_names_them_on_a_stream_too(warn, path) -> None:
    with warn.stream("POST", path, json={**BASES[path], "stream": True, "temprature": 0.2}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        assert r.headers[HEADER] == "temprature"
        lines = [line for line in r.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"


def test_unknown_fields_of_a_chat_message_are_named_by_place(warn, reject) -> None:
    body = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi", "lang": "en"}],
            "max_tokens": 1, "zz": 1}
    assert warn.post(CHAT, json=body).headers[HEADER] == "messages[1].lang, zz"
    error = _error(reject.post(CHAT, json=body))
    assert error["param"] == "zz" and "messages[1].lang" in error["message"]


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_unknown_fields_of_stream_options_are_named(warn, reject, path) -> None:
    body = {**BASES[path], "stream": True, "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    with warn.stream("POST", path, json=body) as r:
        assert r.status_code == 200 and r.headers[HEADER] == "stream_options.continuous_usage_stats"
    assert "stream_options.continuous_usage_stats" in _error(reject.post(path, json=body))["message"]


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS, EMBEDDINGS])
def test_known_fields_get_no_header(warn, path) -> None:
    extra = {"user": "u", "metadata": {"k": "v"}, "store": False, "model": "m"}
    if path != EMBEDDINGS:
        extra.update(temperature=0.5, seed=1, stop=["\n"], tools=[], response_format={"type": "text"}, n=1)
    r = warn.post(path, json={**BASES[path], **extra})
    assert r.status_code == 200, r.text
    assert HEADER not in r.headers


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS, EMBEDDINGS])
def test_reject_is_a_400_naming_them(reject, path) -> None:
    error = _error(reject.post(path, json={**BASES[path], "temprature": 0.2, "another_servers_field": 1}))
    assert error["param"] == "temprature" and error["code"] == "unknown_field"
    assert error["type"] == "invalid_request_error"
    assert "another_servers_field, temprature" in error["message"]
    r = reject.post(path, json={**BASES[path], "user": "u"})  # known and harmless: still served
    assert r.status_code == 200 and HEADER not in r.headers


@pytest.mark.parametrize("path", [CHAT, COMPLETIONS])
def test_refused_fields_are_a_400_in_both_modes(warn, reject, path) -> None:
    refused = [("functions", [{"name": "f"}]), ("best_of", 2)]
    if path == COMPLETIONS:  # tools are served on chat only
        refused.append(("tools", [{"type": "function", "function": {"name": "f"}}]))
    for client in (warn, reject):
        for field, value in refused:
            error = _error(client.post(path, json={**BASES[path], field: value, "temprature": 1}))
            assert error["param"] == field


def test_embedding_dimensions_are_refused_not_ignored(warn, reject) -> None:
    for client in (warn, reject):
        assert _error(client.post(EMBEDDINGS, json={"input": "Hi", "dimensions": 8}))["param"] == "dimensions"
    assert HEADER not in warn.post(EMBEDDINGS, json={"input": "Hi", "dimensions": None}).headers


def test_a_field_of_another_route_is_unknown(warn) -> None:
    assert warn.post(EMBEDDINGS, json={"input": "Hi", "max_tokens": 8}).headers[HEADER] == "max_tokens"
    assert warn.post(COMPLETIONS, json={**BASES[COMPLETIONS], "messages": HI}).headers[HEADER] == "messages"


def test_hostile_field_names_make_a_bounded_header(warn, reject) -> None:
    body = {**BASES[COMPLETIONS], "a,b": 1, "é\r\nX-Evil: 1": 2, "x" * 10_000: 3,
            **{f"f{i:03}": i for i in range(100)}}
    r = warn.post(COMPLETIONS, json=body)
    assert r.status_code == 200
    header = r.headers[HEADER]
    assert len(header) < 2000 and "X-Evil" not in r.headers and header.isascii()
    assert header.startswith("a%2Cb, f000, f001") and header.endswith("...(83 more)")
    assert len(_error(reject.post(COMPLETIONS, json=body))["message"]) < 2000


def test_every_documented_request_field_is_known() -> None:
    """The OpenAPI document and the known fields cannot drift apart: a field it lists never gets a warning."""
    for limits in (Limits(), Limits(unknown_fields="reject")):
        paths = openapi_document(limits)["paths"]
        for path, model in ((COMPLETIONS, CompletionRequest), (CHAT, ChatRequest), (EMBEDDINGS, EmbeddingRequest)):
            schema = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
            assert set(schema["properties"]) <= set(model.model_fields), path
    assert "X-Ignored-Fields" in openapi_document(Limits())["paths"][CHAT]["post"]["responses"]["200"]["headers"]
    with pytest.raises(ValueError, match="unknown_fields"):
        Limits(unknown_fields="ignore")


def test_the_flag_and_its_environment_variable(monkeypatch, capsys) -> None:
    from pyllama90a.server.__main__ import parse_args

    assert parse_args([]).unknown_fields == "warn"
    monkeypatch.setenv("PYLLAMA90A_UNKNOWN_FIELDS", "reject")
    assert parse_args([]).unknown_fields == "reject"
    assert parse_args(["--unknown-fields", "warn"]).unknown_fields == "warn"
    monkeypatch.setenv("PYLLAMA90A_UNKNOWN_FIELDS", "ignore")
    with pytest.raises(SystemExit) as e:
        parse_args([])
    assert e.value.code == 2 and "--unknown-fields" in capsys.readouterr().err


def test_the_server_process_warns_once_in_its_log_and_rejects_when_asked(model_path) -> None:
    with ServerProcess(["--model", str(model_path), "--parallel", "1", "--n-ctx", "512", "--threads", "2"]) as srv:
        r = httpx.post(srv.base_url + CHAT, json={**BASES[CHAT], "temprature": 0.2, "stream": True}, timeout=60)
        assert r.status_code == 200 and r.headers[HEADER] == "temprature"
        assert r.text.rstrip().endswith("data: [DONE]")
        code, output = srv.stop()
    assert code == 0, output
    assert output.count("unknown request field(s) ignored: temprature") == 1, output
    with ServerProcess(["--model", str(model_path), "--parallel", "1", "--n-ctx", "512", "--threads", "2"],
                       env={"PYLLAMA90A_UNKNOWN_FIELDS": "reject"}) as srv:
        error = _error(httpx.post(srv.base_url + COMPLETIONS, json={**BASES[COMPLETIONS], "temprature": 0.2}))
        assert error["param"] == "temprature"
        openapi = httpx.get(srv.base_url + "/openapi.json").json()
        assert "refused" in openapi["paths"][COMPLETIONS]["post"]["requestBody"]["description"]
