"""Model.chat with tools and Jinja chat templates, and Model.generate/chat with constraints and logit_bias, on
the real default model (SmolLM2-135M-Instruct: its template knows no tools, so calls use the generic format,
the Hermes <tool_call> syntax described in a system message)."""
from __future__ import annotations

import json
import re
from typing import Annotated

import jsonschema
import pytest

import pyllama90a as pl
from pyllama90a.core.chat.messages import normalize_messages
from pyllama90a.core.chat.template import ChatTemplateError
from pyllama90a.core.toolcalls import reassemble
from support.weather_tools import ASK, TIME, WEATHER

pytest.importorskip("llguidance")

GREEDY = {"temperature": 0, "max_tokens": 64}


@pytest.fixture(scope="module")
def chat_model(model_path):
    with pl.Model(model_path, n_ctx=2048, n_threads=2) as m:
        yield m


def _check_call(call, tools) -> dict:
    """A call of one of `tools` whose arguments are JSON that satisfies that tool's schema."""
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    assert call.name in schemas and call.id.startswith("call_")
    arguments = json.loads(call.arguments)
    jsonschema.validate(arguments, schemas[call.name])
    return arguments


def test_required_tool_call_is_a_valid_call(chat_model) -> None:
    reply = chat_model.chat(ASK, tools=[WEATHER, TIME], tool_choice="required", parallel_tool_calls=False, **GREEDY)
    assert reply.finish_reason == "tool_calls" and len(reply.tool_calls) == 1
    _check_call(reply.tool_calls[0], [WEATHER, TIME])
    assert reply.text == ""  # all of the output was the call


def test_named_tool_call_calls_that_function(chat_model) -> None:
    named = {"type": "function", "function": {"name": "get_time"}}
    reply = chat_model.chat(ASK, tools=[WEATHER, TIME], tool_choice=named, parallel_tool_calls=False, **GREEDY)
    assert [c.name for c in reply.tool_calls] == ["get_time"] and reply.finish_reason == "tool_calls"
    _check_call(reply.tool_calls[0], [TIME])


def test_streamed_tool_call_deltas_reassemble_to_the_call(chat_model) -> None:
    pieces = list(chat_model.chat(ASK, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False,
                                  stream=True, **GREEDY))
    done = pieces[-1].completion
    assert done is not None and done.finish_reason == pieces[-1].finish_reason == "tool_calls"
    rebuilt = reassemble([{"tool_calls": p.tool_calls} for p in pieces if p.tool_calls])
    assert [(c.id, c.name, c.arguments) for c in rebuilt.tool_calls] == \
        [(c.id, c.name, c.arguments) for c in done.tool_calls]
    assert sum(len(p.tokens) for p in pieces) == len(done.tokens)  # held-back text's tokens are not lost
    _check_call(done.tool_calls[0], [WEATHER])


def test_tool_choice_none_hides_the_tools(chat_model) -> None:
    with_tools = chat_model.apply_chat_template(ASK, tools=[WEATHER])
    assert "get_weather" in with_tools and "<tool_call>" in with_tools
    reply = chat_model.chat(ASK, tools=[WEATHER], tool_choice="none", **GREEDY)
    assert reply.tool_calls == () and reply.finish_reason in ("stop", "length")
    assert reply.text == chat_model.chat(ASK, **GREEDY).text  # the same prompt as without tools


def test_auto_tool_choice_may_answer_in_text(chat_model) -> None:
    # the 135M model answers this in prose: "auto" must leave text free (the constraint starts at <tool_call>)
    reply = chat_model.chat([{"role": "user", "content": "Say hello."}], tools=[WEATHER], **GREEDY)
    assert reply.text and "<tool_call>" not in reply.text
    assert reply.finish_reason in ("stop", "length") and reply.tool_calls == ()


def test_tool_history_reaches_the_prompt(chat_model) -> None:
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris", "unit": "C"}'}}
    history = [*ASK, {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": "call_1", "content": "22 C and sunny"}]
    prompt = chat_model.apply_chat_template(history, tools=[WEATHER])
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}\n</tool_call>' in prompt
    assert "<tool_response>\n22 C and sunny\n</tool_response>" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")
    assert chat_model.chat(history, tools=[WEATHER], **GREEDY).text


def test_tools_and_a_response_format_are_refused_together(chat_model) -> None:
    with pytest.raises(pl.InvalidArgumentError, match="tool_choice"):
        chat_model.chat(ASK, tools=[WEATHER], response_format={"type": "json_object"})
    # a forced call writes no text for the format to shape: the call comes back (instructor's RESPONSES_TOOLS)
    forced = chat_model.chat(ASK, tools=[WEATHER], response_format={"type": "json_object"}, **GREEDY,
                             tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert [c.name for c in forced.tool_calls] == ["get_weather"] and forced.finish_reason == "tool_calls"
    with pytest.raises(pl.InvalidArgumentError, match="not a function in tools"):
        chat_model.chat(ASK, tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "nope"}})
    with pytest.raises(pl.InvalidArgumentError, match="tools"):
        chat_model.chat(ASK, tools=[{"type": "function", "function": {"name": "bad name!"}}])


@pytest.mark.parametrize(("kwargs", "param"), [
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools"),
    ({"tools": [WEATHER], "tool_choice": "always"}, "tool_choice"),
    ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"tools": [WEATHER], "response_format": {"type": "json_object"}}, "tools"),
    ({"chat_template_kwargs": [1]}, "chat_template_kwargs"),
    ({"chat_template_kwargs": {"bos_token": "x"}}, "chat_template_kwargs"),  # a variable render() sets
    ({"chat_template_kwargs": {"add_generation_prompt": False}}, "chat_template_kwargs"),  # render()'s own argument
    ({"chat_template_kwargs": {1: True}}, "chat_template_kwargs"),
    ({"messages": [ASK[0], {"role": "user", "content": [{"type": "image_url"}]}]}, "messages[1].content[0]"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]}, "messages[0].tool_calls[0]"),
    ({"messages": [{"role": "user", "content": "\ud800"}]}, "messages[0].content"),
    ({"logit_bias": {10**9: 5}}, "logit_bias"),
])
def test_a_refusal_names_its_argument(chat_model, kwargs, param) -> None:
    """The server's 400s take `param` from here: the raiser names the argument, nobody parses its message."""
    kwargs = {"messages": ASK, "max_tokens": 2, **kwargs}
    with pytest.raises(pl.InvalidArgumentError) as e:
        chat_model.chat(kwargs.pop("messages"), **kwargs)
    assert e.value.param == param, e.value


# -- constraints and logit_bias in generate/chat ---------------------------------------------------------------

def test_generate_json_schema_from_a_pydantic_model(chat_model) -> None:
    pydantic = pytest.importorskip("pydantic")

    class City(pydantic.BaseModel):  # (bounded, so that the 135M model's answer ends within max_tokens)
        model_config = pydantic.ConfigDict(extra="forbid")  # (else JSON schema allows more keys, and it adds them)
        name: str = pydantic.Field(max_length=30)
        population: int = pydantic.Field(ge=0, le=10**9)
        landmarks: list[Annotated[str, pydantic.Field(max_length=30)]] = pydantic.Field(max_length=3)

    out = chat_model.generate("A city as JSON:", json_schema=City, temperature=0, max_tokens=200)
    assert out.finish_reason == "stop"  # the grammar ended it
    City.model_validate_json(out.text)


def test_chat_response_format_json_schema(chat_model) -> None:
    schema = {"type": "object", "properties": {"answer": {"enum": ["yes", "no"]}}, "required": ["answer"],
              "additionalProperties": False}
    reply = chat_model.chat([{"role": "user", "content": "Is Paris in France?"}], temperature=0, max_tokens=32,
                            response_format={"type": "json_schema", "json_schema": {"name": "a", "schema": schema}})
    jsonschema.validate(json.loads(reply.text), schema)


def test_generate_regex_and_grammar(chat_model) -> None:
    out = chat_model.generate("The year the Eiffel Tower was built:", regex=r" [0-9]{4}\.", temperature=0,
                              max_tokens=16)
    assert re.fullmatch(r" [0-9]{4}\.", out.text), out.text
    gbnf = 'root ::= "It is " ("red" | "green" | "blue") "."'
    streamed = "".join(p.text for p in chat_model.generate("The sky:", grammar=gbnf, temperature=0, max_tokens=16,
                                                           stream=True))
    assert streamed in ("It is red.", "It is green.", "It is blue.")


def test_logit_bias_bans_and_forces(chat_model) -> None:
    free = chat_model.generate("The capital of France is", temperature=0, max_tokens=1)
    banned = chat_model.generate("The capital of France is", temperature=0, max_tokens=1,
                                 logit_bias={free.tokens[0]: -100})
    assert banned.tokens[0] != free.tokens[0]
    forced_token = chat_model.tokenize(" banana", add_special=False)[0]
    forced = chat_model.generate("The capital of France is", temperature=0.8, seed=1, max_tokens=3,
                                 logit_bias={str(forced_token): 100})
    assert forced.tokens == [forced_token] * 3
    with pytest.raises(pl.InvalidArgumentError, match="logit_bias"):
        chat_model.generate("x", logit_bias={10**9: 1})


def test_at_most_one_constraint(chat_model) -> None:
    with pytest.raises(pl.InvalidArgumentError, match="at most one"):
        chat_model.generate("x", regex="a", grammar='root ::= "a"')
    with pytest.raises(pl.InvalidArgumentError, match="grammar"):
        chat_model.generate("x", grammar="root ::= (")


# -- chat templates ------------------------------------------------------------------------------------------

def test_the_gguf_template_is_rendered_with_jinja(chat_model) -> None:
    assert chat_model.chat_template is not None
    prompt = chat_model.apply_chat_template(ASK)
    # SmolLM2's own template adds its default system prompt (llama.cpp's matcher would not)
    assert prompt.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert prompt == chat_model.chat_template.render(normalize_messages(ASK))
    # the text reaches the tokenizer with its length, so a NUL does not cut a message (llama.cpp's C API would)
    assert "<|im_start|>user\na\0b<|im_end|>" in chat_model.apply_chat_template([{"role": "user", "content": "a\0b"}])


def test_a_chat_template_override(model_path) -> None:
    template = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | upper }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    with pl.Model(model_path, n_ctx=512, n_threads=2, chat_template=template) as m:
        assert m.apply_chat_template(ASK) == "<|im_start|>user\nWHAT IS THE WEATHER IN PARIS?<|im_end|>\n" \
                                             "<|im_start|>assistant\n"
        assert m.chat(ASK, temperature=0, max_tokens=4).usage.prompt_tokens == len(m.tokenize(
            m.apply_chat_template(ASK), add_special=False, parse_special=True))
    with pytest.raises(ChatTemplateError, match="syntax error"):
        pl.Model(model_path, n_ctx=512, chat_template="{% for m in messages %}")


def test_a_template_that_fails_is_a_clear_error(model_path) -> None:
    with (pl.Model(model_path, n_ctx=512, n_threads=2,
                   chat_template="{{ raise_exception('only user messages, please') }}") as m,
          pytest.raises(ChatTemplateError, match="only user messages")):
        m.chat(ASK, max_tokens=2)


def test_a_file_without_a_template_chats_with_llama_cpp_chatml(tmp_path) -> None:
    from pyllama90a.tools.synthetic import SHAPES, write_synthetic

    tiny = write_synthetic(SHAPES["tiny"], tmp_path / "tiny.gguf", weight_type="f16")
    with pl.Model(tiny, n_ctx=256, n_threads=2) as m:
        assert m.chat_template is None
        assert m.apply_chat_template(ASK) == \
            "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n<|im_start|>assistant\n"
        with_tools = m.apply_chat_template(ASK, tools=[WEATHER])
        assert with_tools.startswith("<|im_start|>system\n") and "get_weather" in with_tools
        assert m.chat(ASK, temperature=0, max_tokens=2).usage.completion_tokens >= 1
        with pytest.raises(pl.InvalidArgumentError, match="NUL") as e:  # (llama.cpp's template takes C strings)
            m.chat([{"role": "user", "content": "a\0b"}], max_tokens=2)
        assert e.value.param == "messages"


def test_parallel_mistral_calls_whose_parameters_use_defs(model_path) -> None:
    # the parameters nested in the array of calls: their "#/$defs/Unit" pointed into the array, and the
    # constraint failed to compile ("Pointer '/$defs/Unit' does not exist"); pydantic writes $defs for any enum
    parameters = {"type": "object", "$defs": {"Unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"],
                  "properties": {"city": {"type": "string"}, "unit": {"$ref": "#/$defs/Unit"}}}
    tools = [{"type": "function", "function": {"name": "weather", "parameters": parameters}}]
    mistral = "{% for m in messages %}[INST]{{ m['content'] }}[/INST]{% endfor %}{# [TOOL_CALLS] #}"
    with pl.Model(model_path, n_ctx=1024, chat_template=mistral) as m:
        out = m.chat([{"role": "user", "content": "Weather in Paris?"}], tools=tools, tool_choice="required",
                     parallel_tool_calls=True, temperature=0, max_tokens=60)
    assert out.finish_reason == "tool_calls" and out.tool_calls
    for call in out.tool_calls:
        jsonschema.validate(json.loads(call.arguments), parameters)
