"""Tool calling, n > 1 and structured output through the server, with the official openai SDK against a real
server process on the default model: parse() with a pydantic model, required/named/auto/none tool calls,
streamed tool-call deltas reassembled by the SDK, a tool round trip in the history, n choices; bad tools
are a 400 naming the field."""
from __future__ import annotations

import json
import subprocess
import sys

import httpx
import jsonschema
import pytest

from pyllama90a.tools.server_process import ServerProcess
from support.weather_tools import ASK, TIME, WEATHER

pytestmark = pytest.mark.server  # (the test tier: tests/conftest.py)

openai = pytest.importorskip("openai")
pydantic = pytest.importorskip("pydantic")
pytest.importorskip("llguidance")

SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME)}
GREEDY = {"model": "m", "temperature": 0, "max_tokens": 64}


@pytest.fixture(scope="module")
def server(model_path):
    with ServerProcess(["--model", str(model_path), "--parallel", "4", "--n-ctx", "4096", "--threads", "2",
                        "--unknown-fields", "reject"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


def _valid_call(call) -> dict:
    assert call.type == "function" and call.id.startswith("call_")
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, SCHEMAS[call.function.name])
    return arguments


def test_sdk_parse_with_a_pydantic_model(client) -> None:
    class Answer(pydantic.BaseModel):  # (bounded, so that the 135M model's answer ends within max_tokens)
        country: str = pydantic.Field(max_length=30)
        capital: str = pydantic.Field(max_length=30)
        population_millions: int = pydantic.Field(ge=0, le=2000)
        languages: list[str] = pydantic.Field(max_length=3)

    completion = client.chat.completions.parse(
        messages=[{"role": "user", "content": "Describe France."}], response_format=Answer,
        **{**GREEDY, "max_tokens": 200})
    parsed = completion.choices[0].message.parsed
    assert isinstance(parsed, Answer) and completion.choices[0].finish_reason == "stop"


def test_required_and_named_tool_calls_are_valid(client) -> None:
    required = client.chat.completions.create(messages=ASK, tools=[WEATHER, TIME], tool_choice="required",
                                              parallel_tool_calls=False, **GREEDY)
    choice = required.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    assert len(choice.message.tool_calls) == 1
    _valid_call(choice.message.tool_calls[0])
    named = client.chat.completions.create(messages=ASK, tools=[WEATHER, TIME], parallel_tool_calls=False,
                                           tool_choice={"type": "function", "function": {"name": "get_time"}},
                                           **GREEDY)
    (call,) = named.choices[0].message.tool_calls
    assert call.function.name == "get_time"
    _valid_call(call)


def test_streamed_tool_call_deltas_reassemble_in_the_sdk(client) -> None:
    kwargs = {"messages": ASK, "tools": [WEATHER], "tool_choice": "required", "parallel_tool_calls": False, **GREEDY}
    with client.chat.completions.stream(**kwargs) as stream:
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    whole = client.chat.completions.create(**kwargs).choices[0].message.tool_calls[0]
    assert (call.function.name, call.function.arguments) == (whole.function.name, whole.function.arguments)
    _valid_call(call)


def test_a_tool_round_trip_in_the_history(client) -> None:
    first = client.chat.completions.create(messages=ASK, tools=[WEATHER], tool_choice="required",
                                           parallel_tool_calls=False, **GREEDY).choices[0].message
    call = first.tool_calls[0]
    # the SDK's own message object goes back as it is (with its refusal/annotations fields): no 400 under
    # --unknown-fields reject, and the call and its result reach the prompt
    history = [*ASK, first.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": call.id, "content": "22 C and sunny"}]
    reply = client.chat.completions.create(messages=history, tools=[WEATHER], **GREEDY)
    assert reply.choices[0].message.content
    assert reply.usage.prompt_tokens > client.chat.completions.create(messages=ASK, tools=[WEATHER], max_tokens=1,
                                                                       model="m").usage.prompt_tokens


def test_tool_choice_none_and_auto_answer_in_text(client) -> None:
    for choice in ("none", "auto"):
        reply = client.chat.completions.create(messages=[{"role": "user", "content": "Say hello."}],
                                               tools=[WEATHER], tool_choice=choice, **GREEDY).choices[0]
        assert reply.message.content and not reply.message.tool_calls
        assert reply.finish_reason in ("stop", "length")


def test_n_choices(client) -> None:
    reply = client.chat.completions.create(messages=ASK, n=3, temperature=1.0, seed=7, max_tokens=12, model="m")
    assert [c.index for c in reply.choices] == [0, 1, 2]
    texts = [c.message.content for c in reply.choices]
    assert len(set(texts)) > 1  # each choice has its own seed
    assert reply.usage.completion_tokens == 36 or reply.usage.completion_tokens <= 36
    again = client.chat.completions.create(messages=ASK, n=3, temperature=1.0, seed=7, max_tokens=12, model="m")
    assert [c.message.content for c in again.choices] == texts  # reproducible with a seed
    streamed: dict[int, str] = {}
    for chunk in client.chat.completions.create(messages=ASK, n=3, temperature=1.0, seed=7, max_tokens=12, model="m",
                                                stream=True):
        for c in chunk.choices:
            streamed[c.index] = streamed.get(c.index, "") + (c.delta.content or "")
    assert [streamed[i] for i in range(3)] == texts
    completions = client.completions.create(prompt="Once upon a time", n=2, max_tokens=4, temperature=0, model="m")
    assert [c.index for c in completions.choices] == [0, 1] and completions.choices[0].text == \
        completions.choices[1].text  # greedy: the same continuation twice


@pytest.mark.parametrize("body, param", [
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": "always"}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [WEATHER], "response_format": {"type": "json_object"}}, "tools"),
    ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
    ({"messages": [{"role": "user", "content": "x", "tool_calls": []}]}, "messages[0].tool_calls"),
    ({"messages": [{"role": "assistant", "tool_calls": [{"function": {}}]}]}, "messages[0].tool_calls[0]"),
    ({"n": 0}, "n"),
    ({"chat_template_kwargs": {"bos_token": "x"}}, "chat_template_kwargs"),  # refused by the template's render()
    # names of render()'s own parameters: once a 500 (TypeError) or, for add_generation_prompt, a prompt without
    # the assistant's turn
    ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs"),
    ({"chat_template_kwargs": {"tools": []}}, "chat_template_kwargs"),
    ({"chat_template_kwargs": {"add_generation_prompt": False}}, "chat_template_kwargs"),
])
def test_bad_tool_requests_are_a_400_naming_the_field(server, body, param) -> None:
    r = httpx.post(server.base_url + "/v1/chat/completions", json={"messages": ASK, "max_tokens": 2, **body},
                   timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.json()


def _resolved(node, doc):
    """A schema with its $refs (if the document has components) replaced by what they name."""
    if isinstance(node, dict):
        if "$ref" in node:
            target = doc
            for part in node["$ref"].lstrip("#/").split("/"):
                target = target[part]
            return _resolved(target, doc)
        return {k: _resolved(v, doc) for k, v in node.items()}
    return [_resolved(v, doc) for v in node] if isinstance(node, list) else node


HISTORY = [*ASK, {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}},
    {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": {"zone": "CET"}}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": [{"type": "text", "text": "18 C"}]},
    {"role": "user", "content": ["plain", {"type": "text", "text": "parts"}]}]


@pytest.mark.parametrize("bad", [
    {"messages": [{"role": "user", "content": 5}]},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
    {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
    {"messages": [{"role": "assistant", "tool_calls": {"id": "call_1"}}]},
    {"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": 3}}]}]},
    {"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}]},
    {"messages": [{"role": "tool", "tool_call_id": 7, "content": "x"}]},
    {"messages": ASK, "tools": [WEATHER], "tool_choice": "always"},
    {"messages": ASK, "tools": [WEATHER], "tool_choice": {"type": "function", "name": "get_weather"}},
    {"messages": ASK, "tools": [{"type": "function", "function": {"name": "bad name!"}}]},
])
def test_the_openapi_document_types_messages_tools_and_tool_choice(server, bad) -> None:
    """/openapi.json describes a message's content, its tool calls, the tools and tool_choice by their types
    (not "any"): a client validating against it accepts a tool round trip and refuses what the server refuses."""
    doc = httpx.get(server.base_url + "/openapi.json", timeout=60).json()
    body = doc["paths"]["/v1/chat/completions"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    schema = _resolved(body, doc)
    good = {"messages": HISTORY, "tools": [WEATHER, TIME],
            "tool_choice": {"type": "function", "function": {"name": "get_time"}}}
    jsonschema.validate(good, schema)
    assert httpx.post(server.base_url + "/v1/chat/completions", json={**good, "max_tokens": 1},
                      timeout=60).status_code == 200
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, schema)
    answer = httpx.post(server.base_url + "/v1/chat/completions", json={**bad, "max_tokens": 1}, timeout=60)
    assert answer.status_code == 400, answer.text  # (and the server refuses it too)


def test_chat_template_file(tmp_path, model_path) -> None:
    template = tmp_path / "upper.jinja"
    template.write_text("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content | upper }}<|im_end|>\n"
                        "{% endfor %}<|im_start|>assistant\n", encoding="utf-8")
    with ServerProcess(["--model", str(model_path), "--threads", "2", "--n-ctx", "1024", "--parallel", "1",
                        "--chat-template-file", str(template)]) as srv:
        r = httpx.post(srv.base_url + "/v1/chat/completions", json={"messages": ASK, "max_tokens": 1}, timeout=60)
        ours = r.json()["usage"]["prompt_tokens"]
    # the GGUF's template adds SmolLM's default system prompt; this one does not
    assert 10 < ours < 25
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for m in messages %}", encoding="utf-8")
    run = subprocess.run([sys.executable, "-m", "pyllama90a.server", "--chat-template-file", str(broken)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and "syntax error" in run.stderr


# -- LangChain (langchain-openai): what agent frameworks call -------------------------------------------------

def test_langchain_structured_output_and_tools(server) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool

    class Capital(pydantic.BaseModel):
        """A country and its capital."""
        country: str = pydantic.Field(max_length=30)
        capital: str = pydantic.Field(max_length=30)

    @tool
    def get_weather(city: str) -> str:
        """The current weather of a city."""
        return "22 C and sunny"

    llm = langchain_openai.ChatOpenAI(base_url=server.base_url + "/v1", api_key="unused", model="m", temperature=0,
                                      max_tokens=128, max_retries=0)
    for method in ("json_schema", "function_calling"):
        answer = llm.with_structured_output(Capital, method=method).invoke("France: its country and capital.")
        assert isinstance(answer, Capital), method
    bound = llm.bind_tools([get_weather], tool_choice="get_weather", parallel_tool_calls=False)
    asked = bound.invoke("What is the weather in Paris?")
    (call,) = asked.tool_calls
    assert call["name"] == "get_weather" and isinstance(call["args"]["city"], str)
    streamed = None
    for chunk in bound.stream("What is the weather in Paris?"):  # tool-call deltas, merged by LangChain
        streamed = chunk if streamed is None else streamed + chunk
    assert [c["args"] for c in streamed.tool_calls] == [call["args"]]
    history = [HumanMessage("What is the weather in Paris?"), asked,
               ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"])]
    assert llm.bind_tools([get_weather]).invoke(history).content
