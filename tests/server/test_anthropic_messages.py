"""Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens) with the official anthropic SDK against a
real server process on the default model: a message at temperature 0 whole and streamed (the same text), a
forced tool_use whose input fits its schema and the tool_result turn after it, count_tokens equal to the
message's input and cache-read tokens (a repeated prompt read from the prompt cache), structured output through
output_config, the API key in x-api-key, and errors in Anthropic's shape (a wrong key, an image block, a bad
body). Thinking (thinking blocks, thinking_delta and signature_delta, the switch and the budget) on the default
model with Qwen's QwQ-32B chat template (tests/data), whose generation prompt opens the block."""
from __future__ import annotations

import json
from pathlib import Path

import httpx
import jsonschema
import pytest
from starlette.testclient import TestClient

import pyllama90a as pl
from pyllama90a.server import ServerState, create_app
from pyllama90a.tools.server_process import ServerProcess
from support.weather_tools import ASK, WEATHER

pytestmark = pytest.mark.server  # (the test tier: tests/conftest.py)

anthropic = pytest.importorskip("anthropic")
pydantic = pytest.importorskip("pydantic")
pytest.importorskip("llguidance")

KEY = "test-key-36"
# (this SDK's create() has no temperature argument: Anthropic's newer models take none; the API field is served)
GREEDY = {"model": "m", "max_tokens": 48, "extra_body": {"temperature": 0}}
HELLO = [{"role": "user", "content": "Name three colors."}]
TOOL = {"name": WEATHER["function"]["name"], "description": WEATHER["function"]["description"],
        "input_schema": WEATHER["function"]["parameters"]}


@pytest.fixture(scope="module")
def server(model_path):
    with ServerProcess(["--model", str(model_path), "--parallel", "2", "--n-ctx", "4096", "--threads", "2",
                        "--api-key", KEY, "--unknown-fields", "reject"]) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    return anthropic.Anthropic(base_url=server.base_url, api_key=KEY, max_retries=0, timeout=120)


def test_a_message_whole_and_streamed_is_the_same_text(client) -> None:
    message = client.messages.create(messages=HELLO, system="Answer briefly.", **GREEDY)
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert message.stop_reason in ("end_turn", "max_tokens") and message.usage.output_tokens > 0
    (block,) = message.content
    assert block.type == "text" and block.text.strip()
    with client.messages.stream(messages=HELLO, system="Answer briefly.", **GREEDY) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert [b.text for b in final.content] == [block.text]
    assert (final.stop_reason, final.usage.output_tokens) == (message.stop_reason, message.usage.output_tokens)
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "content_block_delta" in kinds


def test_the_stream_is_anthropics_named_events(server) -> None:
    body = {"model": "m", "max_tokens": 8, "temperature": 0, "stream": True, "messages": HELLO}
    with httpx.stream("POST", server.base_url + "/v1/messages", json=body, headers={"x-api-key": KEY},
                      timeout=120) as response:
        lines = [line for line in response.iter_lines() if line]
    names = [line.removeprefix("event: ") for line in lines[0::2]]
    datas = [json.loads(line.removeprefix("data: ")) for line in lines[1::2]]
    assert [d["type"] for d in datas] == names
    assert names[:3] == ["message_start", "ping", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert datas[-2]["delta"]["stop_reason"] == "max_tokens" and datas[-2]["usage"]["output_tokens"] == 8


def test_a_forced_tool_use_and_the_tool_result_turn(client) -> None:
    forced = client.messages.create(messages=ASK, tools=[TOOL], tool_choice={"type": "tool", "name": "get_weather"},
                                    **{**GREEDY, "max_tokens": 64})
    assert forced.stop_reason == "tool_use"
    (call,) = [b for b in forced.content if b.type == "tool_use"]
    assert call.name == "get_weather" and call.id.startswith("toolu_")
    jsonschema.validate(call.input, TOOL["input_schema"])
    answered = client.messages.create(
        messages=[*ASK, {"role": "assistant", "content": forced.content},
                  {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                                "content": "18 degrees C and sunny"}]}],
        tools=[TOOL], **GREEDY)
    assert answered.stop_reason in ("end_turn", "max_tokens")
    assert answered.content and answered.content[0].type == "text" and answered.content[0].text.strip()


def test_a_forced_tool_use_cut_off_by_max_tokens_keeps_its_text(client) -> None:
    """LiteLLM's anthropic/ structured output at max_tokens 32 got an empty content (the client matrix): the
    partial call is kept as text, as chat keeps it as content."""
    cut = client.messages.create(messages=ASK, tools=[TOOL], tool_choice={"type": "tool", "name": "get_weather"},
                                 **{**GREEDY, "max_tokens": 8})
    assert cut.stop_reason == "max_tokens"
    (block,) = cut.content
    assert block.type == "text" and block.text.startswith("<tool_call>")  # (the default model's call format)


def test_count_tokens_is_the_messages_input_tokens(client) -> None:
    for tools in ([], [TOOL]):
        counted = client.messages.count_tokens(model="m", messages=ASK, system="Be brief.", tools=tools)
        message = client.messages.create(messages=ASK, system="Be brief.", tools=tools, **{**GREEDY, "max_tokens": 1})
        usage = message.usage
        assert counted.input_tokens == usage.input_tokens + usage.cache_read_input_tokens > 0
    assert client.messages.count_tokens(model="m", messages=ASK, tools=[TOOL]).input_tokens > \
        client.messages.count_tokens(model="m", messages=ASK).input_tokens  # (the tools are in the prompt)


def test_a_repeated_prompt_is_read_from_the_cache(client) -> None:
    """usage as Anthropic counts it: the prompt tokens the prompt cache gave are cache_read_input_tokens, the
    rest input_tokens; whole and streamed alike."""
    ask = [{"role": "user", "content": "Name three colors of the rainbow, please, in order."}]
    first = client.messages.create(messages=ask, **{**GREEDY, "max_tokens": 2})
    again = client.messages.create(messages=ask, **{**GREEDY, "max_tokens": 2})
    prompt = client.messages.count_tokens(model="m", messages=ask).input_tokens
    assert first.usage.input_tokens + first.usage.cache_read_input_tokens == prompt
    assert again.usage.cache_read_input_tokens >= prompt // 2 and again.usage.cache_creation_input_tokens == 0
    assert again.usage.input_tokens == prompt - again.usage.cache_read_input_tokens >= 1
    with client.messages.stream(messages=ask, **{**GREEDY, "max_tokens": 2}) as stream:
        streamed = stream.get_final_message().usage
    assert streamed.cache_read_input_tokens >= prompt // 2
    assert streamed.input_tokens + streamed.cache_read_input_tokens == prompt


CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                         "population_millions": {"type": "integer", "minimum": 0, "maximum": 100}},
        "required": ["city", "population_millions"], "additionalProperties": False}


def test_structured_output_with_output_config(client) -> None:
    """output_config.format (the SDK's shape) constrains the answer as response_format does; the SDK's parse()
    builds it from a pydantic model and reads the answer back."""
    message = client.messages.create(messages=[{"role": "user", "content": "Name a big city of France."}],
                                     output_config={"format": {"type": "json_schema", "schema": CITY}},
                                     **{**GREEDY, "max_tokens": 60})
    assert message.stop_reason == "end_turn"
    jsonschema.validate(json.loads(message.content[0].text), CITY)

    class Capital(pydantic.BaseModel):  # (bounded, so that the 135M model's answer ends within the limit)
        country: str = pydantic.Field(max_length=20)
        capital: str = pydantic.Field(max_length=20)

    parsed = client.messages.parse(messages=[{"role": "user", "content": "Name a country and its capital."}],
                                   output_format=Capital, **{**GREEDY, "max_tokens": 60})
    assert isinstance(parsed.parsed_output, Capital)


def test_thinking_on_a_template_without_thinking(client) -> None:
    """The default model's template has no thinking markers: thinking enabled (a budget of at most N tokens of
    thinking) is served, and the model thinks nothing, as llama-server answers it."""
    message = client.messages.create(messages=HELLO, thinking={"type": "enabled", "budget_tokens": 16},
                                     **GREEDY)
    assert [b.type for b in message.content] == ["text"] and message.content[0].text.strip()


def test_the_sdks_history_fields_are_accepted(client) -> None:
    """Fields an earlier answer's blocks carry (citations, a direct caller, no toolset) change nothing in the
    prompt."""
    plain = [*ASK, {"role": "assistant", "content": [{"type": "text", "text": "Let me look."},
                                                     {"type": "tool_use", "id": "t1", "name": TOOL["name"],
                                                      "input": {"city": "Paris", "unit": "C"}}]}]
    carried = [*ASK, {"role": "assistant", "content": [
        {"type": "text", "text": "Let me look.", "citations": []},
        {"type": "tool_use", "id": "t1", "name": TOOL["name"], "input": {"city": "Paris", "unit": "C"},
         "caller": {"type": "direct"}, "toolset_name": None}]}]
    assert client.messages.count_tokens(model="m", messages=carried, tools=[TOOL]).input_tokens == \
        client.messages.count_tokens(model="m", messages=plain, tools=[TOOL]).input_tokens


def test_the_key_in_x_api_key_and_a_wrong_one(server) -> None:
    body = {"model": "m", "max_tokens": 1, "messages": HELLO}
    ok = httpx.post(server.base_url + "/v1/messages", json=body, headers={"x-api-key": KEY}, timeout=60)
    assert ok.status_code == 200 and ok.json()["type"] == "message"
    wrong = anthropic.Anthropic(base_url=server.base_url, api_key="not-the-key", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as caught:
        wrong.messages.create(messages=HELLO, **GREEDY)
    assert caught.value.status_code == 401 and caught.value.body["type"] == "error"
    assert caught.value.body["error"]["type"] == "authentication_error"


def test_an_image_block_is_refused_naming_it(client) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}}
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(messages=[{"role": "user", "content": [{"type": "text", "text": "What is it?"},
                                                                      image]}], **GREEDY)
    error = caught.value.body["error"]
    assert error["type"] == "invalid_request_error" and "messages[0].content[1]" in error["message"]
    assert "image" in error["message"]


@pytest.mark.parametrize(("body", "named"), [
    ({"model": "m", "messages": HELLO}, "max_tokens"),  # required, as Anthropic's
    ({"model": "m", "max_tokens": 8, "messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ({"model": "m", "max_tokens": 8, "thinking": {"type": "enabled", "budget_tokens": 64}, "messages": HELLO},
     "thinking.budget_tokens"),  # (thinking counts in max_tokens, as Anthropic's)
    ({"model": "m", "max_tokens": 8, "thinking": {"type": "enabled"}, "messages": HELLO}, "budget_tokens"),
    ({"model": "m", "max_tokens": 8, "thinking": {"type": "between_tools"}, "messages": HELLO}, "thinking.type"),
    ({"model": "m", "max_tokens": 8, "output_config": {"effort": "high"}, "messages": HELLO}, "output_config.effort"),
    ({"model": "m", "max_tokens": 8, "output_config": {"format": {"type": "json_object"}}, "messages": HELLO},
     "output_config.format"),
    ({"model": "m", "max_tokens": 8, "tools": [{**TOOL, "input_examples": [{"city": "Paris"}]}], "messages": HELLO},
     "tools[0].input_examples"),
    ({"model": "m", "max_tokens": 8, "messages": [*HELLO, {"role": "assistant", "content": [
        {"type": "tool_use", "id": "t1", "name": "f", "input": {}, "caller": {"type": "code_execution_20250825"}}]}]},
     "messages[1].content[0].caller"),
    ({"model": "m", "max_tokens": 8, "messages": HELLO, "temprature": 0}, "temprature"),  # (--unknown-fields reject)
    # (a block type that is no string: once a 500, found by schemathesis)
    ({"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": [{"type": {}}]}]},
     "messages[0].content[0].type"),
])
def test_a_bad_body_gets_anthropics_error_shape(server, body, named) -> None:
    for path in ("/v1/messages", "/v1/messages/count_tokens"):
        if path.endswith("count_tokens") and named in ("max_tokens", "thinking.budget_tokens"):
            continue  # (count_tokens has no max_tokens)
        response = httpx.post(server.base_url + path, json=body, headers={"x-api-key": KEY}, timeout=60)
        assert response.status_code == 400, response.text
        answer = response.json()
        assert answer["type"] == "error" and answer["error"]["type"] == "invalid_request_error"
        assert named in answer["error"]["message"]


THINKING = Path(__file__).resolve().parents[1] / "data" / "qwq-32b.jinja"
MATH = [{"role": "user", "content": "What is 2+2?"}]


@pytest.fixture(scope="module")
def thinker(model_path):
    """The SDK on an in-process server whose template thinks."""
    engine = pl.BatchEngine(model_path, parallel=1, n_ctx=1024, n_threads=2, chat_template=THINKING.read_text())
    with TestClient(create_app(ServerState(engine, "m"))) as http:
        yield anthropic.Anthropic(base_url=str(http.base_url), api_key="unused", http_client=http, max_retries=0)
    engine.close()


def test_thinking_blocks_whole_and_streamed(thinker) -> None:
    kwargs = {**GREEDY, "max_tokens": 40, "messages": MATH, "thinking": {"type": "enabled", "budget_tokens": 6}}
    message = thinker.messages.create(**kwargs)
    thought = message.content[0]
    assert thought.type == "thinking" and thought.thinking.strip() and thought.signature == ""
    assert "<think>" not in thought.thinking and all(b.type != "thinking" for b in message.content[1:])
    with thinker.messages.stream(**kwargs) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_message()
    assert [b.model_dump() for b in final.content] == [b.model_dump() for b in message.content]
    assert "thinking" in kinds and kinds.index("signature") < kinds.index("content_block_stop")
    # the budget: forced to end after 6 tokens, where the unbounded block runs on
    unbounded = thinker.messages.create(**{**kwargs, "thinking": {"type": "adaptive"}})
    assert len(unbounded.content[0].thinking) > len(thought.thinking)
    # display omitted: the block, without its text
    omitted = thinker.messages.create(**{**kwargs, "thinking": {**kwargs["thinking"], "display": "omitted"}})
    assert (omitted.content[0].type, omitted.content[0].thinking) == ("thinking", "")


def test_thinking_disabled_closes_the_block(thinker) -> None:
    disabled = {"type": "disabled"}
    message = thinker.messages.create(**{**GREEDY, "max_tokens": 12}, messages=MATH, thinking=disabled)
    assert [b.type for b in message.content] == ["text"]
    # the prompt: the block the template opened is closed (</think>), so it counts more tokens
    enabled = thinker.messages.count_tokens(model="m", messages=MATH, thinking={"type": "adaptive"}).input_tokens
    assert thinker.messages.count_tokens(model="m", messages=MATH, thinking=disabled).input_tokens > enabled
