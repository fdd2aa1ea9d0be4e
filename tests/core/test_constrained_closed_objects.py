"""Object schemas with `properties` are closed by default (no other key), as llama.cpp's converter reads them;
a schema that says otherwise keeps its rule. Checked on the default model: its greedy output, and what the
matcher accepts over its vocabulary."""
from __future__ import annotations

import json

import pytest

import pyllama90a as pl
from pyllama90a.core import constrained as c
from pyllama90a.core.constrained.closed_objects import closed_objects
from pyllama90a.errors import ConstraintError

pytest.importorskip("llguidance")

CITY = {"type": "object", "properties": {"city": {"type": "string"},
                                         "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}
PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name"]}


@pytest.fixture(scope="module")
def lm(model_path):
    with pl.Model(model_path, n_ctx=1024, n_threads=2) as m:
        yield m


def accepts(constraint: c.Constraint, lm: pl.Model, text: str) -> bool:
    """Whether `text` (the model's tokens of it) is a complete output under `constraint`."""
    matcher = c.Matcher(constraint, lm)
    try:
        for token in lm.tokenize(text, add_special=False):
            matcher.accept(token)
    except ConstraintError:
        return False
    return matcher.is_accepting()


def test_the_default_models_extra_keys_are_gone(lm) -> None:
    # unconstrained by the closing, the 135M model adds keys of its own here ("residence", "weather")
    for question, schema in (("Describe Alice, a 30 year old engineer from Paris, as JSON.", PERSON),
                             ("What is the weather in Paris? Answer in JSON.", CITY)):
        reply = lm.chat([{"role": "user", "content": question}], json_schema=schema, temperature=0, max_tokens=60)
        value = json.loads(reply.text)
        assert reply.finish_reason == "stop" and set(value) <= set(schema["properties"]), reply.text


def test_extra_keys_are_refused_where_the_schema_lists_properties(lm) -> None:
    schema = c.json_schema(CITY)
    assert accepts(schema, lm, '{"city": "Paris", "unit": "celsius"}')
    assert not accepts(schema, lm, '{"city": "Paris", "temperature": 25}')
    nested = c.json_schema({"type": "object", "properties": {"where": CITY}, "required": ["where"]})
    assert not accepts(nested, lm, '{"where": {"city": "Paris", "temperature": 25}}')
    listed = c.json_schema({"type": "array", "items": CITY})
    assert not accepts(listed, lm, '[{"city": "Paris", "x": 1}]')


def test_a_schema_that_allows_other_keys_keeps_its_rule(lm) -> None:
    open_ = c.json_schema({**CITY, "additionalProperties": True})
    assert accepts(open_, lm, '{"city": "Paris", "temperature": 25}')
    typed = c.json_schema({**CITY, "additionalProperties": {"type": "integer"}})
    assert accepts(typed, lm, '{"city": "Paris", "temperature": 25}')
    assert not accepts(typed, lm, '{"city": "Paris", "temperature": "hot"}')
    # no properties at all: any object, as JSON Schema (and llama.cpp) say
    assert accepts(c.json_schema({"type": "object"}), lm, '{"anything": [1]}')


def test_all_of_members_are_checked_together(lm) -> None:
    both = c.json_schema({"allOf": [{"properties": {"a": {"type": "integer"}}, "required": ["a"]},
                                    {"properties": {"b": {"type": "integer"}}, "required": ["b"]}]})
    assert accepts(both, lm, '{"a": 1, "b": 2}')


def test_tool_arguments_follow_the_same_rule(lm) -> None:
    call = c.CallPattern('<tool_call>\n{"name": "get_weather", "arguments": ', CITY, "}\n</tool_call>")
    constraint = c.tool_calls([call])
    head = '<tool_call>\n{"name": "get_weather", "arguments": '
    assert accepts(constraint, lm, head + '{"city": "Paris"}}\n</tool_call>')
    assert not accepts(constraint, lm, head + '{"city": "Paris", "temperature": 25}}\n</tool_call>')


def test_the_walk_follows_keywords_not_property_names() -> None:
    schema = {"type": "object",
              "properties": {"properties": {"type": "object", "properties": {"x": {"type": "string"}}},
                             "items": {"type": "string"}},
              "$defs": {"d": {"properties": {"y": {}}}},
              "anyOf": [{"properties": {"z": {}}}, {"type": "string", "properties": {"w": {}}}]}
    out = closed_objects(schema)
    assert out["additionalProperties"] is False
    assert out["properties"]["properties"]["additionalProperties"] is False
    assert "additionalProperties" not in out["properties"]  # (the map of names is no schema)
    assert out["$defs"]["d"]["additionalProperties"] is False
    assert out["anyOf"][0]["additionalProperties"] is False
    assert "additionalProperties" not in out["anyOf"][1]  # a string schema: properties mean nothing there
    kept = closed_objects({"properties": {"a": {}}, "unevaluatedProperties": False})
    assert "additionalProperties" not in kept


def test_an_array_ends_at_its_max_items_on_the_default_model(lm) -> None:
    # without a bound this model lists "Le Marais" until max_tokens; the schema's maxItems is what ends it
    sights = {"type": "object", "properties": {"city": {"type": "string"}, "sights": {
        "type": "array", "items": {"type": "string"}, "maxItems": 3}}, "required": ["city", "sights"]}
    reply = lm.chat([{"role": "user", "content": "List the main sights of Paris."}], json_schema=sights,
                    temperature=0, max_tokens=96)
    assert reply.finish_reason == "stop" and 1 <= len(json.loads(reply.text)["sights"]) <= 3, reply.text


def test_unique_items_is_refused_with_what_to_do() -> None:
    # llguidance cannot enforce uniqueItems (no context-free grammar can): refused, never silently dropped
    with pytest.raises(ConstraintError, match=r"uniqueItems.*maxItems"):
        c.json_schema({"type": "array", "items": {"type": "string"}, "uniqueItems": True})
