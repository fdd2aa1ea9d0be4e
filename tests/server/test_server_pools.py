"""Worker threads by kind of work (server/executors.py; issue 33 item 8): embeddings requests held open (one
embedding, the others waiting for the embedder) no longer hold the threads that /tokenize, a completion and
/props need; past a kind's queue a request is a 429 with Retry-After at once; /health names the saturated
kind. And /metrics needs the API key unless --metrics-public. Behaviour, not timing: the waits are generous
(with the default executor, the held requests kept the other routes for minutes). Real model, real server."""
from __future__ import annotations

import asyncio
import threading

import httpx
import pytest
from starlette.testclient import TestClient

import pyllama90a as pl
from pyllama90a.errors import QueueFullError
from pyllama90a.server import ServerState, create_app
from pyllama90a.server.executors import Pool
from pyllama90a.tools.pool_saturation import HeldRequests, probe_all, wait_saturated
from pyllama90a.tools.server_process import ServerProcess

KEY = "sk-pools"
QUEUE = 6
# 2,048 texts (the most a request may have), ~55,000 tokens to embed: tens of seconds of the embedder on 2 cores
# (it stops within 8 texts once its client has gone)
LONG_EMBEDDING = {"input": ["the quick brown fox jumps over the lazy dog " * 3] * 2048}
GENEROUS_S = 30.0


@pytest.fixture(scope="module")
def server(model_path):
    with ServerProcess(["--model", str(model_path), "--parallel", "2", "--n-ctx", "1024", "--threads", "2",
                        "--pool-queue-size", str(QUEUE), "--api-key", KEY]) as srv:
        yield srv


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.base_url, headers={"X-Api-Key": KEY}, timeout=GENEROUS_S) as client:
        yield client


@pytest.mark.server
class TestEmbeddingsHeld:
    """1 + QUEUE embeddings requests held open: the embeddings pool's one thread and its whole queue (more than
    the 6 threads of asyncio's default executor on 2 cores)."""

    @pytest.fixture(scope="class", autouse=True)
    def held(self, server, http):
        with HeldRequests(server.base_url, KEY) as held:
            held.hold("/v1/embeddings", LONG_EMBEDDING, 1 + QUEUE)
            wait_saturated(http, {"embeddings"}, timeout=GENEROUS_S)
            yield held
            assert held.release() == {("/v1/embeddings", "none"): 1 + QUEUE}  # (held to the end, not answered)

    def test_other_routes_answer(self, http) -> None:
        results = probe_all(http, ["completion", "chat", "tokenize", "detokenize", "apply-template", "props"],
                            GENEROUS_S)
        assert {route: status for route, (status, _) in results.items()} == dict.fromkeys(results, 200), results

    def test_health_names_the_saturated_kind(self, http) -> None:
        health = http.get("/health")
        assert health.status_code == 200
        assert health.json()["status"] == "ok" and health.json()["saturated"] == ["embeddings"]

    def test_past_the_queue_a_request_is_429_with_retry_after(self, http) -> None:
        response = http.post("/v1/embeddings", json={"input": "Hi"})
        assert response.status_code == 429, response.text
        assert response.headers["Retry-After"] == "1"
        error = response.json()["error"]
        assert error["code"] == "rate_limit_exceeded" and "embeddings" in error["message"]
        assert 'pyllama90a_pool_refused_total{kind="embeddings"}' in http.get("/metrics").text


@pytest.mark.server
def test_metrics_needs_the_api_key(server) -> None:
    assert httpx.get(server.base_url + "/metrics").status_code == 401
    metrics = httpx.get(server.base_url + "/metrics", headers={"X-Api-Key": KEY})
    assert metrics.status_code == 200 and 'pyllama90a_pool_threads{kind="text"}' in metrics.text


@pytest.mark.server
def test_metrics_public_opens_metrics_only(model_path) -> None:
    with pl.BatchEngine(model_path, parallel=1, n_ctx=256, n_threads=2) as engine:
        state = ServerState(engine, "m", api_key=KEY, metrics_public=True)
        with TestClient(create_app(state)) as client:
            assert client.get("/metrics").status_code == 200
            assert client.get("/v1/models").status_code == 401
            assert client.get("/metrics", headers={"X-Api-Key": KEY}).status_code == 200


def test_a_pool_admits_threads_plus_queue_and_a_cancelled_wait_leaves_it() -> None:
    async def scenario() -> None:
        pool = Pool("k", threads=1, queue=1)
        release = threading.Event()
        running = asyncio.ensure_future(pool.run(release.wait))
        waiting = asyncio.ensure_future(pool.run(lambda: "second"))
        await asyncio.sleep(0.05)
        assert (pool.usage().running, pool.usage().waiting, pool.usage().saturated) == (1, 1, True)
        with pytest.raises(QueueFullError, match="k work is full"):
            await pool.run(lambda: "third")
        waiting.cancel()  # (its client went away before it started)
        await asyncio.sleep(0.05)
        assert pool.usage().waiting == 0
        third = asyncio.ensure_future(pool.run(lambda: "third"))
        ending = asyncio.ensure_future(pool.finish(lambda: "an admitted request's end"))  # (full, never refused)
        await asyncio.sleep(0.05)
        assert pool.usage().waiting == 2
        release.set()
        assert await running is True and await third == "third" and await ending == "an admitted request's end"
        assert pool.usage().refused == 1
        pool.shutdown()
    asyncio.run(scenario())


def test_pool_flags_are_checked_and_read_from_the_environment(monkeypatch, capsys) -> None:
    from pyllama90a.server.__main__ import parse_args

    args = parse_args([])
    assert (args.pool_queue_size, args.metrics_public) == (64, False)
    monkeypatch.setenv("PYLLAMA90A_POOL_QUEUE_SIZE", "3")
    monkeypatch.setenv("PYLLAMA90A_METRICS_PUBLIC", "1")
    args = parse_args([])
    assert (args.pool_queue_size, args.metrics_public) == (3, True)
    with pytest.raises(SystemExit):
        parse_args(["--pool-queue-size", "-1"])
    assert "--pool-queue-size must be at least 0" in capsys.readouterr().err
