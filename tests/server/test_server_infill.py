"""llama-server's POST /infill (issue 21) on python -m pyllama90a.server: the prompt evaluated is the FIM layout
(extra chunks in repository lines, FIM_PRE prefix FIM_SUF suffix FIM_MID prompt), the answer is /completion's
(the same tokens and probabilities as a /completion of that layout), a stream is /completion's, bad fields are
400s naming them, and a model without FIM tokens is a 400 naming what it lacks.

Two real servers on random-weight synthetic models (pyllama90a.tools.synthetic): one whose vocabulary carries all six
FIM tokens, one with none. The expected prompt is assembled here from the synthetic vocabulary's known ids and
the server's /tokenize, independently of pyllama90a.core.model.fim."""
from __future__ import annotations

import json

import httpx
import pytest

from pyllama90a.tools.server_process import ServerProcess
from pyllama90a.tools.synthetic import BOS_ID, FIM_TEXTS, fim_token_ids, synthetic_model

pytestmark = pytest.mark.server  # (the test tier: tests/conftest.py)

SHAPE = "tiny"
N_VOCAB = 512  # the tiny shape's
FIM = fim_token_ids(N_VOCAB, tuple(FIM_TEXTS))  # kind -> id
FLAGS = ["--parallel", "2", "--n-ctx", "1024", "--threads", "2"]
BODY = {"input_prefix": "def add(a, b):\n    return ", "input_suffix": "\n\nprint(add(1, 2))\n",
        "input_extra": [{"filename": "util.py", "text": "def sub(a, b):\n    return a - b\n"},
                        {"text": "x = 1"}],
        "prompt": "a +", "n_predict": 6, "temperature": 0, "n_probs": 3, "return_tokens": True,
        "ignore_eos": True}  # (to the limit whatever the random weights pick)


@pytest.fixture(scope="module")
def http():
    with ServerProcess(["--model", str(synthetic_model(SHAPE, fim=tuple(FIM_TEXTS))), *FLAGS]) as srv, \
            httpx.Client(base_url=srv.base_url, timeout=120) as client:
        yield client


@pytest.fixture(scope="module")
def plain_http():
    with ServerProcess(["--model", str(synthetic_model(SHAPE)), *FLAGS]) as srv, \
            httpx.Client(base_url=srv.base_url, timeout=120) as client:
        yield client


def _ok(response: httpx.Response) -> dict:
    assert response.status_code == 200, response.text
    return response.json()


def _error(response: httpx.Response, param: str | None) -> dict:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param, error
    return error


def _tokens(http: httpx.Client, text: str) -> list[int]:
    return _ok(http.post("/tokenize", json={"content": text, "add_special": False, "parse_special": False}))["tokens"]


def _expected(http: httpx.Client, body: dict) -> list[int]:
    """llama-server's documented /infill prompt for a model with FIM_REP and FIM_SEP (the synthetic vocabulary
    adds BOS)."""
    tokens = [BOS_ID, FIM["rep"], *_tokens(http, "myproject\n")]
    for chunk in body.get("input_extra", []):
        tokens += [FIM["sep"], *_tokens(http, chunk.get("filename", "tmp") + "\n"), *_tokens(http, chunk["text"])]
    tokens += [FIM["sep"], *_tokens(http, "filename\n")]
    return [*tokens, FIM["pre"], *_tokens(http, body["input_prefix"]), FIM["suf"], *_tokens(http, body["input_suffix"]),
            FIM["mid"], *_tokens(http, body.get("prompt", ""))]


def _as_completion(body: dict, prompt: list[int]) -> dict:
    rest = {k: v for k, v in body.items() if k not in ("input_prefix", "input_suffix", "input_extra")}
    return {**rest, "prompt": prompt}


def _logprobs(answer: dict) -> list[float]:
    """Each generated token's log-probability and its top alternatives', in one list."""
    return [lp for p in answer["completion_probabilities"]
            for lp in (p["logprob"], *(t["logprob"] for t in p["top_logprobs"]))]


def test_the_evaluated_prompt_is_the_fim_layout(http) -> None:
    expected = _expected(http, BODY)
    infill = _ok(http.post("/infill", json=BODY))
    assert infill["tokens_evaluated"] == len(expected)
    assert infill["prompt"] == _ok(http.post("/detokenize", json={"tokens": expected}))["content"]
    for kind in ("rep", "sep", "pre", "suf", "mid"):  # the control tokens are in it, rendered
        assert FIM_TEXTS[kind] in infill["prompt"]
    # the same prompt as a /completion of the assembled tokens: the same greedy tokens and probabilities
    completion = _ok(http.post("/completion", json=_as_completion(BODY, expected)))
    assert infill["tokens"] == completion["tokens"] and infill["tokens"]
    assert infill["content"] == completion["content"] and infill["stop_type"] == completion["stop_type"] == "limit"
    assert _logprobs(infill) == pytest.approx(_logprobs(completion), abs=1e-3)
    assert infill["generation_settings"]["n_predict"] == 6 and infill["generation_settings"]["n_probs"] == 3
    # the check tells layouts apart: llama-server's code puts the prompt at the prefix's end, not after FIM_MID
    at_mid = expected.index(FIM["mid"])
    prompt_tokens = expected[at_mid + 1:]
    at_suf = expected.index(FIM["suf"])
    other = expected[:at_suf] + prompt_tokens + expected[at_suf:at_mid + 1]
    assert sorted(other) == sorted(expected) and other != expected
    moved = _ok(http.post("/completion", json=_as_completion(BODY, other)))
    assert _logprobs(moved) != pytest.approx(_logprobs(infill), abs=1e-3)


def test_only_the_required_fields(http) -> None:
    body = {"input_prefix": "x = ", "input_suffix": "", "n_predict": 2, "temperature": 0}
    expected = _expected(http, body)
    assert expected[-2:] == [FIM["suf"], FIM["mid"]]  # (an empty suffix and prompt add no tokens)
    infill = _ok(http.post("/infill", json=body))
    assert infill["tokens_evaluated"] == len(expected)
    assert infill["content"] == _ok(http.post("/completion", json=_as_completion(body, expected)))["content"]
    # null is absent, for the optional fields
    again = _ok(http.post("/infill", json={**body, "input_extra": None, "prompt": None}))
    assert again["tokens_evaluated"] == len(expected) and again["content"] == infill["content"]


def test_stream_is_the_completions(http) -> None:
    whole = _ok(http.post("/infill", json=BODY))
    with http.stream("POST", "/infill", json={**BODY, "stream": True}) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[len("data: "):]) for line in response.iter_lines() if line.startswith("data: ")]
    assert [e["stop"] for e in events] == [False] * (len(events) - 1) + [True]  # no [DONE]: it would not parse
    assert "".join(e["content"] for e in events) == whole["content"]
    assert [t for e in events for t in e["tokens"]] == whole["tokens"]
    assert events[-1]["tokens_evaluated"] == whole["tokens_evaluated"] and events[-1]["stop_type"] == "limit"


@pytest.mark.parametrize(("change", "param"), [
    ({"input_prefix": 5}, "input_prefix"),
    ({"input_prefix": None}, "input_prefix"),
    ({"input_suffix": ["a"]}, "input_suffix"),
    ({"prompt": ["a +"]}, "prompt"),
    ({"prompt": [1, 2]}, "prompt"),
    ({"input_extra": "x = 1"}, "input_extra"),
    ({"input_extra": [{"text": "a"}, "b"]}, "input_extra[1]"),
    ({"input_extra": [{"filename": "a.py"}]}, "input_extra[0].text"),
    ({"input_extra": [{"text": 1}]}, "input_extra[0].text"),
    ({"input_extra": [{"text": "a", "filename": None}]}, "input_extra[0].filename"),
    ({"n_predict": "6"}, "n_predict"),  # /completion's own fields, checked by its parser
    ({"n_predict": 0}, "n_predict"),
    ({"temperature": 3}, "temperature"),
    ({"n": 2}, "n"),
    ({"mirostat": 2}, "mirostat"),  # refused_fields.py: not implemented, not silently ignored
    ({"suffix": "x"}, "suffix"),    # /v1/completions' insertion: input_suffix is /infill's
])
def test_bad_fields_are_400s_naming_them(http, change, param) -> None:
    _error(http.post("/infill", json={**BODY, **change}), param)


def test_missing_fields(http) -> None:
    for name in ("input_prefix", "input_suffix"):
        error = _error(http.post("/infill", json={k: v for k, v in BODY.items() if k != name}), name)
        assert "required" in error["message"]
    _error(http.post("/infill", json=[BODY]), None)


def test_unknown_fields_are_named(http) -> None:
    response = http.post("/infill", json={**BODY, "input_extra": [{"text": "a", "lang": "py"}], "mode": 1})
    _ok(response)
    assert response.headers["X-Ignored-Fields"] == "input_extra[0].lang, mode"


def test_a_model_without_fim_tokens_is_a_400_naming_them(plain_http) -> None:
    error = _error(plain_http.post("/infill", json=BODY), None)
    assert error["code"] == "infill_not_supported"
    for kind in ("pre", "suf", "mid"):
        assert f"fim_{kind}" in error["message"] and f"tokenizer.ggml.fim_{kind}_token_id" in error["message"]
    # the same server's /completion still works, and /health says nothing broke
    answer = _ok(plain_http.post("/completion", json={"prompt": "a b", "n_predict": 2, "ignore_eos": True}))
    assert answer["stop_type"] == "limit" and answer["timings"]["predicted_n"] == 2
    assert _ok(plain_http.get("/health"))["status"] == "ok"


def test_the_openapi_document_lists_the_route(http) -> None:
    doc = _ok(http.get("/openapi.json"))
    schema = doc["paths"]["/infill"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["input_prefix", "input_suffix"]
    declared = set(schema["properties"])
    assert {"input_prefix", "input_suffix", "input_extra", "prompt", "n_predict", "n_probs"} <= declared
    assert "400" in doc["paths"]["/infill"]["post"]["responses"]


def test_every_documented_field_is_known_and_unknown_ones_can_be_refused() -> None:
    """The OpenAPI document and the parser cannot drift apart; with --unknown-fields reject, an unknown field of
    an extra chunk is refused, as any other unknown field (the parser, in process, on the FIM model)."""
    import pyllama90a as pl
    from pyllama90a.server.app import openapi_document
    from pyllama90a.server.errors import APIError
    from pyllama90a.server.protocol.base import Limits, parse
    from pyllama90a.server.protocol.requests import InfillRequest

    for limits in (Limits(), Limits(unknown_fields="reject")):
        entry = openapi_document(limits)["paths"]["/infill"]["post"]
        schema = entry["requestBody"]["content"]["application/json"]["schema"]
        assert set(schema["properties"]) <= set(InfillRequest.model_fields)
    with pl.Model(synthetic_model(SHAPE, fim=tuple(FIM_TEXTS)), n_ctx=256) as model:
        body = {**BODY, "input_extra": [{"text": "a", "lang": "py"}]}
        assert parse(InfillRequest, body, Limits(), model)[1] == ["input_extra[0].lang"]
        with pytest.raises(APIError) as caught:
            parse(InfillRequest, body, Limits(unknown_fields="reject"), model)
    assert caught.value.status == 400 and "input_extra[0].lang" in caught.value.message
