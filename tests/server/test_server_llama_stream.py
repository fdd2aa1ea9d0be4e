"""llama-server's stream extensions that need a prompt longer than one batch (issue 36): return_progress reports
after each batch of the prompt. One real server on the default model with a small --n-batch, over loopback."""
from __future__ import annotations

import json

import httpx
import pytest

from pyllama90a.tools.server_process import ServerProcess

pytestmark = pytest.mark.server

N_BATCH = 16
LONG = [{"role": "user", "content": "This is a test. " * 12}]


@pytest.fixture(scope="module")
def http(model_path):
    with ServerProcess(["--model", str(model_path), "--parallel", "1", "--n-ctx", "512", "--n-batch", str(N_BATCH),
                        "--threads", "2", "--temp", "0"]) as srv, \
            httpx.Client(base_url=srv.base_url, timeout=120) as client:
        yield client


def _events(http: httpx.Client, path: str, body: dict) -> list[dict]:
    with http.stream("POST", path, json={**body, "stream": True}) as response:
        assert response.status_code == 200, response.read()
        lines = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    return [json.loads(line) for line in lines if line != "[DONE]"]


def _progress(events: list[dict]) -> list[dict]:
    return [e["prompt_progress"] for e in events if "prompt_progress" in e]


@pytest.mark.parametrize("path,body", [
    ("/chat/completions", {"messages": LONG, "max_tokens": 3, "stream_options": {"include_usage": True}}),
    ("/completion", {"prompt": "This is a test. " * 12, "n_predict": 3})])
def test_return_progress_reports_each_batch_of_the_prompt(http, path, body) -> None:
    for again in (False, True):  # (the second time, most of the prompt comes from the slot's cache)
        events = _events(http, path, {**body, "return_progress": True})
        reports = _progress(events)
        first, last = reports[0], reports[-1]
        total = last["total"]
        assert first["processed"] == first["cache"] and (first["cache"] > 0) == again
        assert [r["processed"] for r in reports] == sorted({r["processed"] for r in reports})  # each batch further
        assert all(r["total"] == total and r["cache"] == first["cache"] for r in reports)
        assert last["processed"] == total
        assert len(reports) == 1 + -(-(total - first["cache"]) // N_BATCH)  # the first, then one per batch
        if path == "/chat/completions":
            assert total == events[-1]["usage"]["prompt_tokens"]
            assert all(e["choices"][0]["delta"] == {"role": "assistant", "content": None}
                       for e in events if "prompt_progress" in e)
        else:
            assert total == events[-1]["tokens_evaluated"]
    plain = _events(http, path, body)  # (asked for only)
    assert not _progress(plain)
