"""llama-server's surface on python -m pyllama90a.server (issue 21): un-prefixed OpenAI routes, the native
routes (/completion, /tokenize, /detokenize, /apply-template, /props, /slots, list-shaped /embeddings),
system_fingerprint and timings, X-Api-Key, CORS, llamacpp:* metrics, null first content of a tool-call
stream, every embeddings input form, and slots under 256 cells. One real server (the default model) with an
API key, CORS origins and 4 slots in --n-ctx 512, driven over loopback with raw HTTP."""
from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from pyllama90a.server import metrics
from pyllama90a.server.__main__ import parse_args
from pyllama90a.tools.server_process import ServerProcess

pytestmark = pytest.mark.server  # (the test tier: tests/conftest.py)

KEY = "sk-surface-test"
PROMPT = "The capital of France is"
HI = [{"role": "user", "content": "Hi"}]
WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.fixture(scope="module")
def server(model_path):
    # --n-ctx 512 over 4 slots is 128 cells each: llama.cpp's smallest slot is 256, which the server takes
    with ServerProcess(["--model", str(model_path), "--parallel", "4", "--n-ctx", "512", "--threads", "2",
                        "--model-name", "smollm2", "--api-key", KEY,
                        "--cors-origins", "localhost, https://app.example.com"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.base_url, headers={"X-Api-Key": KEY}, timeout=120) as client:
        yield client


def _ok(response: httpx.Response) -> dict:
    assert response.status_code == 200, response.text
    return response.json()


def _error(response: httpx.Response, status: int, param: str | None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["message"]
    return error


def _events(response: httpx.Response) -> list[str]:
    return [line[len("data: "):] for line in response.iter_lines() if line.startswith("data: ")]


def _check_timings(timings: dict, n_prompt: int, predicted_n: int) -> None:
    """llama-server's timings: prompt_n tokens decoded and cache_n reused, n_prompt in all."""
    prompt_n = timings["prompt_n"]
    assert prompt_n + timings["cache_n"] == n_prompt and prompt_n >= 1 and timings["predicted_n"] == predicted_n
    assert timings["prompt_ms"] > 0 and timings["predicted_ms"] >= 0
    if predicted_n > 1 and timings["predicted_ms"] > 0:  # (the rates of the tokens after the first)
        assert timings["predicted_per_second"] == pytest.approx(1e3 * (predicted_n - 1) / timings["predicted_ms"])
        assert timings["predicted_per_token_ms"] == pytest.approx(timings["predicted_ms"] / (predicted_n - 1))
    elif predicted_n == 1:
        assert timings["predicted_per_second"] == timings["predicted_per_token_ms"] == 0.0
    assert timings["prompt_per_second"] == pytest.approx(1e3 * prompt_n / timings["prompt_ms"])


def test_slots_under_256_cells_get_llama_cpps_smallest(http) -> None:
    props = _ok(http.get("/props"))
    assert props["total_slots"] == 4 and props["default_generation_settings"]["n_ctx"] == 256
    slots = _ok(http.get("/slots"))
    assert [s["id"] for s in slots] == [0, 1, 2, 3] and {s["n_ctx"] for s in slots} == {256}


def test_unprefixed_openai_routes(http) -> None:
    assert _ok(http.get("/models")) == _ok(http.get("/v1/models"))
    body = {"messages": HI, "max_tokens": 6, "temperature": 0}
    plain, prefixed = _ok(http.post("/chat/completions", json=body)), _ok(http.post("/v1/chat/completions", json=body))
    assert plain["object"] == "chat.completion"
    assert plain["choices"][0]["message"] == prefixed["choices"][0]["message"]
    _error(http.post("/chat/completions", json={"messages": "Hi"}), 400, "messages")


def test_native_completion_is_the_greedy_completion(http) -> None:
    v1 = _ok(http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 8, "temperature": 0}))
    native = _ok(http.post("/completion", json={"prompt": PROMPT, "n_predict": 8, "temperature": 0,
                                                "return_tokens": True}))
    assert native["content"] == v1["choices"][0]["text"]
    assert native["stop"] is True and native["stop_type"] == "limit" and native["stopping_word"] == ""
    assert native["tokens_predicted"] == len(native["tokens"]) == 8
    assert native["tokens_evaluated"] == v1["usage"]["prompt_tokens"]
    assert native["generation_settings"]["n_predict"] == 8 and native["generation_settings"]["temperature"] == 0
    assert native["prompt"] == PROMPT and native["model"] == "smollm2"
    _check_timings(native["timings"], native["tokens_evaluated"], 8)
    # the tokens are the content's
    assert _ok(http.post("/detokenize", json={"tokens": native["tokens"]}))["content"] == native["content"]
    # llama-server serves /completions the same way
    assert _ok(http.post("/completions", json={"prompt": PROMPT, "n_predict": 8, "temperature": 0}))["content"] == \
        native["content"]


def test_seeds_as_llama_server_takes_them(http) -> None:
    # a uint32 from the low 32 bits; -1 (llama-server's default) and 4294967295 (LLAMA_DEFAULT_SEED) draw one
    def sample(seed: int) -> str:
        return _ok(http.post("/completion", json={"prompt": PROMPT, "n_predict": 24, "temperature": 1.5,
                                                  "top_k": 0, "top_p": 1.0, "min_p": 0.0, "seed": seed}))["content"]
    for random in (-1, 0xFFFFFFFF):
        assert len({sample(random) for _ in range(3)}) > 1, random  # (24 tokens at 1.5: the same thrice is ~never)
    assert sample(-2) == sample(-2) == sample(0xFFFFFFFE)  # (-2 is 0xFFFFFFFE)
    assert sample(2**32 + 7) == sample(7)


def test_native_completion_stop_word(http) -> None:
    content = _ok(http.post("/completion", json={"prompt": PROMPT, "n_predict": 8, "temperature": 0}))["content"]
    stop = content.strip()[2:4]  # a piece of the greedy text past its first word's start
    answer = _ok(http.post("/completion", json={"prompt": PROMPT, "n_predict": 8, "temperature": 0, "stop": [stop]}))
    assert answer["content"] == content[:content.index(stop)]
    assert answer["stop_type"] == "word" and answer["stopping_word"] == stop


def test_native_completion_stream_has_no_done_marker(http) -> None:
    whole = _ok(http.post("/completion", json={"prompt": PROMPT, "n_predict": 6, "temperature": 0,
                                               "return_tokens": True}))
    with http.stream("POST", "/completion", json={"prompt": PROMPT, "n_predict": 6, "temperature": 0,
                                                  "stream": True}) as response:
        assert response.status_code == 200
        events = [json.loads(e) for e in _events(response)]  # ([DONE] would not parse)
    assert [e["stop"] for e in events] == [False] * (len(events) - 1) + [True]
    assert "".join(e["content"] for e in events) == whole["content"]
    assert [t for e in events for t in e["tokens"]] == whole["tokens"]
    assert events[-1]["stop_type"] == "limit"
    _check_timings(events[-1]["timings"], whole["tokens_evaluated"], 6)


def test_native_completion_mixed_prompt_and_probabilities(http) -> None:
    head = _ok(http.post("/tokenize", json={"content": "The capital of"}))["tokens"]
    tail = _ok(http.post("/tokenize", json={"content": " France is"}))["tokens"]
    mixed = _ok(http.post("/completion", json={"prompt": [*head, " France is"], "n_predict": 3, "temperature": 0,
                                               "n_probs": 3}))
    ids = _ok(http.post("/completion", json={"prompt": head + tail, "n_predict": 3, "temperature": 0}))
    assert mixed["tokens_evaluated"] == len(head) + len(tail) and mixed["content"] == ids["content"]
    probs = mixed["completion_probabilities"]
    assert len(probs) == 3 and all(len(p["top_logprobs"]) == 3 for p in probs)
    assert "".join(p["token"] for p in probs) == mixed["content"]
    assert all(p["top_logprobs"][0]["id"] == p["id"] for p in probs)  # greedy: the top candidate is taken
    # logprobs 0 (OpenAI's field): the chosen tokens' logprobs with no alternatives; it was accepted and gave none
    chosen = _ok(http.post("/completion", json={"prompt": head + tail, "n_predict": 3, "temperature": 0,
                                                "logprobs": 0}))["completion_probabilities"]
    assert [(p["id"], p["top_logprobs"]) for p in chosen] == [(p["id"], []) for p in probs]
    assert [p["logprob"] for p in chosen] == pytest.approx([p["logprob"] for p in probs])
    assert "completion_probabilities" not in ids  # (asked for neither)


@pytest.mark.parametrize(("body", "param"), [
    ({"prompt": PROMPT, "n_predict": 0}, "n_predict"),
    ({"prompt": PROMPT, "n_predict": -2}, "n_predict"),
    ({"prompt": PROMPT, "n_predict": 10**9}, "n_predict"),
    ({"prompt": PROMPT, "n_predict": 2, "max_tokens": 0}, "n_predict"),  # (not max_tokens checked away)
    ({"prompt": PROMPT, "max_tokens": 0}, "max_tokens"),
    ({"prompt": PROMPT, "n_probs": 21}, "n_probs"),
    ({"prompt": PROMPT, "n": 2}, "n"),
    ({"prompt": [1, {}], "n_predict": 1}, "prompt"),
    ({"prompt": [1, "x", None]}, "prompt[2]"),
    ({"prompt": PROMPT, "return_tokens": "yes"}, "return_tokens"),
    ({"prompt": PROMPT, "mirostat": 2}, "mirostat"),
    ({}, "prompt"),
])
def test_bad_native_completions_are_a_400_naming_the_field(http, body, param) -> None:
    _error(http.post("/completion", json=body), 400, param)


def _peak_rss_mib(server) -> int:
    with open(f"/proc/{server.proc.pid}/status") as f:
        return int(next(line for line in f if line.startswith("VmHWM")).split()[1]) >> 10


def test_tokenize_with_pieces_costs_no_more_memory_than_the_tokens(server, http, model) -> None:
    # 2 million one-digit tokens (chunks of 65,536 in the answer): with_pieces built a dict per token and the
    # JSON whole, about 380 MB above what the tokens alone take; now the answer is made in chunks as it is read
    digits = "7" * 2_000_000
    ids = _ok(http.post("/tokenize", json={"content": digits}))["tokens"]  # (the peak of tokenizing itself)
    assert ids == model.tokenize(digits, add_special=False)
    before = _peak_rss_mib(server)
    pieces = _ok(http.post("/tokenize", json={"content": digits, "with_pieces": True}))["tokens"]
    grew = _peak_rss_mib(server) - before
    assert [p["id"] for p in pieces] == ids and {p["piece"] for p in pieces} == {"7"}
    assert grew < 100, f"the server's peak grew by {grew} MiB for the pieces"


def test_tokenize_and_detokenize(http, model) -> None:
    text = "Hello world 媽 🤗"
    tokens = _ok(http.post("/tokenize", json={"content": text}))["tokens"]
    assert tokens == model.tokenize(text, add_special=False, parse_special=True)
    assert _ok(http.post("/detokenize", json={"tokens": tokens}))["content"] == text
    pieces = _ok(http.post("/tokenize", json={"content": text, "with_pieces": True}))["tokens"]
    assert [p["id"] for p in pieces] == tokens
    assert any(isinstance(p["piece"], list) for p in pieces)  # a piece that is part of a character: its bytes
    joined = b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"]) for p in pieces)
    assert joined.decode() == text
    special = _ok(http.post("/tokenize", json={"content": "<|im_start|>"}))["tokens"]
    assert len(special) == 1  # parse_special is llama-server's default
    assert len(_ok(http.post("/tokenize", json={"content": "<|im_start|>", "parse_special": False}))["tokens"]) > 1
    _error(http.post("/tokenize", json={"content": 5}), 400, "content")
    _error(http.post("/tokenize", json={"content": "x", "with_pieces": 1}), 400, "with_pieces")
    _error(http.post("/detokenize", json={"tokens": [10**9]}), 400, "tokens")
    _error(http.post("/detokenize", json={"tokens": "1 2"}), 400, "tokens")


def test_apply_template_is_the_prompt_chats_render(http, model) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    prompt = _ok(http.post("/apply-template", json={"messages": messages}))["prompt"]
    assert prompt == model.apply_chat_template(messages)
    with_tools = _ok(http.post("/apply-template", json={"messages": messages, "tools": WEATHER}))["prompt"]
    assert "get_weather" in with_tools and "get_weather" not in prompt
    _error(http.post("/apply-template", json={"messages": []}), 400, "messages")
    _error(http.post("/apply-template", json={"messages": [{"role": "user", "content": 3}]}), 400,
           "messages[0].content")


def test_props(http, model_path, model) -> None:
    props = _ok(http.get("/props"))
    assert props["model_path"] == str(model_path)
    assert props["chat_template"] == model.chat_template.source
    params = props["default_generation_settings"]["params"]
    assert params["n_predict"] == 1024 and params["stop"] == [] and params["seed"] == 0xFFFFFFFF  # (the defaults)


def test_slots_show_a_generating_request(http) -> None:
    assert not any(s["is_processing"] for s in _ok(http.get("/slots")))
    # The engine does not wait for the client: the first token's event can reach it after all 200 tokens (seen
    # on a loaded 2-core machine, and once in CI: 50 /slots after it, none busy), and then /slots is right to show
    # no generation. So up to 3 requests, each asked about while it streams.
    for _ in range(3):
        with http.stream("POST", "/completion", json={"prompt": PROMPT, "n_predict": 200, "ignore_eos": True,
                                                      "stream": True}) as response:
            next(response.iter_lines())  # generating
            for _ in range(50):
                busy = _ok(http.get("/slots"))
                if any(s["is_processing"] for s in busy):
                    break
        if any(s["is_processing"] for s in busy):
            break
    assert sum(s["is_processing"] for s in busy) == 1
    _error(http.get("/slots", params={"fail_on_no_slot": "yes"}), 400, "fail_on_no_slot")
    assert http.get("/slots", params={"fail_on_no_slot": "1"}).status_code == 200  # (a slot is free)


def test_fingerprint_and_timings_on_openai_answers(http) -> None:
    chat = _ok(http.post("/v1/chat/completions", json={"messages": HI, "max_tokens": 5}))
    completion = _ok(http.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 5}))
    for answer in chat, completion:
        assert answer["system_fingerprint"].startswith("pyllama90a-")
        _check_timings(answer["timings"], answer["usage"]["prompt_tokens"], answer["usage"]["completion_tokens"])
    with http.stream("POST", "/v1/chat/completions", json={"messages": HI, "max_tokens": 5, "stream": True,
                                                           "stream_options": {"include_usage": True}}) as response:
        events = _events(response)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["system_fingerprint"] for c in chunks} == {chat["system_fingerprint"]}
    finish = next(c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"])
    _check_timings(finish["timings"], chunks[-1]["usage"]["prompt_tokens"], chunks[-1]["usage"]["completion_tokens"])
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}  # (as with tools)


def test_tool_call_stream_opens_with_null_content(http) -> None:
    with http.stream("POST", "/v1/chat/completions", json={
            "messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": WEATHER,
            "tool_choice": "required", "max_tokens": 40, "stream": True}) as response:
        first = json.loads(_events(response)[0])
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": None}


def test_api_key_as_bearer_or_x_api_key(server) -> None:
    for route in ("/completion", "/tokenize", "/chat/completions", "/v1/completions", "/props", "/slots"):
        method = "GET" if route in ("/props", "/slots") else "POST"
        for headers in ({}, {"X-Api-Key": "wrong"}, {"Authorization": "Bearer wrong"}):
            assert httpx.request(method, server.base_url + route, headers=headers, json={}).status_code == 401
    body = {"content": "Hi"}
    for headers in ({"X-Api-Key": KEY}, {"Authorization": f"Bearer {KEY}"}):
        assert httpx.post(server.base_url + "/tokenize", headers=headers, json=body).status_code == 200
    assert httpx.get(server.base_url + "/health").status_code == 200  # (public)


@pytest.mark.parametrize("origin", ["http://localhost:5173", "http://127.0.0.1:8080", "https://app.example.com"])
def test_cors_preflight_is_answered_before_auth(server, http, origin) -> None:
    preflight = httpx.options(server.base_url + "/completions", headers={
        "Origin": origin, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "Authorization, Content-Type"})
    assert preflight.status_code == 200, preflight.text
    assert preflight.headers["access-control-allow-origin"] == origin
    assert "POST" in preflight.headers["access-control-allow-methods"]
    answer = http.post("/tokenize", json={"content": "Hi"}, headers={"Origin": origin})
    assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == origin


@pytest.mark.parametrize("origin", ["https://evil.example", "http://localhost.evil.example", "http://app.example.com"])
def test_cors_refuses_other_origins(server, http, origin) -> None:
    preflight = httpx.options(server.base_url + "/completions", headers={
        "Origin": origin, "Access-Control-Request-Method": "POST"})
    assert "access-control-allow-origin" not in preflight.headers
    answer = http.post("/tokenize", json={"content": "Hi"}, headers={"Origin": origin})
    assert "access-control-allow-origin" not in answer.headers


def test_cors_origins_flag_is_checked(monkeypatch) -> None:
    assert parse_args(["--cors-origins", "*"]).cors_origins == ("*",)
    monkeypatch.setenv("PYLLAMA90A_CORS_ORIGINS", "localhost,https://a.example:8443")
    assert parse_args([]).cors_origins == ("localhost", "https://a.example:8443")
    with pytest.raises(SystemExit):
        parse_args(["--cors-origins", "app.example.com"])  # no scheme: no browser sends that Origin


def _metrics(http) -> dict[str, float]:
    text = http.get("/metrics").text
    values = {}
    for line in text.splitlines():
        if line.startswith("llamacpp:") or (line.startswith("pyllama90a_") and "{" not in line):
            name, value = line.split(" ")
            values[name] = float(value)
    for name in values:
        if name.startswith("llamacpp:"):
            assert f"# TYPE {name} " in text and f"# HELP {name} " in text
    return values


def test_a_metric_sample_reads_back_as_the_value_it_was() -> None:
    """Samples are exact: a seconds counter past 10 s (a server's predicted time) read back as it was, so that
    the difference of two scrapes is the time between them (at 6 significant digits test_llama_server_metric_names
    saw 62.1 ms for a request of 62.16 ms, 2026-12-07)."""
    for value in (12.345678901234, 0.06216481800220208, 1e-7, 3.0, 123456789.25):
        assert float(metrics._number(value)) == value


def test_llama_server_metric_names(http) -> None:
    before = _metrics(http)
    answer = _ok(http.post("/completion", json={"prompt": "Once upon a time", "n_predict": 4}))
    after = _metrics(http)
    assert after["llamacpp:tokens_predicted_total"] - before["llamacpp:tokens_predicted_total"] == 4
    assert after["llamacpp:tokens_predicted_total"] == after["pyllama90a_completion_tokens_total"]
    assert after["llamacpp:prompt_tokens_total"] == after["pyllama90a_prompt_tokens_decoded_total"]
    assert (after["llamacpp:prompt_tokens_cached_total"] == after["pyllama90a_prompt_tokens_total"]
            - after["pyllama90a_prompt_tokens_decoded_total"])
    added = after["llamacpp:tokens_predicted_seconds_total"] - before["llamacpp:tokens_predicted_seconds_total"]
    assert added == pytest.approx(answer["timings"]["predicted_ms"] / 1e3, rel=1e-3, abs=1e-6)
    assert after["llamacpp:requests_processing"] == 0 and after["llamacpp:requests_deferred"] == 0
    assert after["llamacpp:predicted_tokens_seconds"] > 0


def test_every_embeddings_input_form(http, model) -> None:
    def vectors(body: dict, route: str = "/v1/embeddings") -> np.ndarray:
        data = _ok(http.post(route, json=body))
        if route != "/v1/embeddings":
            return np.array([d["embedding"][0] for d in data])
        return np.array([d["embedding"] for d in data["data"]])

    texts = ["Hello there", "Paris"]
    ids = [model.tokenize(t) for t in texts]  # what Model.embed tokenizes them to
    of_texts = vectors({"input": texts})
    assert np.allclose(vectors({"input": texts[0]}), of_texts[:1], atol=1e-6)
    assert np.allclose(vectors({"input": ids}), of_texts, atol=1e-6)
    assert np.allclose(vectors({"input": ids[0]}), of_texts[:1], atol=1e-6)
    assert np.allclose(vectors({"content": texts[1]}), of_texts[1:], atol=1e-6)
    assert np.allclose(vectors({"input": texts}, "/embeddings"), of_texts, atol=1e-6)  # llama-server's list shape
    usage = _ok(http.post("/v1/embeddings", json={"input": ids}))["usage"]
    assert usage["prompt_tokens"] == sum(map(len, ids))
    # (["Hi", [1, 2]] and [1, "Hi"] are llama.cpp's forms, served: test_server_llama_shapes.py)
    # (the param names the element at fault)
    for bad, param in (([[1], []], "input[1]"), ([[]], "input[0]"), ([True], "input[0]"), ({"text": "Hi"}, "input")):
        _error(http.post("/v1/embeddings", json={"input": bad}), 400, param)
    _error(http.post("/v1/embeddings", json={"input": [[10**9]]}), 400, "input")
    _error(http.post("/v1/embeddings", json={"input": "a", "content": "b"}), 400, "content")
