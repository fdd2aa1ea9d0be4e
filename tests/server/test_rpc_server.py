"""The server over an RPC worker: --rpc (and PYLLAMA90A_RPC) reach the engine, and the greedy completion equals
one process's; a lost worker is reported and the server serves again once it is back; the placement flags
parse as the Model takes them."""
from __future__ import annotations

import re
import time

import httpx
import pytest

import pyllama90a as pl
from pyllama90a.server.__main__ import parse_args
from pyllama90a.tools.server_process import ServerProcess
from pyllama90a.tools.worker_process import WorkerProcess

pytestmark = pytest.mark.server

PROMPT = "The capital of France is"
KV = ["--ctk", "q4_0", "--ctv", "q4_0", "--flash-attn", "off"]


def test_placement_flags_and_their_environment_variables(monkeypatch):
    monkeypatch.setenv("PYLLAMA90A_RPC", "10.0.0.2:50052,10.0.0.3:50052")
    monkeypatch.setenv("PYLLAMA90A_TENSOR_SPLIT", "3,1")
    args = parse_args(["--split-mode", "row", "--main-gpu", "1"])
    assert (args.rpc, args.tensor_split, args.split_mode, args.main_gpu) == (
        ["10.0.0.2:50052", "10.0.0.3:50052"], [3.0, 1.0], "row", 1)
    with pytest.raises(SystemExit):
        parse_args(["--split-mode", "diagonal"])


def test_the_server_over_a_worker_answers_as_one_process(model_path):
    with pl.Model(model_path, ctk="q4_0", ctv="q4_0", flash_attn="off", n_ctx=1024) as local:
        want = local.generate(PROMPT, max_tokens=12, temperature=0).text
    with WorkerProcess() as worker, ServerProcess(["--model", str(model_path), *KV, "--parallel", "1", "--n-ctx",
                                                   "1024", "--threads", "1", "--model-name", "m"],
                                                  env={"PYLLAMA90A_RPC": worker.endpoint}) as server:
        reply = httpx.post(server.base_url + "/v1/completions", timeout=120,
                           json={"model": "m", "prompt": PROMPT, "max_tokens": 12, "temperature": 0})
        received = worker.link_bytes()
    assert received > 50 * 2**20  # the layers went to the worker (the default model: about 90 MiB of weights)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["text"] == want


def _complete(server: ServerProcess) -> httpx.Response:
    return httpx.post(server.base_url + "/v1/completions", timeout=120,
                      json={"model": "m", "prompt": PROMPT, "max_tokens": 12, "temperature": 0})


def _metric(server: ServerProcess, name: str) -> float:
    text = httpx.get(server.base_url + "/metrics", timeout=30).text
    found = re.search(rf"^pyllama90a_{name} (\S+)$", text, re.MULTILINE)
    assert found, f"{name} not in /metrics"
    return float(found.group(1))


def test_a_lost_worker_is_reported_and_the_server_serves_again_once_it_is_back(model_path):
    worker = WorkerProcess().start()
    try:
        with ServerProcess(["--model", str(model_path), *KV, "--parallel", "1", "--n-ctx", "1024", "--threads", "1",
                            "--model-name", "m", "--rpc", worker.endpoint]) as server:
            first = _complete(server)
            assert first.status_code == 200, first.text
            worker.stop()  # killed while the server is idle: the loss shows at the next request

            lost = _complete(server)
            assert lost.status_code in (500, 503), lost.text
            assert f"RPC worker {worker.endpoint}" in lost.json()["error"]["message"]
            health = httpx.get(server.base_url + "/health", timeout=30)
            assert health.status_code == 503 and health.json()["lost_workers"] == [worker.endpoint]
            assert _metric(server, "rpc_workers_lost") == 1
            refused = _complete(server)  # refused up front while the worker is away
            assert refused.status_code == 503 and refused.json()["error"]["code"] == "rpc_worker_lost"
            assert server.proc.poll() is None

            worker.start()  # back on the same port: the server loads the model again
            deadline = time.monotonic() + 120
            while httpx.get(server.base_url + "/health", timeout=30).status_code != 200:
                assert time.monotonic() < deadline, "the server did not serve again"
                time.sleep(0.5)
            again = _complete(server)
            assert again.status_code == 200, again.text
            assert again.json()["choices"][0]["text"] == first.json()["choices"][0]["text"]
            native = httpx.post(server.base_url + "/completion", timeout=120,
                                json={"prompt": PROMPT, "n_predict": 12, "temperature": 0})
            assert native.status_code == 200, native.text  # the native routes serve from the new engine too
            assert native.json()["content"] == first.json()["choices"][0]["text"]
            assert (_metric(server, "rpc_workers_lost"), _metric(server, "rpc_worker_losses_total"),
                    _metric(server, "rpc_reloads_total")) == (0, 1, 1)
    finally:
        worker.stop()
