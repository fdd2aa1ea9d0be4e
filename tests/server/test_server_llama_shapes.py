"""llama-server's shapes and request extensions (issue 36): the first stream delta, its error types, its CORS
flags, timings_per_token, return_progress, the chat token count, --alias/--tags, verbose, response_fields,
--seed/--temp, a forced call cut off by max_tokens, /props' attention. One real server on the default model,
over loopback, as llama.cpp's own server tests talk to llama-server."""
from __future__ import annotations

import httpx
import pytest

from pyllama90a.tools.server_process import ServerProcess
from support.sse import stream_events

pytestmark = pytest.mark.server

KEY = "sk-shapes"
AUTH = {"Authorization": f"Bearer {KEY}"}
N_CTX, PARALLEL = 1024, 2
HI = [{"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book"}]
WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]


@pytest.fixture(scope="module")
def server(model_path, tmp_path_factory):
    slots = tmp_path_factory.mktemp("slots")
    with ServerProcess(["--model", str(model_path), "--parallel", str(PARALLEL), "--n-ctx", str(N_CTX),
                        "--slot-save-path", str(slots),
                        "--threads", "2", "--api-key", KEY, "--alias", "smol,gpt-4o-mini", "--tags", "small,test",
                        "--cors-origins", "localhost", "--seed", "7", "--temp", "0"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def http(server):
    with httpx.Client(base_url=server.base_url, headers=AUTH, timeout=120) as client:
        yield client


def test_first_stream_delta_is_the_role_with_null_content_and_no_content_delta_is_empty(http) -> None:
    events = stream_events(http, "/v1/chat/completions", {"messages": HI, "max_tokens": 12})
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    deltas = [e["choices"][0]["delta"] for e in events[1:] if e["choices"]]
    assert all("role" not in d for d in deltas)
    assert all(d["content"] for d in deltas if d.get("content") is not None)
    assert "".join(d.get("content") or "" for d in deltas)


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"}, {"X-Api-Key": "wrong"}])
def test_a_wrong_or_missing_key_is_an_authentication_error(server, headers) -> None:
    response = httpx.post(server.base_url + "/completions", json={"prompt": "I believe"}, headers=headers)
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"


@pytest.mark.parametrize("stream", [False, True])
def test_a_prompt_over_the_context_is_exceed_context_size_error_with_its_numbers(http, stream) -> None:
    response = http.post("/chat/completions", json={"messages": HI * 100, "stream": stream})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "exceed_context_size_error" and error["code"] == "context_length_exceeded"
    assert error["n_ctx"] == N_CTX // PARALLEL  # a slot's context, as llama-server reports it
    assert error["n_prompt_tokens"] > error["n_ctx"]


def _preflight(server, origin: str) -> httpx.Response:
    return httpx.options(server.base_url + "/completions", headers={
        "Origin": origin, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "Authorization"})


def test_cors_localhost_reflects_a_local_origin_and_leaves_others_without_the_header(server) -> None:
    for origin in ("http://localhost", "http://127.0.0.1:3000", "http://[::1]:3000"):
        response = _preflight(server, origin)
        assert response.status_code == 200 and response.headers["Access-Control-Allow-Origin"] == origin
    for origin in ("http://evil.com", "http://localhost.evil.com"):
        response = _preflight(server, origin)  # (llama-server's answer: 200, and the browser refuses the page)
        assert response.status_code == 200 and "Access-Control-Allow-Origin" not in response.headers


def test_timings_per_token_on_every_event_and_the_timings_on_the_last(http) -> None:
    events = stream_events(http, "/chat/completions", {"messages": HI, "max_tokens": 10, "timings_per_token": True,
                                                 "stream_options": {"include_usage": True}})
    assert "timings" not in events[0]
    content = [e for e in events[1:] if e["choices"] and e["choices"][0]["delta"].get("content")]
    assert content and all("timings" in e for e in content)
    assert [e["timings"]["predicted_n"] for e in content] == sorted(e["timings"]["predicted_n"] for e in content)
    last = events[-1]
    assert last["choices"] == [] and last["timings"]["predicted_n"] == last["usage"]["completion_tokens"] <= 10
    plain = stream_events(http, "/chat/completions", {"messages": HI, "max_tokens": 10})
    assert not any("timings" in e for e in plain if e["choices"] and e["choices"][0]["delta"].get("content"))


def test_return_progress_reports_the_prompt_evaluated(http) -> None:
    events = stream_events(http, "/chat/completions", {"messages": HI, "max_tokens": 4, "return_progress": True,
                                                 "stream_options": {"include_usage": True}})
    progress = [e["prompt_progress"] for e in events if "prompt_progress" in e]
    prompt_tokens = events[-1]["usage"]["prompt_tokens"]
    assert progress and progress[-1]["processed"] == progress[-1]["total"] == prompt_tokens
    native = stream_events(http, "/completion", {"prompt": "I believe", "n_predict": 4, "return_progress": True})
    assert any(e.get("prompt_progress", {}).get("total", 0) > 0 for e in native)


def test_the_chat_token_count_route(http) -> None:
    chat = http.post("/v1/chat/completions", json={"messages": HI, "max_tokens": 1}).json()
    for path in ("/chat/completions/input_tokens", "/v1/chat/completions/input_tokens"):
        counted = http.post(path, json={"messages": HI})
        assert counted.status_code == 200
        assert counted.json() == {"input_tokens": chat["usage"]["prompt_tokens"]}


def test_aliases_and_tags_in_models(http) -> None:
    (card,) = http.get("/v1/models").json()["data"]
    # (the id: the alphabetically first alias, as llama-server's, which keeps them in a std::set)
    assert card["id"] == "gpt-4o-mini" and card["aliases"] == ["smol", "gpt-4o-mini"]
    assert card["tags"] == ["small", "test"]
    assert http.get("/v1/models/smol").json()["id"] == "gpt-4o-mini"
    assert http.get("/v1/models/other").status_code == 404


def test_verbose_has_the_prompt(http) -> None:
    for verbose in (True, False):
        body = http.post("/chat/completions", json={"messages": HI, "max_tokens": 2, "verbose": verbose}).json()
        assert ("__verbose" in body) is verbose
        if verbose:
            assert "Book" in body["__verbose"]["prompt"]


def test_response_fields_pick_the_answers_fields(http) -> None:
    body = http.post("/completion", json={"prompt": "I believe", "n_predict": 4,
                                          "response_fields": ["content", "generation_settings/n_predict", "nope"]})
    assert set(body.json()) == {"content", "generation_settings/n_predict"}
    assert body.json()["generation_settings/n_predict"] == 4


def test_server_wide_seed_and_temperature_defaults(http) -> None:
    params = http.get("/props").json()["default_generation_settings"]["params"]
    assert (params["seed"], params["temperature"]) == (7, 0.0)
    texts = {http.post("/v1/completions", json={"prompt": "Once upon a time", "max_tokens": 24}).json()
             ["choices"][0]["text"] for _ in range(2)}
    assert len(texts) == 1
    asked = http.post("/completion", json={"prompt": "-", "n_predict": 1, "temperature": 0.5, "seed": 3}).json()
    assert (asked["generation_settings"]["temperature"], asked["generation_settings"]["seed"]) == (0.5, 3)


def test_a_forced_call_cut_off_by_max_tokens_keeps_its_text_and_finishes_length(http) -> None:
    body = {"messages": [{"role": "user", "content": "Weather in Paris?"}], "tools": WEATHER,
            "tool_choice": "required", "max_tokens": 20}
    whole = http.post("/v1/chat/completions", json=body).json()["choices"][0]
    assert whole["finish_reason"] == "length" and "tool_calls" not in whole["message"]
    assert "get_weather" in whole["message"]["content"]  # the call's text so far, not ""
    events = stream_events(http, "/v1/chat/completions", body)
    assert [e["choices"][0]["finish_reason"] for e in events if e["choices"]][-1] == "length"
    content = "".join(d.get("content") or "" for e in events if e["choices"] for d in [e["choices"][0]["delta"]])
    calls = "".join(tc["function"].get("name", "") + tc["function"].get("arguments", "")
                    for e in events if e["choices"] for tc in e["choices"][0]["delta"].get("tool_calls", ()))
    assert "get_weather" in calls  # (the partial call's deltas went out as it was generated)
    assert content == whole["message"]["content"]  # and the stream's content is the whole answer's, as llama-server's


def test_props_says_which_calibration_auto_followed(http) -> None:
    attention = http.get("/props").json()["attention"]
    assert attention["flash_attn"] in ("on", "off", "hybrid", "auto") and "calibration" in attention
    assert attention["calibration"] is None or attention["calibration"].endswith(".json")


def test_logit_bias_in_llama_servers_list_and_text_forms(http) -> None:
    def first(extra: dict) -> tuple[int, str]:
        answer = http.post("/completion", json={"prompt": "The capital of France is", "n_predict": 1,
                                                "return_tokens": True, **extra})
        assert answer.status_code == 200, answer.text
        return answer.json()["tokens"][0], answer.json()["content"]

    token, text = first({})  # (greedy: the server's --temp 0)
    for bias in ([[token, False]], [[text, False]], {text: -100}, [[str(token), -100]]):
        assert first({"logit_bias": bias})[0] != token, bias
    assert first({"logit_bias": [[token, 0]]})[0] == token
    bad = http.post("/completion", json={"prompt": "x", "logit_bias": [[token, True]]})
    assert bad.status_code == 400 and bad.json()["error"]["param"].startswith("logit_bias")


@pytest.mark.parametrize("path", ["/v1/embeddings", "/embedding"])
def test_embedding_inputs_in_llama_cpps_forms(http, path) -> None:
    def vectors(value) -> list:
        response = http.post(path, json={"input": value})
        assert response.status_code == 200, response.text
        body = response.json()
        return [d["embedding"] if path.startswith("/v1") else d["embedding"][0]
                for d in (body["data"] if path.startswith("/v1") else body)]

    assert len(vectors([12, 34, "string", 56, 78])) == 1  # (a list holding a number is one input)
    assert len(vectors(["string1", [12, 34, 56]])) == 2
    assert len(vectors([[12, 34, 56], [12, "string", 34, 56]])) == 2
    parts = [{"type": "text", "text": "hello "}, {"type": "text", "text": "world"}]
    mixed = vectors(["hello world", {"content": parts}, {"prompt_string": "hello world"}])
    assert mixed[0] == mixed[1] == mixed[2]
    for bad in ([], {"content": "string"}, {"content": [{"type": "unknown"}]}, ["a", ""]):
        assert http.post(path, json={"input": bad}).status_code == 400, bad


def test_token_ids_of_another_models_tokenizer_are_refused(http) -> None:
    tiktoken_ids = [[15339, 1917]]  # cl100k_base's "hello world", as LangChain's OpenAIEmbeddings sends it
    refused = http.post("/v1/embeddings", json={"input": tiktoken_ids, "model": "text-embedding-3-small"})
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "foreign_token_ids" and refused.json()["error"]["param"] == "input"
    for model in (None, "smol", "gpt-4o-mini"):  # this model's ids (no model named, or this one)
        assert http.post("/v1/embeddings", json={"input": tiktoken_ids, "model": model}).status_code == 200
    assert http.post("/v1/embeddings", json={"input": ["hello world"], "model": "text-embedding-3-small"}
                     ).status_code == 200


def test_id_slot_runs_the_request_in_that_slot_and_the_save_recipe_saves_it(http) -> None:
    for slot in (1, 0):  # (llama.cpp's recipe: a prompt run in a slot, then that slot saved)
        answer = http.post("/completion", json={"prompt": "Paris is the capital of", "n_predict": 4,
                                                "id_slot": slot})
        assert answer.status_code == 200, answer.text
        saved = http.post(f"/slots/{slot}?action=save", json={"filename": f"slot{slot}.bin"})
        assert saved.status_code == 200 and saved.json()["n_saved"] > 0, saved.text
        assert http.post(f"/slots/{slot}?action=erase").json()["n_erased"] > 0
    chat = http.post("/chat/completions", json={"messages": HI, "max_tokens": 4, "n": 2, "id_slot": 0})
    assert chat.status_code == 200 and len(chat.json()["choices"]) == 2  # (both in slot 0, one after the other)
    wrong = http.post("/completion", json={"prompt": "x", "n_predict": 1, "id_slot": PARALLEL})
    assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "id_slot"


def test_several_prompts_per_completion_answer_one_result_each(http) -> None:
    text = "I believe the meaning of life is"
    tokens = http.post("/tokenize", json={"content": text, "add_special": True}).json()["tokens"]
    single = http.post("/completion", json={"prompt": tokens, "n_predict": 6}).json()
    assert isinstance(single, dict)
    for prompts in ([tokens, tokens], [tokens, text], [tokens, {"prompt_string": text}], [text, "Paris is"]):
        answers = http.post("/completion", json={"prompt": prompts, "n_predict": 6}).json()
        assert isinstance(answers, list) and [a["index"] for a in answers] == [0, 1], answers
        assert answers[0]["content"] == single["content"]  # (greedy: the server's --temp 0)
        if prompts[1] != "Paris is":
            assert answers[1]["content"] == single["content"]
    assert answers[1]["prompt"].endswith("Paris is") and answers[1]["content"] != single["content"]
    events = stream_events(http, "/completion", {"prompt": [text, "Paris is"], "n_predict": 4})
    finals = sorted((e["index"], e["content"]) for e in events if e["stop"])
    assert [i for i, _ in finals] == [0, 1]
    assert http.post("/completion", json={"prompt": [text, ""]}).status_code == 400
    as_object = http.post("/completion", json={"prompt": {"prompt_string": text}, "n_predict": 6}).json()
    assert as_object["content"] == single["content"]


def test_llama_servers_cors_alias_seed_and_temp_flags_are_read_and_checked() -> None:
    from pyllama90a.server.__main__ import parse_args
    from pyllama90a.server.app import cors_settings
    from pyllama90a.server.state import CorsFlags

    args = parse_args(["--cors-origins", "*", "--cors-methods", "GET, POST, DELETE", "--cors-headers",
                       "Authorization", "--cors-credentials", "-a", "x,y", "--tags", "t", "--seed", "5",
                       "--temp", "0.2"])
    assert (args.cors_methods, args.cors_headers, args.cors_credentials) == (("GET", "POST", "DELETE"),
                                                                            ("Authorization",), True)
    assert (args.alias, args.tags, args.seed, args.temp) == (("x", "y"), ("t",), 5, 0.2)
    settings = cors_settings(args.cors_origins, CorsFlags(args.cors_methods, args.cors_headers, True))
    assert settings["allow_methods"] == ["GET", "POST", "DELETE"] and settings["allow_credentials"] is True
    assert parse_args([]).cors_credentials is False  # (llama-server's default is on: this server's key is a header)
    for bad in (["--temp", "3"], ["--alias", "a,a"], ["--seed", str(2**64)]):
        with pytest.raises(SystemExit):
            parse_args(bad)
