"""Reasoning models on /v1/chat/completions (issue 36), as llama-server answers them: the thinking block in
message.reasoning_content and delta.reasoning_content (a stream joins to the whole answer), reasoning_format and
the reasoning budget per request and as server flags, a JSON schema applied after the thinking, llama-server's
add_generation_prompt on /apply-template, and vLLM's continue_final_message.

The default model with Qwen's QwQ-32B chat template (tests/data), whose generation prompt opens the block."""
from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

import pyllama90a as pl
from pyllama90a.server import ServerState, create_app
from pyllama90a.tools.server_process import ServerProcess

pytestmark = pytest.mark.server  # (the test tier: tests/conftest.py)

TEMPLATE = Path(__file__).resolve().parents[1] / "data" / "qwq-32b.jinja"
CHAT = "/v1/chat/completions"
ASK = {"messages": [{"role": "user", "content": "What is 2+2?"}], "temperature": 0, "max_tokens": 40}
SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
          "additionalProperties": False}


@pytest.fixture(scope="module")
def client(model_path):
    engine = pl.BatchEngine(model_path, parallel=1, n_ctx=1024, n_threads=2, chat_template=TEMPLATE.read_text())
    with TestClient(create_app(ServerState(engine, "m"))) as c:
        yield c
    engine.close()


def _message(response) -> dict:
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]


def _streamed(response) -> tuple[str, str]:
    """(reasoning_content, content) of a stream's deltas, joined."""
    assert response.status_code == 200, response.text
    reasoning = content = ""
    for line in response.text.splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                reasoning += choice["delta"].get("reasoning_content") or ""
                content += choice["delta"].get("content") or ""
    return reasoning, content


def test_reasoning_content_whole_and_streamed(client):
    body = {**ASK, "reasoning_budget_tokens": 5}
    whole = _message(client.post(CHAT, json=body))
    assert whole["reasoning_content"] and "</think>" not in whole["content"]
    assert _streamed(client.post(CHAT, json={**body, "stream": True})) == (whole["reasoning_content"],
                                                                           whole["content"])
    raw = _message(client.post(CHAT, json={**body, "reasoning_format": "none"}))
    assert "reasoning_content" not in raw
    assert raw["content"].split("</think>")[0].strip() == whole["reasoning_content"]
    # llama-server's other name for the budget, and -1: the server's (none here: the block runs to max_tokens)
    assert _message(client.post(CHAT, json={**ASK, "thinking_budget_tokens": 5})) == whole
    unlimited = _message(client.post(CHAT, json={**ASK, "reasoning_budget_tokens": -1}))
    assert unlimited["content"] == "" and unlimited["reasoning_content"]


def test_schema_after_the_thinking(client):
    body = {**ASK, "max_tokens": 60, "reasoning_budget_tokens": 8,
            "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}}
    whole = _message(client.post(CHAT, json=body))
    assert not whole["reasoning_content"].startswith("{") and set(json.loads(whole["content"])) == {"answer"}
    assert _streamed(client.post(CHAT, json={**body, "stream": True})) == (whole["reasoning_content"],
                                                                           whole["content"])


def test_bad_reasoning_fields_are_400s(client):
    for field, value in (("reasoning_format", "deepseek-legacy"), ("reasoning_budget_tokens", -2),
                         ("chat_template_kwargs", {"enable_thinking": "false"})):
        response = client.post(CHAT, json={**ASK, field: value})
        assert response.status_code == 400, (field, response.text)
    response = client.post(CHAT, json={**ASK, "continue_final_message": True})  # add_generation_prompt is true
    assert response.status_code == 400 and response.json()["error"]["param"] == "continue_final_message"
    bare = {"messages": ASK["messages"], "chat_template_kwargs": {"add_generation_prompt": False}}
    response = client.post("/apply-template", json=bare)  # (the field's name, not a template variable)
    assert response.status_code == 400 and response.json()["error"]["param"] == "chat_template_kwargs"
    for field, value in (("add_generation_prompt", False), ("reasoning_format", "deepseek")):
        response = client.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 2, field: value})
        assert response.status_code == 400 and response.json()["error"]["param"] == field


def test_template_requests(client):
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hel"}]
    prompt = client.post("/apply-template", json={"messages": messages[:1]}).json()["prompt"]
    assert prompt.endswith("<|im_start|>assistant\n<think>\n")
    bare = client.post("/apply-template", json={"messages": messages[:1], "add_generation_prompt": False})
    assert bare.json()["prompt"] == "<|im_start|>user\nHi<|im_end|>\n"
    continued = client.post(CHAT, json={"messages": messages, "add_generation_prompt": False,
                                        "continue_final_message": True, "max_tokens": 3, "temperature": 0})
    assert continued.status_code == 200, continued.text
    n_prompt = len(client.post("/tokenize", json={"content": "<|im_start|>user\nHi<|im_end|>\n<|im_start|>"
                                                            "assistant\nHel", "add_special": True}).json()["tokens"])
    assert continued.json()["usage"]["prompt_tokens"] == n_prompt


def test_server_flags(model_path):
    flags = ["--model", str(model_path), "--chat-template-file", str(TEMPLATE), "--n-ctx", "512", "--threads", "2",
             "--reasoning-format", "none", "--reasoning-budget", "3"]
    with ServerProcess(flags) as srv, httpx.Client(base_url=srv.base_url, timeout=300) as http:
        raw = _message(http.post(CHAT, json=ASK))
        assert "reasoning_content" not in raw and "</think>" in raw["content"]  # none, and the budget of 3 ended it
        split = _message(http.post(CHAT, json={**ASK, "reasoning_format": "auto"}))
        assert split["reasoning_content"] == raw["content"].split("</think>")[0].strip()
