"""A forced call (tool_choice "required" or a named function) ends after one complete call unless parallel
calls are on, and parallel_tool_calls defaults to what the chat template can write back (llama.cpp's check,
llama-server's default). On the real default model, whose template (SmolLM2's) knows no tools: one call,
finish_reason "tool_calls"; a call cut off by max_tokens is no call, its text the content."""
from __future__ import annotations

import json

import pytest

import pyllama90a as pl
from pyllama90a.core.chat.template import ChatTemplate
from support.tool_templates import HERMES_STYLE, LLAMA3_STYLE, MISTRAL_STYLE, PLAIN_STYLE
from support.weather_tools import ASK, TIME, WEATHER

pytest.importorskip("llguidance")

GREEDY = {"temperature": 0, "max_tokens": 96}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
# the weather tool as the clients send it: an unbounded string, no additionalProperties
LOOSE_WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}

# writes only an assistant message's first call: one call at a time is all it can show the model
FIRST_CALL_ONLY = HERMES_STYLE.replace("{%- for c in m.tool_calls %}", "{%- for c in m.tool_calls[:1] %}")


@pytest.fixture(scope="module")
def chat_model(model_path):
    with pl.Model(model_path, n_ctx=2048, n_threads=2) as m:
        yield m


@pytest.mark.parametrize(("source", "parallel"), [(HERMES_STYLE, True), (LLAMA3_STYLE, True), (MISTRAL_STYLE, True),
                                                  (FIRST_CALL_ONLY, False), (PLAIN_STYLE, False)],
                         ids=["hermes", "llama3", "mistral", "first-call-only", "plain"])
def test_parallel_calls_are_what_the_template_can_write_back(source, parallel) -> None:
    assert ChatTemplate(source, bos_token="<s>", eos_token="</s>").supports_parallel_tool_calls is parallel


def test_the_default_models_template_writes_no_parallel_calls(chat_model) -> None:
    assert chat_model.chat_template.supports_parallel_tool_calls is False


@pytest.mark.parametrize("choice", ["required", NAMED], ids=["required", "named"])
def test_a_forced_call_ends_after_one_call(chat_model, choice) -> None:
    # with parallel calls on (the default before), this model repeats the call until max_tokens
    reply = chat_model.chat(ASK, tools=[LOOSE_WEATHER, TIME], tool_choice=choice, **GREEDY)
    assert reply.finish_reason == "tool_calls" and reply.text == ""
    assert [c.name for c in reply.tool_calls] == ["get_weather"]
    assert json.loads(reply.tool_calls[0].arguments)["city"] == "Paris"
    streamed = list(chat_model.chat(ASK, tools=[LOOSE_WEATHER, TIME], tool_choice=choice, stream=True, **GREEDY))
    done = streamed[-1].completion
    assert done.finish_reason == "tool_calls" and [c.arguments for c in done.tool_calls] == \
        [c.arguments for c in reply.tool_calls]
    assert "".join(p.text for p in streamed) == ""


def test_parallel_calls_asked_for_are_allowed(chat_model) -> None:
    reply = chat_model.chat(ASK, tools=[LOOSE_WEATHER], tool_choice="required", parallel_tool_calls=True, **GREEDY)
    assert len(reply.tool_calls) > 1  # this model repeats its call when it may


def test_a_call_cut_off_by_max_tokens_is_no_call_and_keeps_its_text(chat_model) -> None:
    """As the server's shapes answer it (docs/api.md): its text was dropped ("") before."""
    forced = {"tools": [WEATHER], "tool_choice": "required", "temperature": 0, "max_tokens": 20}
    reply = chat_model.chat(ASK, **forced)
    assert reply.finish_reason == "length" and reply.tool_calls == ()
    assert reply.text.startswith("<tool_call>") and "get_weather" in reply.text  # (the default model's format)
    streamed = list(chat_model.chat(ASK, stream=True, **forced))
    done = streamed[-1].completion
    assert (done.finish_reason, done.text, done.tool_calls) == ("length", reply.text, ())
    assert "".join(p.text for p in streamed) == reply.text  # the stream's text is the whole answer's
    names = [tc["function"]["name"] for p in streamed for tc in p.tool_calls if "name" in tc.get("function", {})]
    assert names == ["get_weather"]  # (the partial call's deltas went out as it was generated)
