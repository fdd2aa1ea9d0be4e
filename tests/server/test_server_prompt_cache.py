"""The prompt cache over HTTP (issue 36, item 7): usage.prompt_tokens_details.cached_tokens and timings.cache_n
on chat and completions, stream or not, and --cache-ram restoring a system prompt that an unrelated chat took
the only slot from. One server: 1 slot, a 64 MiB RAM cache."""
from __future__ import annotations

import json

import httpx
import pytest

from pyllama90a.server.__main__ import parse_args
from pyllama90a.tools.server_process import ServerProcess

pytestmark = pytest.mark.server  # (the test tier: tests/conftest.py)

SYSTEM = "You are a careful assistant. " + " ".join(f"Rule {i}: answer item {i} briefly." for i in range(24))


@pytest.fixture(scope="module")
def http(model_path):
    with ServerProcess(["--model", str(model_path), "--parallel", "1", "--n-ctx", "1024", "--threads", "2",
                        "--cache-ram", "64"]) as srv, httpx.Client(base_url=srv.base_url, timeout=300) as client:
        yield client


def _chat(http: httpx.Client, system: str, question: str, **extra: object) -> httpx.Response:
    return http.post("/v1/chat/completions", json={
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
        "max_tokens": 3, "temperature": 0, **extra})


def _cached(answer: dict) -> int:
    usage, timings = answer["usage"], answer["timings"]
    assert timings["prompt_n"] + timings["cache_n"] == usage["prompt_tokens"] and timings["prompt_n"] >= 1
    assert timings["cache_n"] == usage["prompt_tokens_details"]["cached_tokens"]
    return timings["cache_n"]


def test_cached_tokens_and_cache_n_through_the_ram_cache(http) -> None:
    first = _chat(http, SYSTEM, "What is two plus two?").json()
    assert _cached(first) == 0
    _chat(http, "You are a poet.", "Write about the sea and its ships.")  # takes the only slot
    again = _chat(http, SYSTEM, "Name a red fruit.").json()
    cached = _cached(again)
    # the system prompt and the template's tokens before the question came back from the RAM cache
    assert cached > 200 and cached < again["usage"]["prompt_tokens"] - 5
    same = _chat(http, SYSTEM, "Name a red fruit.").json()  # the same prompt: all but its last token
    assert _cached(same) == same["usage"]["prompt_tokens"] - 1


def test_a_stream_and_completions_report_cached_tokens(http) -> None:
    with http.stream("POST", "/v1/chat/completions", json={
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Name a red fruit."}],
            "max_tokens": 3, "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    assert events[-1]["usage"]["prompt_tokens_details"]["cached_tokens"] == events[-1]["usage"]["prompt_tokens"] - 1
    finish = next(e for e in events if e.get("timings"))
    assert finish["timings"]["cache_n"] == events[-1]["usage"]["prompt_tokens"] - 1
    body = {"prompt": SYSTEM, "max_tokens": 2, "temperature": 0}
    http.post("/v1/completions", json=body)
    answer = http.post("/v1/completions", json=body).json()
    assert _cached(answer) == answer["usage"]["prompt_tokens"] - 1


@pytest.mark.parametrize("value", ["-1", "x", str((1 << 30) + 1)])
def test_a_bad_cache_ram_is_refused(value) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--cache-ram", value])
    assert parse_args(["--cache-ram", "256"]).cache_ram == 256 and parse_args([]).cache_ram == 0
