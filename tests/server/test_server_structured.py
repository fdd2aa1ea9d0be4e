"""Structured output through the server: response_format (json_object, json_schema), llama.cpp's grammar and
json_schema fields, and logit_bias, each enforced per request by the engine's constraint on the real model
(pyllama90a/constrained, llguidance); a bad one is a 400 naming its field. Tool calls, n > 1, the openai SDK's
parse() and LangChain: tests/server/test_server_tools.py."""
from __future__ import annotations

import json
import math

import jsonschema
import pytest
from starlette.testclient import TestClient

import pyllama90a as pl
from pyllama90a.core.constrained import Constraint
from pyllama90a.server import ServerState, create_app

pytestmark = pytest.mark.server  # (the test tier: tests/conftest.py)

CHAT, COMPLETIONS = "/v1/chat/completions", "/v1/completions"
PERSON = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 20},
    "age": {"type": "integer", "minimum": 0, "maximum": 150},
    "pets": {"type": "array", "items": {"enum": ["cat", "dog", "fish"]}, "maxItems": 3}},
    "required": ["name", "age", "pets"], "additionalProperties": False}
ASK = [{"role": "user", "content": "Describe a person as JSON."}]


@pytest.fixture(scope="module")
def client(model_path):
    engine = pl.BatchEngine(model_path, parallel=2, n_ctx=1024, n_threads=2)
    with TestClient(create_app(ServerState(engine, "m"))) as c:
        yield c
    engine.close()


def _content(response) -> str:
    assert response.status_code == 200, response.text
    body = response.json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "stop", body  # the constraint ended it, not max_tokens
    return choice["message"]["content"] if "message" in choice else choice["text"]


def test_json_schema_response_format_validates(client) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    text = _content(client.post(CHAT, json={"messages": ASK, "max_tokens": 120, "temperature": 0,
                                            "response_format": fmt}))
    jsonschema.validate(json.loads(text), PERSON)


def test_unconstrained_output_is_not_that_json(client) -> None:
    """The test above can fail: the same request without response_format does not give such an object."""
    response = client.post(CHAT, json={"messages": ASK, "max_tokens": 60, "temperature": 0})
    text = response.json()["choices"][0]["message"]["content"]
    with pytest.raises((ValueError, jsonschema.ValidationError)):
        jsonschema.validate(json.loads(text), PERSON)


def test_json_object_streamed(client) -> None:
    """A streamed json_object reply is the non-streamed reply, delta by delta, and a JSON object (json_object
    bounds nothing, so a small model's object may run to max_tokens: then it is an object's unfinished start)."""
    body = {"messages": ASK, "max_tokens": 120, "temperature": 0, "response_format": {"type": "json_object"}}
    whole = client.post(CHAT, json=body).json()["choices"][0]
    with client.stream("POST", CHAT, json={**body, "stream": True}) as response:
        assert response.status_code == 200
        events = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    deltas = [json.loads(e)["choices"] for e in events[:-1]]
    text = "".join(c[0]["delta"].get("content") or "" for c in deltas if c)
    finish = [c[0]["finish_reason"] for c in deltas if c and c[0].get("finish_reason")]
    assert (text, finish) == (whole["message"]["content"], [whole["finish_reason"]])
    if whole["finish_reason"] == "stop":
        assert isinstance(json.loads(text), dict)
    else:
        assert whole["finish_reason"] == "length" and text.lstrip().startswith("{"), text


def test_gbnf_grammar_on_completions(client) -> None:
    body = {"prompt": "Is the sky green? Answer:", "max_tokens": 10, "temperature": 0.9, "seed": 3,
            "grammar": 'root ::= " yes" | " no"'}
    assert _content(client.post(COMPLETIONS, json=body)) in (" yes", " no")


def test_logprobs_under_a_constraint_list_only_the_tokens_it_allows(client) -> None:
    # the grammar allows two tokens at the first step: the other three alternatives asked for are forbidden (-inf),
    # which are no alternatives (and no JSON: a 500, or "-Infinity" in a stream)
    grammar = {"grammar": 'root ::= "x" | "y"', "temperature": 0}
    answers = [
        client.post(COMPLETIONS, json={"prompt": "Pick x or y:", "max_tokens": 3, "logprobs": 5,
                                       **grammar}).json()["choices"][0]["logprobs"]["top_logprobs"],
        [entry["top_logprobs"] for entry in client.post(CHAT, json={
            "messages": [{"role": "user", "content": "Pick x or y."}], "max_tokens": 3, "logprobs": True,
            "top_logprobs": 5, **grammar}).json()["choices"][0]["logprobs"]["content"]],
        [entry["top_logprobs"] for entry in client.post("/completion", json={
            "prompt": "Pick x or y:", "n_predict": 3, "n_probs": 5,
            **grammar}).json()["completion_probabilities"]]]
    first_steps = [answers[0][0], {e["token"]: e["logprob"] for e in answers[1][0]},
                   {e["token"]: e["logprob"] for e in answers[2][0]}]
    for top in first_steps:
        assert top and set(top) <= {"x", "y"}, top
        assert all(math.isfinite(lp) and lp <= 0 for lp in top.values()), top
    with client.stream("POST", COMPLETIONS, json={"prompt": "Pick x or y:", "max_tokens": 3,
                                                  "logprobs": 5, "stream": True, **grammar}) as response:
        events = [line[6:] for line in response.iter_lines() if line.startswith("data: {")]
    assert events

    def not_json(constant: str) -> None:
        raise AssertionError(f"{constant} in a stream event")
    for event in events:  # (Python's json takes -Infinity and NaN unless told not to; JSON has neither)
        json.loads(event, parse_constant=not_json)


def test_llama_cpp_json_schema_field(client) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    text = _content(client.post(COMPLETIONS, json={"prompt": "Status:", "max_tokens": 30, "temperature": 0,
                                                   "json_schema": schema}))
    jsonschema.validate(json.loads(text), schema)


def test_n_choices_share_one_compiled_grammar(client, monkeypatch) -> None:
    """One request's choices compile its grammar once (Constraint.template; each choice steps a copy): a compile
    per choice costs n times as much (n=8: 5.7 ms against 0.8 ms for a small schema, 33 ms against 4 ms for one
    of 40 fields). Each choice's matcher state is its own, so every choice ends valid."""
    compiles = []
    grammar_for = Constraint.grammar_for
    monkeypatch.setattr(Constraint, "grammar_for",
                        lambda self, vocab: compiles.append(self) or grammar_for(self, vocab))
    response = client.post(CHAT, json={"messages": ASK, "max_tokens": 120, "temperature": 1.0, "seed": 5, "n": 3,
                                       "json_schema": PERSON})
    assert response.status_code == 200, response.text
    choices = response.json()["choices"]
    assert len(choices) == 3 and len(compiles) == 1
    for choice in choices:
        assert choice["finish_reason"] == "stop"
        jsonschema.validate(json.loads(choice["message"]["content"]), PERSON)


def test_logit_bias_bans_and_forces_a_token(client, model_path) -> None:
    body = {"prompt": "The capital of France is", "max_tokens": 1, "temperature": 0, "logprobs": 0}
    first = client.post(COMPLETIONS, json=body).json()["choices"][0]["logprobs"]["tokens"][0]
    with pl.Model(model_path, n_ctx=256, n_threads=2) as m:
        (token,) = m.tokenize(first, add_special=False)
    banned = client.post(COMPLETIONS, json={**body, "logit_bias": {str(token): -100}})
    assert banned.status_code == 200, banned.text
    assert banned.json()["choices"][0]["logprobs"]["tokens"][0] != first
    forced = client.post(COMPLETIONS, json={**body, "max_tokens": 3, "logit_bias": {str(token): 100}})
    assert forced.json()["choices"][0]["text"] == first * 3


@pytest.mark.parametrize(("field", "value"), [
    ("response_format", {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}),
    ("response_format", {"type": "xml"}),
    ("grammar", "root ::= ("),
    ("json_schema", {"type": 5}),
    ("logit_bias", {"99999999": 5}),
    ("logit_bias", [1, 2]),
])
def test_a_bad_constraint_is_a_400_naming_its_field(client, field, value) -> None:
    response = client.post(CHAT, json={"messages": ASK, "max_tokens": 4, field: value})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == field and field in error["message"], error


def test_two_constraints_at_once_are_refused(client) -> None:
    response = client.post(CHAT, json={"messages": ASK, "max_tokens": 4, "grammar": 'root ::= "a"',
                                       "response_format": {"type": "json_object"}})
    assert response.status_code == 400 and "at most one" in response.json()["error"]["message"]
