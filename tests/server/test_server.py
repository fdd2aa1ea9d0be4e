"""python -m pyllama90a.server, driven over loopback by the official `openai` client (and raw HTTP where the
client would hide what is checked: SSE framing, status codes, headers). The server runs the real default
model in a child process, as users run it."""
from __future__ import annotations

import base64
import json
import os
import signal
import threading
import time

import httpx
import numpy as np
import openai
import pytest

import pyllama90a as pl
from pyllama90a.tools.server_process import ServerProcess

pytestmark = pytest.mark.server  # (the test tier: tests/conftest.py)

KV = ["--ctk", "q8_0", "--ctv", "q8_0"]
PROMPTS = ["The capital of France is", "Once upon a time, in a small village,", "def fibonacci(n):",
           "The three primary colors are", "Water boils at", "My favourite book is",
           "The quick brown fox", "In 1969, the first humans"]


@pytest.fixture(scope="module")
def server(model_path):
    with ServerProcess(["--model", str(model_path), *KV, "--parallel", "4", "--n-ctx", "4096", "--threads", "2",
                        "--model-name", "smollm2"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


def _greedy(client: openai.OpenAI, prompt: str, max_tokens: int = 16) -> str:
    r = client.completions.create(model="smollm2", prompt=prompt, max_tokens=max_tokens, temperature=0)
    return r.choices[0].text


# How far apart (nats) two candidate tokens may be for a run of another batch shape to pick the other one: a batch
# of 8 tokens (or a prompt's last token decoded alone after a cache hit) takes other CPU kernels than one token, and
# their results round differently. Greedy text is the same across batch shapes only up to such a near-tie.
NEAR_TIE = 0.25


def _greedy_steps(client: openai.OpenAI, prompt: str, max_tokens: int) -> list[tuple[str, dict[str, float]]]:
    """The greedy tokens of a request alone, each with its top candidates' logprobs."""
    r = client.completions.create(model="smollm2", prompt=prompt, max_tokens=max_tokens, temperature=0, logprobs=5)
    return list(zip(r.choices[0].logprobs.tokens, r.choices[0].logprobs.top_logprobs, strict=True))


def _assert_greedy_path(text: str, steps: list[tuple[str, dict[str, float]]], what: str) -> None:
    """`text` is the greedy continuation `steps` describes, token for token up to the first place where it takes
    the runner-up of a near-tie (from there on it is another greedy path)."""
    expected = "".join(token for token, _ in steps)
    if text == expected:
        return
    prefix = ""
    for token, top in steps:
        if not text.startswith(prefix + token):
            runner_up = next((t for t in top if t != token and text.startswith(prefix + t)), None)
            assert runner_up is not None and top[token] - top[runner_up] < NEAR_TIE, (
                f"{what}: {text!r} left the greedy path {expected!r} after {prefix!r} where {token!r} led every "
                f"other candidate by {NEAR_TIE} nats or more ({top})")
            return
        prefix += token
    raise AssertionError(f"{what}: {text!r} is not the greedy path {expected!r}")


def _error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) >= {"message", "type", "param", "code"} and error["message"]
    return error


# -- routes ------------------------------------------------------------------------------------------

def test_models_and_health(server, client) -> None:
    assert [m.id for m in client.models.list().data] == ["smollm2"]
    assert client.models.retrieve("smollm2").owned_by == "pyllama90a"
    health = httpx.get(server.base_url + "/health").json()
    assert health["status"] == "ok" and health["slots_busy"] + health["slots_idle"] == 4
    _error(httpx.get(server.base_url + "/v1/models/gpt-4"), 404)
    _error(httpx.get(server.base_url + "/v1/nothing-here"), 404)


def test_greedy_completion_matches_the_library(server, client, model_path) -> None:
    served = client.completions.create(model="smollm2", prompt=PROMPTS[0], max_tokens=16, temperature=0)
    with pl.Model(model_path, ctk="q8_0", ctv="q8_0", n_ctx=1024, n_threads=2) as m:
        local = m.generate(PROMPTS[0], max_tokens=16, temperature=0)
    choice = served.choices[0]
    assert choice.text == local.text and choice.finish_reason == local.finish_reason
    assert served.usage.prompt_tokens == local.usage.prompt_tokens
    assert served.usage.completion_tokens == local.usage.completion_tokens
    assert served.usage.total_tokens == served.usage.prompt_tokens + served.usage.completion_tokens
    assert served.object == "text_completion" and served.id.startswith("cmpl-")


def test_prompt_as_token_ids(client, model_path) -> None:
    with pl.Model(model_path, n_ctx=256) as m:
        tokens = m.tokenize(PROMPTS[0])
    by_ids = client.completions.create(model="smollm2", prompt=tokens, max_tokens=8, temperature=0).choices[0].text
    _assert_greedy_path(by_ids, _greedy_steps(client, PROMPTS[0], 8), "prompt as token ids")


def test_streamed_completion_equals_the_whole_one(client) -> None:
    whole = _greedy_steps(client, PROMPTS[1], 24)
    chunks = list(client.completions.create(model="smollm2", prompt=PROMPTS[1], max_tokens=24, temperature=0,
                                            stream=True))
    # (the second request finds the prompt in the slot's cache and decodes its last token alone)
    _assert_greedy_path("".join(c.choices[0].text for c in chunks), whole, "streamed")
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])


def test_chat_streaming_and_not(client) -> None:
    messages = [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "Name a fruit."}]
    whole = client.chat.completions.create(model="smollm2", messages=messages, max_tokens=20, temperature=0)
    assert whole.object == "chat.completion" and whole.choices[0].message.role == "assistant"
    text = whole.choices[0].message.content
    assert text and whole.usage.completion_tokens > 0
    chunks = list(client.chat.completions.create(model="smollm2", messages=messages, max_tokens=20, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-2].choices[0].finish_reason == whole.choices[0].finish_reason


def test_sse_framing_ends_with_done(server) -> None:
    body = {"prompt": PROMPTS[2], "max_tokens": 5, "temperature": 0, "stream": True}
    with httpx.stream("POST", server.base_url + "/v1/completions", json=body, timeout=60) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    assert json.loads(lines[-2][6:])["choices"][0]["finish_reason"] == "length"


def test_stop_strings_and_unknown_fields(server, client) -> None:
    text = _greedy(client, PROMPTS[0], 16)
    assert "\n" in text  # the unconstrained continuation has a newline ...
    r = httpx.post(server.base_url + "/v1/completions", timeout=60, json={
        "prompt": PROMPTS[0], "max_tokens": 16, "temperature": 0, "stop": ["\n"], "user": "x", "some_new_field": 1})
    choice = r.json()["choices"][0]
    assert choice["text"] == text[:text.index("\n")] and choice["finish_reason"] == "stop"  # ... cut before it


def test_logprobs(client) -> None:
    r = client.completions.create(model="smollm2", prompt=PROMPTS[0], max_tokens=6, temperature=0, logprobs=3)
    lp = r.choices[0].logprobs
    assert "".join(lp.tokens) == r.choices[0].text and len(lp.token_logprobs) == 6
    for chosen, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert len(top) == 3 and value <= 0
        assert max(top.values()) == pytest.approx(value) and top[chosen] == pytest.approx(value)  # greedy: the best
    chat = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "Hi"}],
                                          max_tokens=4, temperature=0, logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert "".join(c.token for c in content) == chat.choices[0].message.content
    assert all(len(c.top_logprobs) == 2 and c.top_logprobs[0].logprob == pytest.approx(c.logprob) for c in content)
    assert bytes(content[0].bytes).decode() == content[0].token


def test_legacy_logprobs_of_tokens_inside_a_character(client) -> None:
    # tokens holding part of an emoji's UTF-8: decoded alone each was U+FFFD, so text_offset ran past the text
    # and the alternatives collapsed into one key; OpenAI writes such a token "bytes:\\xNN..."
    r = client.completions.create(model="smollm2", prompt="Emoji list: 🤖 🎉 🚀 🤖 🎉 🚀 🤖 🎉", max_tokens=8,
                                  temperature=0, logprobs=5)
    text, lp = r.choices[0].text, r.choices[0].logprobs
    assert any(t.startswith("bytes:") for t in lp.tokens), lp.tokens  # (the test sees such tokens)
    for token, offset in zip(lp.tokens, lp.text_offset, strict=True):
        if not token.startswith("bytes:"):
            assert text[offset:offset + len(token)] == token, (token, offset, text)
    assert lp.text_offset == sorted(lp.text_offset) and lp.text_offset[-1] < len(text)
    for chosen, value, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, strict=True):
        assert len(top) == 5 and top[chosen] == pytest.approx(value) == pytest.approx(max(top.values()))


def test_seeded_sampling_is_reproducible(client) -> None:
    def sample(seed: int) -> str:
        return client.completions.create(model="smollm2", prompt=PROMPTS[5], max_tokens=12, temperature=1.0,
                                         seed=seed).choices[0].text
    assert sample(7) == sample(7)
    assert len({sample(s) for s in (1, 2, 3)}) > 1


def test_embeddings_match_the_library(client, model_path) -> None:
    texts = ["hello world", "a completely different sentence about finance"]
    floats = client.embeddings.create(model="smollm2", input=texts, encoding_format="float")
    as_b64 = httpx.post(str(client.base_url) + "embeddings", json={"input": texts, "encoding_format": "base64"},
                        timeout=60).json()
    with pl.Model(model_path, embedding=True, n_ctx=512) as m:
        local = m.embed(texts)
    for i, item in enumerate(floats.data):
        vec = np.array(item.embedding, dtype=np.float32)
        decoded = np.frombuffer(base64.b64decode(as_b64["data"][i]["embedding"]), dtype="<f4")
        np.testing.assert_allclose(vec, local[i], atol=1e-5)
        np.testing.assert_array_equal(decoded, vec)
    assert floats.usage.prompt_tokens > 0


def test_metrics(server, client) -> None:
    _greedy(client, PROMPTS[3], 4)
    text = httpx.get(server.base_url + "/metrics").text
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
              if line and not line.startswith("#")}
    assert values["pyllama90a_requests_total"] >= 1 and values["pyllama90a_completion_tokens_total"] >= 4
    assert values["pyllama90a_slots_total"] == 4 and values["pyllama90a_queue_depth"] == 0
    assert 'pyllama90a_kv_cache_info{type_k="q8_0",type_v="q8_0"' in text
    assert "pyllama90a_generation_tokens_per_second" in values
    assert values['pyllama90a_http_responses_total{route="/v1/completions",code="200"}'] >= 1


# -- concurrency -------------------------------------------------------------------------------------------

def _concurrently(fn, args: list) -> list:
    results: list = [None] * len(args)

    def run(i: int) -> None:
        results[i] = fn(args[i])

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(args))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return results


def test_eight_streaming_clients_get_their_own_greedy_outputs(client) -> None:
    """Each of 8 clients in one decode batch gets the greedy continuation of its own prompt: token for token
    what it gets alone, up to a near-tie of the alone run (where batched rounding may pick the runner-up)."""
    alone = [_greedy_steps(client, p, 20) for p in PROMPTS]

    def streamed(prompt: str) -> str:
        return "".join(c.choices[0].text for c in client.completions.create(
            model="smollm2", prompt=prompt, max_tokens=20, temperature=0, stream=True))

    for prompt, text, steps in zip(PROMPTS, _concurrently(streamed, PROMPTS), alone, strict=True):
        _assert_greedy_path(text, steps, f"batched {prompt!r}")


def test_failing_requests_do_not_disturb_the_batch(server, client) -> None:
    alone = [_greedy_steps(client, p, 20) for p in PROMPTS[:3]]
    bad_bodies = [{"prompt": PROMPTS[0], "max_tokens": -1}, {"prompt": "word " * 3000, "max_tokens": 4},
                  {"prompt": PROMPTS[0], "temperature": "hot"}]

    def job(i: int):
        if i < 3:
            return _greedy(client, PROMPTS[i], 20)
        return httpx.post(server.base_url + "/v1/completions", json=bad_bodies[i - 3], timeout=60).status_code

    results = _concurrently(job, list(range(6)))
    assert results[3:] == [400, 400, 400]
    for text, steps in zip(results[:3], alone, strict=True):
        _assert_greedy_path(text, steps, "beside failing requests")


def test_disconnect_frees_the_slot_at_once(server, client) -> None:
    body = {"prompt": PROMPTS[1], "max_tokens": 1000, "temperature": 0, "stream": True, "ignore_eos": True}
    alone = [_greedy_steps(client, p, 24) for p in PROMPTS[2:4]]
    with httpx.stream("POST", server.base_url + "/v1/completions", json=body, timeout=60) as r:
        lines = r.iter_lines()
        next(lines)
        # two other clients decode in the same batches while this one goes away
        results: list = []
        others = threading.Thread(target=lambda: results.extend(_concurrently(
            lambda p: _greedy(client, p, 24), PROMPTS[2:4])))
        others.start()
        for _ in range(3):
            next(lines)
        assert httpx.get(server.base_url + "/health").json()["slots_busy"] >= 1
    # connection closed: the slot must be free long before 1000 tokens could have been made
    others.join(timeout=120)
    deadline = time.monotonic() + 5
    while httpx.get(server.base_url + "/health").json()["slots_busy"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert httpx.get(server.base_url + "/health").json()["slots_busy"] == 0
    for text, steps in zip(results, alone, strict=True):  # the batch-mates were not disturbed
        _assert_greedy_path(text, steps, "beside a client that went away")
    _assert_greedy_path(_greedy(client, PROMPTS[2], 24), alone[0], "after it")


def test_a_client_gone_before_a_whole_answer_frees_the_slot(server) -> None:
    body = {"prompt": PROMPTS[4], "max_tokens": 1000, "ignore_eos": True}  # not streamed
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.base_url + "/v1/completions", json=body, timeout=1.0)
    deadline = time.monotonic() + 5
    while httpx.get(server.base_url + "/health").json()["slots_busy"] and time.monotonic() < deadline:
        time.sleep(0.05)
    assert httpx.get(server.base_url + "/health").json()["slots_busy"] == 0


# -- bad input ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("body, param", [
    ({"max_tokens": 4}, "prompt"),
    ({"prompt": 42}, "prompt"),
    ({"prompt": ["a", "b"]}, "prompt"),
    ({"prompt": [1, "x"]}, "prompt"),
    ({"prompt": [999999999]}, None),
    ({"prompt": "hi", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "hi", "max_tokens": "ten"}, "max_tokens"),
    ({"prompt": "hi", "temperature": 5}, "temperature"),
    ({"prompt": "hi", "top_p": None, "stop": 3}, "stop"),
    ({"prompt": "hi", "n": 129}, "n"),
    ({"prompt": "hi", "stream": "yes"}, "stream"),
    ({"prompt": "hi", "logprobs": 9}, "logprobs"),
])
def test_bad_completion_requests(server, body, param) -> None:
    error = _error(httpx.post(server.base_url + "/v1/completions", json=body, timeout=30), 400)
    assert error["type"] == "invalid_request_error" and error["param"] == param


@pytest.mark.parametrize("body, param", [
    ({}, "messages"),
    ({"messages": []}, "messages"),
    ({"messages": [{"content": "no role"}]}, "messages[0]"),
    ({"messages": [{"role": "user", "content": 3}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2}, "top_logprobs"),
])
def test_bad_chat_requests(server, body, param) -> None:
    error = _error(httpx.post(server.base_url + "/v1/chat/completions", json=body, timeout=30), 400)
    assert error["param"] == param


def test_malformed_bodies(server) -> None:
    for raw in (b"{not json", b"[1, 2]", b"\xff\xfe", b""):
        _error(httpx.post(server.base_url + "/v1/chat/completions", content=raw, timeout=30), 400)
    _error(httpx.post(server.base_url + "/v1/embeddings", json={"input": ["x", 2.5]}, timeout=30), 400)  # no id
    _error(httpx.post(server.base_url + "/v1/embeddings", json={"input": "x", "encoding_format": "int8"}), 400)


def test_prompt_too_long_for_a_slot(client) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model="smollm2", prompt="word " * 1100, max_tokens=4)  # a slot holds 1024
    assert e.value.code == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "word " * 1100}])


# -- settings, auth, queue, shutdown (a second server: one slot, one queue place, an API key) ---------------

@pytest.fixture(scope="module")
def small_server(model_path):
    env = {"PYLLAMA90A_MODEL": str(model_path), "PYLLAMA90A_CTK": "q4_0", "PYLLAMA90A_CTV": "q4_0",
           "PYLLAMA90A_PARALLEL": "1", "PYLLAMA90A_QUEUE_SIZE": "1", "PYLLAMA90A_API_KEY": "s3cret",
           "PYLLAMA90A_N_CTX": "2048"}
    with ServerProcess(["--threads", "2", "--ctk", "q8_0"], env=env) as srv:  # a flag wins over its variable
        yield srv


def test_api_key(small_server) -> None:
    url = small_server.base_url + "/v1"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=url, api_key="wrong", max_retries=0).models.list()
    assert _error(httpx.get(url + "/models"), 401)["code"] == "invalid_api_key"  # no key at all
    authed = openai.OpenAI(base_url=url, api_key="s3cret", max_retries=0)
    assert authed.completions.create(model="m", prompt="Hi", max_tokens=2).usage.completion_tokens >= 1
    assert httpx.get(small_server.base_url + "/health").status_code == 200  # liveness needs no key


def test_settings_from_environment_and_flags(small_server) -> None:
    text = httpx.get(small_server.base_url + "/metrics", headers={"X-Api-Key": "s3cret"}).text  # (behind the key)
    assert 'type_k="q8_0",type_v="q4_0"' in text and 'n_ctx="2048",n_ctx_slot="2048"' in text


def test_queue_full_gives_429_with_retry_after(small_server) -> None:
    url, headers = small_server.base_url + "/v1/completions", {"Authorization": "Bearer s3cret"}
    long_body = {"prompt": "Count:", "max_tokens": 2000, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", url, json=long_body, headers=headers, timeout=60) as busy:
        events = busy.iter_lines()  # (kept: a dropped iterator closes the response, which frees the slot)
        next(events)  # the only slot is generating
        waiting = threading.Thread(target=httpx.post, args=(url,), kwargs={
            "json": {"prompt": "Hi", "max_tokens": 2}, "headers": headers, "timeout": 120})
        waiting.start()
        deadline = time.monotonic() + 10
        while httpx.get(small_server.base_url + "/health").json()["queue_depth"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        r = httpx.post(url, json={"prompt": "Hi", "max_tokens": 2}, headers=headers, timeout=30)
        error = _error(r, 429)
        assert r.headers["retry-after"] == "1" and error["code"] == "rate_limit_exceeded"
    waiting.join(timeout=120)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_clean_shutdown(model_path, sig) -> None:
    srv = ServerProcess(["--model", str(model_path), "--threads", "2", "--n-ctx", "1024"]).start()
    banner_ok = httpx.get(srv.base_url + "/health").status_code == 200
    code, output = srv.stop(sig)
    assert banner_ok and code == 0
    assert f"listening on http://127.0.0.1:{srv.port}/v1" in output and "KV cache: K q8_0" in output
    assert "stopped" in output


def test_bad_settings_fail_clearly(tmp_path) -> None:
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "pyllama90a.server", "--model", str(tmp_path / "none.gguf")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "none.gguf" in r.stderr
    r = subprocess.run([sys.executable, "-m", "pyllama90a.server", "--ctk", "q3_0"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "--ctk" in r.stderr
    env = {**os.environ, "PYLLAMA90A_FLASH_ATTN": "maybe"}
    r = subprocess.run([sys.executable, "-m", "pyllama90a.server"], capture_output=True, text=True, timeout=60,
                       env=env)
    assert r.returncode == 2 and "--flash-attn" in r.stderr and "maybe" in r.stderr
