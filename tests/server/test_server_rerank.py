"""llama-server's rerank routes (issue 36, item 6) and what is not served (item 10), on python -m pyllama90a.server.

A real server on a random-weight reranker (pyllama90a.tools.synthetic_reranker): the answer's shape at every
alias, the documents best first, top_n, return_text (and Jina's return_documents), TEI's form, usage in prompt
tokens, and the scores equal to Model.rerank's in this process. The weights are noise: consistency is checked,
never relevance. A real server on the default model (not a reranker): /v1/rerank is a 400 that says so, and
what is not served (images, MCP and built-in tools, the router, Vertex AI) is a 400 naming the field or a 404
naming the feature, never a text-only answer."""
from __future__ import annotations

import subprocess
import sys

import httpx
import numpy as np
import pytest

import pyllama90a as pl
from pyllama90a.tools.server_process import ServerProcess
from pyllama90a.tools.synthetic_reranker import RERANK_TEMPLATE, synthetic_reranker

pytestmark = pytest.mark.server  # (the test tier: tests/conftest.py)

FLAGS = ["--parallel", "1", "--n-ctx", "512", "--threads", "2"]
QUERY = "machine learning is"
DOCUMENTS = ["a machine", "learning is", "paris, capitale de la France", "machine learning is a field of study"]
PATHS = ["/v1/rerank", "/rerank", "/v1/reranking", "/reranking"]


@pytest.fixture(scope="module")
def http():
    with ServerProcess(["--model", str(synthetic_reranker()), *FLAGS]) as srv, \
            httpx.Client(base_url=srv.base_url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def python_scores() -> np.ndarray:
    with pl.Model(synthetic_reranker(), embedding=True, n_ctx=512, n_threads=2) as m:
        return m.rerank(QUERY, DOCUMENTS)


@pytest.fixture(scope="module")
def plain_http(model_path):
    with ServerProcess(["--model", str(model_path), *FLAGS]) as srv, \
            httpx.Client(base_url=srv.base_url, timeout=120) as client:
        yield client


def _ok(response: httpx.Response):
    assert response.status_code == 200, response.text
    return response.json()


def _error(response: httpx.Response, status: int, param: str | None = None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    if status == 400:
        assert error["param"] == param, error
    return error


@pytest.mark.parametrize("path", PATHS)
def test_rerank_answer(http: httpx.Client, python_scores: np.ndarray, path: str) -> None:
    answer = _ok(http.post(path, json={"query": QUERY, "documents": DOCUMENTS}))
    assert answer["object"] == "list" and answer["model"].startswith("synthetic-reranker")
    results = answer["results"]
    assert sorted(r["index"] for r in results) == list(range(len(DOCUMENTS)))
    assert all(set(r) == {"index", "relevance_score"} for r in results)
    scores = [r["relevance_score"] for r in results]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == len(scores)
    for r in results:  # the library's scores, float32 for float32
        assert np.float32(r["relevance_score"]) == python_scores[r["index"]]
    # usage: the tokens of every pair, as the GGUF's rerank template makes them
    with pl.Model(synthetic_reranker(), n_ctx=256, n_threads=1) as vocabulary:
        expected = sum(len(vocabulary.tokenize(RERANK_TEMPLATE.format(query=QUERY, document=d), add_special=False,
                                               parse_special=True)) for d in DOCUMENTS)
    assert answer["usage"] == {"prompt_tokens": expected, "total_tokens": expected}


def test_top_n_and_text(http: httpx.Client) -> None:
    everything = _ok(http.post("/v1/rerank", json={"query": QUERY, "documents": DOCUMENTS}))["results"]
    for top_n in (1, 2, 4, 99):
        for asked in ("return_text", "return_documents"):
            results = _ok(http.post("/v1/rerank", json={"query": QUERY, "documents": DOCUMENTS, "top_n": top_n,
                                                        asked: True}))["results"]
            assert [r["index"] for r in results] == [r["index"] for r in everything][:top_n]
            assert [r["document"] for r in results] == [{"text": DOCUMENTS[r["index"]]} for r in results]


def test_tei_form(http: httpx.Client, python_scores: np.ndarray) -> None:
    answer = _ok(http.post("/rerank", json={"query": QUERY, "texts": DOCUMENTS, "top_n": 3}))
    assert isinstance(answer, list) and len(answer) == 3
    assert all(set(r) == {"index", "score"} for r in answer)
    assert [np.float32(r["score"]) for r in answer] == sorted(python_scores.tolist(), reverse=True)[:3]
    with_text = _ok(http.post("/rerank", json={"query": QUERY, "texts": DOCUMENTS, "return_text": True}))
    assert [r["text"] for r in with_text] == [DOCUMENTS[r["index"]] for r in with_text]


@pytest.mark.parametrize(("body", "param"), [
    ({"query": QUERY, "documents": []}, "documents"),
    ({"query": QUERY, "documents": None}, "documents"),
    ({"query": QUERY, "documents": 123}, "documents"),
    ({"query": QUERY, "documents": [1, 2, 3]}, "documents[0]"),
    ({"query": QUERY}, "documents"),
    ({"documents": DOCUMENTS}, "query"),
    ({"query": 7, "documents": DOCUMENTS}, "query"),
    ({"query": QUERY, "documents": DOCUMENTS, "texts": DOCUMENTS}, "texts"),
    ({"query": QUERY, "documents": DOCUMENTS, "top_n": 0}, "top_n"),
    ({"query": QUERY, "documents": DOCUMENTS, "return_text": "yes"}, "return_text"),
    ({"query": QUERY, "documents": ["short", "a b c d " * 700]}, "documents"),  # (over n_ubatch 2048)
])
def test_bad_requests(http: httpx.Client, body: dict, param: str) -> None:
    _error(http.post("/v1/rerank", json=body), 400, param)


def test_a_reranker_has_no_embeddings(http: httpx.Client) -> None:
    assert "reranker" in _error(http.post("/v1/embeddings", json={"input": "a machine"}), 400, "input")["message"]


def test_rerank_on_a_model_that_is_not_a_reranker(plain_http: httpx.Client) -> None:
    error = _error(plain_http.post("/v1/rerank", json={"query": QUERY, "documents": DOCUMENTS}), 400, "model")
    assert error["code"] == "not_a_reranker" and "not a reranker" in error["message"]


def test_reranking_flag_refuses_a_model_that_is_not_a_reranker(model_path) -> None:
    run = subprocess.run([sys.executable, "-m", "pyllama90a.server", "--model", str(model_path), "--reranking",
                          *FLAGS], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "is not a reranker" in run.stderr


# -- not served (item 10) ----------------------------------------------------------------------------------

def _chat(content: object) -> dict:
    return {"messages": [{"role": "user", "content": content}], "max_tokens": 2}


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/v1/chat/completions", _chat([{"type": "text", "text": "What is this?"},
                                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]),
     "messages[0].content[1]"),
    ("/v1/chat/completions", _chat([{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]),
     "messages[0].content[0]"),
    ("/v1/chat/completions", {**_chat("hi"), "tools": [{"type": "mcp", "server_label": "x"}]}, "tools"),
    ("/v1/chat/completions", {**_chat("hi"), "tools": [{"type": "web_search"}]}, "tools"),
    ("/completion", {"prompt": "What is this?", "image_data": [{"data": "AAAA", "id": 1}]}, "image_data"),
    ("/completion", {"prompt": "What is this?", "multimodal_data": ["AAAA"]}, "multimodal_data"),
    ("/v1/embeddings", {"input": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]},
     "input[0]"),
])
def test_fields_not_served_are_refused(plain_http: httpx.Client, path: str, body: dict, param: str) -> None:
    _error(plain_http.post(path, json=body), 400, param)


@pytest.mark.parametrize(("method", "path", "feature"), [
    ("GET", "/tools", "MCP"), ("POST", "/tools", "MCP"), ("POST", "/models/load", "router"),
    ("POST", "/models/unload", "router"), ("POST", "/predict", "Vertex AI"),
])
def test_routes_not_served_say_so(plain_http: httpx.Client, method: str, path: str, feature: str) -> None:
    error = _error(plain_http.request(method, path, json={}), 404)
    assert error["code"] == "not_supported" and feature in error["message"]
