"""The server over an RPC worker: --rpc (and PYLLAMA90A_RPC) reach the engine, and the greedy completion equals
one process's; the placement flags parse as the Model takes them."""
from __future__ import annotations

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
