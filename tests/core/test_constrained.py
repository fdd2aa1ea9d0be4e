"""Constrained decoding (pyllama90a.core.constrained, llguidance) on the real default model, driven by hand:
Model.eval + last_logits, the matcher's apply, argmax, accept. Each constrained check is paired with the same
prompt unconstrained, to show that the constraint is what makes the output valid."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

import pyllama90a as pl
from pyllama90a.core import constrained as c
from pyllama90a.core.generation.sampling import SamplingParams
from pyllama90a.errors import ConstraintError, InvalidArgumentError
from pyllama90a.native import SamplerChain

pytest.importorskip("llguidance")


@pytest.fixture(scope="module")
def lm(model_path):
    with pl.Model(model_path, n_ctx=1024, seed=1) as m:
        yield m


def chat(text: str) -> str:
    # SmolLM2's ChatML, written out so these tests do not depend on the chat-template code
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def greedy(m: pl.Model, prompt: str, matcher: c.Matcher | None = None, max_tokens: int = 120,
           before: list[int] | None = None) -> tuple[str, list[int]]:
    """Greedy generation; `before`: tokens forced after the prompt (accepted by the matcher, each checked to be
    allowed). Returns the text after the prompt (forced tokens included) and its tokens, without the EOG token."""
    vocab = c.vocab_for(m)
    m.truncate(0)
    m.eval(m.tokenize(chat(prompt), parse_special=True))
    out: list[int] = []
    forced = list(before or [])
    while len(out) < max_tokens:
        logits = m.last_logits()
        if matcher is not None:
            matcher.apply(logits)
        if forced:
            token = forced.pop(0)
            assert np.isfinite(logits[token]), f"forced token {token} is masked"
        else:
            token = int(np.argmax(logits))
        if matcher is not None:
            matcher.accept(token)
        if token in vocab.eog:
            break
        out.append(token)
        m.eval([token])
    return m.detokenize(out), out


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 30},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 1, "maxItems": 3},
        "address": {"type": "object",
                    "properties": {"city": {"type": "string", "maxLength": 30},
                                   "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                    "required": ["city", "zip"], "additionalProperties": False},
    },
    "required": ["name", "age", "role", "tags", "address"],
    "additionalProperties": False,
}
PERSON_PROMPT = "Describe a person named Alice who lives in Paris, as JSON."


def _valid(instance: object, schema: dict) -> bool:
    jsonschema = pytest.importorskip("jsonschema")
    return jsonschema.Draft202012Validator(schema).is_valid(instance)


def _parses_and_validates(text: str, schema: dict) -> bool:
    try:
        return _valid(json.loads(text), schema)
    except json.JSONDecodeError:
        return False


# -- JSON ---------------------------------------------------------------------------------------------------------

def test_json_schema_nested_output_validates_and_ends(lm) -> None:
    free, _ = greedy(lm, PERSON_PROMPT, max_tokens=80)
    assert not _parses_and_validates(free, PERSON), free  # the model alone does not follow the schema
    matcher = c.Matcher(c.json_schema(PERSON), lm)
    text, _ = greedy(lm, PERSON_PROMPT, matcher, max_tokens=150)
    value = json.loads(text)
    assert _valid(value, PERSON), text
    assert value["role"] in ("admin", "user", "guest") and isinstance(value["address"], dict)
    assert matcher.finished and matcher.is_done() and matcher.is_accepting()  # ended by EOS, not by max_tokens


def test_json_object_and_response_format_shapes(lm) -> None:
    assert c.response_format({"type": "text"}) is None
    assert c.constraint_from() is None
    spec = c.constraint_from(response_format={"type": "json_object"})
    text, _ = greedy(lm, "Give me a JSON object about a cat.", c.Matcher(spec, lm), max_tokens=100)
    assert isinstance(json.loads(text), dict)
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    text, _ = greedy(lm, PERSON_PROMPT, c.Matcher(c.constraint_from(response_format=rf), lm), max_tokens=150)
    assert _parses_and_validates(text, PERSON), text
    # llama.cpp's server form: a schema beside type json_object
    spec = c.response_format({"type": "json_object", "schema": {"type": "object", "properties": {
        "ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False}})
    text, _ = greedy(lm, "Is water wet? Answer as JSON.", c.Matcher(spec, lm), max_tokens=20)
    assert isinstance(json.loads(text)["ok"], bool)


def test_a_schema_in_both_places_is_refused() -> None:
    # llama.cpp's server form (schema beside type) and OpenAI's (json_schema.schema) at once: the outer one was
    # dropped silently and the answer was any object
    both = {"type": "json_schema", "json_schema": {"name": "colours"}, "schema": {"type": "array"}}
    with pytest.raises(ConstraintError, match=r"json_schema\.schema or beside \"type\", not both"):
        c.response_format(both)
    assert c.response_format({"type": "json_schema", "schema": {"type": "array"}}) is not None  # (either one)


def test_pydantic_model_is_a_schema(lm) -> None:
    pydantic = pytest.importorskip("pydantic")
    from enum import Enum

    class Kind(str, Enum):
        cat = "cat"
        dog = "dog"

    class Pet(pydantic.BaseModel):
        kind: Kind
        name: str = pydantic.Field(max_length=20)

    class Owner(pydantic.BaseModel):
        name: str = pydantic.Field(max_length=20)
        pets: list[Pet] = pydantic.Field(max_length=2)

    for spec in (c.constraint_from(json_schema=Owner), c.constraint_from(response_format=Owner)):
        text, _ = greedy(lm, "Bob has a dog named Rex. Describe Bob as JSON.", c.Matcher(spec, lm), max_tokens=80)
        owner = Owner.model_validate_json(text)
        assert all(p.kind in (Kind.cat, Kind.dog) for p in owner.pets)


# -- regex and GBNF -----------------------------------------------------------------------------------------------

def test_regex_output_fullmatches(lm) -> None:
    pattern = r"[A-Z][a-z]+ [A-Z][a-z]+ was born in (1[0-9]|20)[0-9]{2}\."
    prompt = "When was Ada Lovelace born? Answer in one sentence."
    free, _ = greedy(lm, prompt, max_tokens=40)
    assert not re.fullmatch(pattern, free), free
    matcher = c.Matcher(c.regex(pattern), lm)
    text, _ = greedy(lm, prompt, matcher, max_tokens=40)
    assert re.fullmatch(pattern, text), text
    assert matcher.finished


def test_gbnf_yes_no(lm) -> None:
    prompt = "Is Paris the capital of France?"
    free, _ = greedy(lm, prompt, max_tokens=20)
    assert free not in ("yes", "no")
    matcher = c.Matcher(c.grammar('root ::= "yes" | "no"'), lm)
    text, _tokens = greedy(lm, prompt, matcher, max_tokens=20)
    assert text in ("yes", "no") and matcher.finished


def test_gbnf_with_rules_classes_and_repetition(lm) -> None:
    gbnf = r'''
# a list of 2 to 3 items, llama.cpp GBNF: rules, alternatives, character classes, repetition, comments
root ::= "Items:\n" item item item?
item ::= "- " [0-9] [0-9]? " " unit " " [a-z]+ "\n"
unit ::= "g" | "ml" | "cups"
'''
    text, _ = greedy(lm, "Give me a short pancake recipe.", c.Matcher(c.grammar(gbnf), lm), max_tokens=60)
    assert re.fullmatch(r"Items:\n(- [0-9]{1,2} (g|ml|cups) [a-z]+\n){2,3}", text), text


# -- tool calls ---------------------------------------------------------------------------------------------------

WEATHER = {"type": "object", "properties": {"location": {"type": "string", "maxLength": 40},
                                            "unit": {"enum": ["celsius", "fahrenheit"]}},
           "required": ["location", "unit"], "additionalProperties": False}
CALL = {"type": "object", "properties": {"name": {"const": "get_weather"}, "arguments": WEATHER},
        "required": ["name", "arguments"], "additionalProperties": False}
HERMES = c.CallPattern("<tool_call>\n", CALL, "\n</tool_call>")


def _parse_hermes(text: str) -> list[dict]:
    calls = re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text, re.S)
    return [json.loads(x) for x in calls]


def test_tool_call_required(lm) -> None:
    prompt = "What is the weather in Paris?"
    free, _ = greedy(lm, prompt, max_tokens=60)
    assert not _parse_hermes(free)
    matcher = c.Matcher(c.tool_calls([HERMES]), lm)
    text, _ = greedy(lm, prompt, matcher, max_tokens=80)
    (call,) = _parse_hermes(text)
    assert text.startswith("<tool_call>\n") and text.endswith("</tool_call>")
    assert call["name"] == "get_weather" and _valid(call["arguments"], WEATHER)
    assert matcher.finished


def test_tool_call_formats_with_names_outside_the_json(lm) -> None:
    # Llama-3.1-like <function=NAME>{args}</function>: one format per function
    formats = [c.CallPattern("<function=get_weather>", WEATHER, "</function>"),
               c.CallPattern("<function=get_time>", {"type": "object", "properties": {"tz": {"type": "string"}},
                                                         "required": ["tz"]}, "</function>")]
    text, _ = greedy(lm, "What is the weather in Rome?", c.Matcher(c.tool_calls(formats), lm), max_tokens=60)
    m = re.fullmatch(r"<function=(get_weather|get_time)>(.*)</function>", text, re.S)
    assert m, text
    assert isinstance(json.loads(m.group(2)), dict)


def test_lazy_tool_call_free_until_the_trigger(lm) -> None:
    spec = c.tool_calls([HERMES], trigger="<tool_call>")
    assert spec.lazy
    prompt = "Tell me about the weather in Paris."
    # before the trigger nothing is constrained: greedy output is the unconstrained output
    _free, free_tokens = greedy(lm, prompt, max_tokens=40)
    matcher = c.Matcher(spec, lm)
    text, tokens = greedy(lm, prompt, matcher, max_tokens=40)
    assert tokens == free_tokens and "<tool_call>" not in text
    assert not matcher.is_done() and matcher.is_accepting()  # free text may end here
    # every non-special token that is text by itself is allowed before the trigger
    fresh = c.Matcher(spec, lm)
    allowed = set(fresh.allowed().tolist())
    vocab = c.vocab_for(lm)
    texty = {t for t in range(vocab.n_vocab) if t not in vocab.special and _is_utf8(vocab.pieces[t])}
    assert texty <= allowed
    assert set(vocab.eog) <= allowed  # and the answer may end without a call
    # once the text holds the trigger, the rest is a valid call, then EOS
    lead = lm.tokenize("Let me check that. <tool_call>", add_special=False)
    matcher = c.Matcher(spec, lm)
    text, _ = greedy(lm, prompt, matcher, max_tokens=80, before=lead)
    assert text.startswith("Let me check that. <tool_call>\n"), text
    (call,) = _parse_hermes(text)
    assert call["name"] == "get_weather" and _valid(call["arguments"], WEATHER)
    assert text.endswith("</tool_call>") and matcher.finished


def test_lazy_trigger_that_is_a_special_token(lm) -> None:
    vocab = c.vocab_for(lm)
    start = vocab.special_token("<|im_start|>")
    assert start is not None
    spec = c.tool_calls([c.CallPattern("<|im_start|>call ", WEATHER, "")], trigger="<|im_start|>")
    matcher = c.Matcher(spec, lm)
    assert start in set(matcher.allowed().tolist())
    text, _ = greedy(lm, "Weather in Oslo?", matcher, max_tokens=60, before=[start])
    # the special token renders as nothing in detokenize; the call follows it
    assert text.startswith("call "), text
    assert _valid(json.loads(text[len("call "):]), WEATHER)


def test_parallel_tool_calls_and_lark_pass_through(lm) -> None:
    vocab = c.vocab_for(lm)
    one = lm.tokenize('<tool_call>\n{"name": "get_weather", "arguments": {"location": "Oslo", "unit": "celsius"}}'
                      '\n</tool_call>', add_special=False)
    single, parallel = (c.Matcher(c.tool_calls([HERMES], parallel=p), lm) for p in (False, True))
    for m in (single, parallel):
        for t in one:
            m.accept(t)
    assert single.is_done() and set(single.allowed().tolist()) == set(vocab.eog)
    assert not parallel.is_done() and parallel.is_accepting()
    newline = lm.tokenize("\n", add_special=False)[0]
    assert newline in set(parallel.allowed().tolist())  # a second call may follow
    for t in lm.tokenize("\n", add_special=False) + one:
        parallel.accept(t)
    assert parallel.is_accepting()
    # llama.cpp's convention: a grammar that starts with %llguidance is llguidance's Lark
    text, _ = greedy(lm, "Say a number.", c.Matcher(c.grammar('%llguidance {}\nstart: /[0-9]{2}/'), lm), 10)
    assert re.fullmatch(r"[0-9]{2}", text)


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


# -- the matcher's contract ---------------------------------------------------------------------------------------

def test_masked_llama_cpp_row_is_what_the_sampler_chain_samples(lm) -> None:
    """The engine's path: mask llama.cpp's own logits row in place (a numpy view, no copy), then let the
    llama.cpp sampler chain sample from the context: it only ever picks allowed tokens."""
    vocab = c.vocab_for(lm)
    lm.truncate(0)
    lm.eval(lm.tokenize(chat("Is the sky blue?"), parse_special=True))
    matcher = c.Matcher(c.grammar('root ::= "maybe" | "perhaps"'), lm)
    allowed = set(matcher.allowed().tolist())
    with lm.hold_context("this test") as context:
        row = context.logits_row(-1)
        before = row.copy()
        matcher.apply(row)
        assert np.isneginf(row[[t for t in range(vocab.n_vocab) if t not in allowed][:1000]]).all()
        assert np.array_equal(row[sorted(allowed)], before[sorted(allowed)])
        for params in (SamplingParams(temperature=0), SamplingParams(temperature=1.5, top_k=0, top_p=1.0, min_p=0.0,
                                                                      seed=3, repeat_penalty=1.3)):
            chain = SamplerChain(params, vocab.n_vocab)
            assert {chain.sample(context) for _ in range(30)} <= allowed


def test_force_end_allows_only_eog_and_accept_checks_tokens(lm) -> None:
    vocab = c.vocab_for(lm)
    matcher = c.Matcher(c.json_schema(PERSON), lm)
    brace = lm.tokenize("{", add_special=False)[0]
    letter = lm.tokenize("x", add_special=False)[0]
    with pytest.raises(ConstraintError, match="not allowed"):
        c.Matcher(c.json_schema(PERSON), lm).accept(letter)
    matcher.accept(brace)
    assert not matcher.is_done()
    matcher.force_end()
    assert matcher.is_done() and not matcher.is_accepting()
    assert set(matcher.allowed().tolist()) == set(vocab.eog)
    logits = np.zeros(vocab.n_vocab, dtype=np.float32)
    matcher.apply(logits)
    assert np.isfinite(logits).sum() == len(vocab.eog)
    with pytest.raises(ConstraintError):
        matcher.accept(letter)
    matcher.accept(vocab.eog[0])
    assert matcher.finished
    matcher.reset()
    assert not matcher.is_done() and matcher.n_accepted == 0
    with pytest.raises(InvalidArgumentError):
        matcher.accept(vocab.n_vocab)
    with pytest.raises(InvalidArgumentError):
        matcher.apply(np.zeros(vocab.n_vocab, dtype=np.float64))
    with pytest.raises(InvalidArgumentError):
        matcher.apply(np.zeros(vocab.n_vocab - 1, dtype=np.float32))


def test_vocab_is_cached_per_model(lm) -> None:
    v = c.vocab_for(lm)
    assert c.vocab_for(lm) is v
    assert v.n_vocab == 49152 and lm.handle.eos == v.eog[0]
    assert v.piece(lm.tokenize("hello", add_special=False)[0]) == b"hello"


def test_compute_masks_in_parallel_matches_one_by_one(lm) -> None:
    specs = [c.json_schema(PERSON), c.regex(r"[a-z]+"), c.grammar('root ::= "a" | "b"'), c.json_object()]
    one = [c.Matcher(s, lm) for s in specs]
    both = [c.Matcher(s, lm) for s in specs]
    for m in one:
        m.compute_mask()
    c.compute_masks(both)
    for a, b in zip(one, both, strict=True):
        assert np.array_equal(a.compute_mask(), b.compute_mask())


@pytest.mark.parametrize("n", [49152, 49157, 31, 1])
def test_apply_bitmask_matches_a_reference(n: int) -> None:
    rng = np.random.default_rng(n)
    words = (n + 31) // 32
    for mask in (rng.integers(-2**31, 2**31, words, dtype=np.int64).astype(np.int32),
                 np.zeros(words, np.int32), np.full(words, -1, np.int32)):
        logits = rng.standard_normal(n).astype(np.float32)
        want = logits.copy()
        want[np.unpackbits(mask.view(np.uint8), bitorder="little")[:n] == 0] = -np.inf
        c.apply_bitmask(logits, mask)
        assert np.array_equal(logits, want)


# -- bad input ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, words", [
    ({"json_schema": {"type": "object", "properties": {"a": {"type": "integr"}}}}, ["json_schema", "integr",
                                                                                    "properties.a.type"]),
    ({"json_schema": {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}}, ["json_schema",
                                                                                            "missing"]),
    ({"json_schema": "{not json"}, ["json_schema", "not valid JSON"]),
    ({"json_schema": 5}, ["json_schema", "int"]),
    ({"regex": r"(\d{3"}, ["regex", "unclosed"]),
    ({"regex": r"(a)\1"}, ["regex"]),
    ({"grammar": 'root ::= "yes" | no'}, ["grammar", "no"]),
    ({"grammar": 'root ::= "unterminated'}, ["grammar"]),
    ({"grammar": ""}, ["grammar", "empty"]),
    ({"response_format": {"type": "xml"}}, ["response_format.type"]),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "bad name!", "schema": {}}}},
     ["response_format.json_schema.name"]),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nope"}}}},
     ["response_format.json_schema.schema"]),
    ({"response_format": {"type": "json_object", "bogus": 1}}, ["bogus"]),
    ({"response_format": "json"}, ["response_format"]),
    ({"json_schema": {"type": "object"}, "regex": "a"}, ["at most one", "json_schema", "regex"]),
])
def test_invalid_constraints_are_clear_errors(kwargs: dict, words: list[str]) -> None:
    with pytest.raises(ConstraintError) as info:
        c.constraint_from(**kwargs)
    assert isinstance(info.value, InvalidArgumentError)
    for w in words:
        assert w in str(info.value), str(info.value)


def test_invalid_tool_call_formats() -> None:
    with pytest.raises(ConstraintError, match=r"tools\[0\]\.prefix must start with the trigger"):
        c.tool_calls([c.CallPattern("[CALL]", WEATHER)], trigger="<tool_call>")
    with pytest.raises(ConstraintError, match=r"tools\[0\]\.schema"):
        c.tool_calls([c.CallPattern("<x>", {"type": "integr"})])
    with pytest.raises(ConstraintError, match="at least one"):
        c.tool_calls([])


# -- logit_bias ---------------------------------------------------------------------------------------------------

def test_logit_bias_bans_and_forces(lm) -> None:
    vocab = c.vocab_for(lm)
    lm.truncate(0)
    lm.eval(lm.tokenize(chat("The capital of France is"), parse_special=True))
    base = lm.last_logits()
    top = int(np.argmax(base))
    banned = base.copy()
    c.LogitBias({top: -100}, vocab.n_vocab).apply(banned)
    assert np.isneginf(banned[top]) and int(np.argmax(banned)) != top
    weakest = int(np.argmin(base))
    forced = base.copy()
    c.apply_logit_bias(forced, {str(weakest): 100})  # JSON gives the ids as strings
    assert int(np.argmax(forced)) == weakest
    nudged = base.copy()
    c.LogitBias({top: 2.5}, vocab.n_vocab).apply(nudged)
    assert nudged[top] == pytest.approx(base[top] + 2.5)
    # with the constraint, the mask still wins over the bias
    matcher = c.Matcher(c.grammar('root ::= "yes" | "no"'), lm)
    both = base.copy()
    c.apply_logit_bias(both, {weakest: 100})
    matcher.apply(both)
    assert np.isneginf(both[weakest]) or weakest in set(matcher.allowed().tolist())


@pytest.mark.parametrize("bias", [{49152: 1}, {-1: 1}, {"abc": 1}, {"1.5": 1}, {True: 1}, {1: 101}, {1: -100.5},
                                  {1: float("nan")}, {1: "5"}, {1: True}, [1, 2], {1.0: 5}])
def test_logit_bias_refuses_bad_ids_and_values(bias: object) -> None:
    with pytest.raises(InvalidArgumentError):
        c.LogitBias(bias, 49152)  # type: ignore[arg-type]
