"""OpenAI's Responses API (POST /v1/responses) with the official openai SDK's `client.responses`, against a real
server process on the default model at temperature 0: a plain answer and its stream (event order, sequence
numbers, deltas that join to the final text), a forced function call and its function_call_output round trip,
text.format json_schema (and the SDK's parse()), previous_response_id replaying the stored conversation, the
store's limit, cached_tokens of a repeated prompt, llama-server's timings_per_token and return_progress, and 400s
naming the built-in tool, the unserved field or the unknown item key. Reasoning items (whole, streamed, replayed,
reasoning.effort) on the default model with Qwen's QwQ-32B chat template (tests/data), whose generation prompt
opens the thinking block; a template's refusal named by this API's field."""
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
from support.weather_tools import WEATHER

pytestmark = pytest.mark.server  # (the test tier: tests/conftest.py)

openai = pytest.importorskip("openai")
pydantic = pytest.importorskip("pydantic")
pytest.importorskip("llguidance")

STORE_LIMIT = 3
GREEDY = {"model": "m", "temperature": 0, "max_output_tokens": 16}
# the chat tool of support/weather_tools in the Responses form (its fields at the top)
WEATHER_TOOL = {"type": "function", **WEATHER["function"], "strict": True}
QUESTION = "What is the weather in Paris?"


@pytest.fixture(scope="module")
def server(model_path):
    with ServerProcess(["--model", str(model_path), "--parallel", "2", "--n-ctx", "4096", "--threads", "2",
                        "--unknown-fields", "reject", "--responses-store", str(STORE_LIMIT)]) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.base_url + "/v1", api_key="unused", max_retries=0, timeout=120)


def _finished_as_counted(response, max_output_tokens: int) -> None:
    """status says whether max_output_tokens cut the answer, as the usage counts it."""
    usage = response.usage
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens and usage.input_tokens > 0
    if usage.output_tokens == max_output_tokens:
        assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    else:
        assert response.status == "completed" and response.incomplete_details is None


def test_plain_answer_and_its_stream(client, server) -> None:
    # (a prompt whose greedy path has no near-tie in its first 12 tokens: a cached prefix, as the stream's request
    # finds the first's, may otherwise take the runner-up: test_server.py's _assert_greedy_path)
    kwargs = {**GREEDY, "max_output_tokens": 12, "input": "Count from 1 to 10."}
    whole = client.responses.create(**kwargs)
    assert whole.id.startswith("resp_") and whole.object == "response"
    (message,) = whole.output
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert whole.output_text.strip()
    _finished_as_counted(whole, 12)

    events = list(client.responses.create(**kwargs, stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    deltas = [i for i, k in enumerate(kinds) if k == "response.output_text.delta"]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert deltas == list(range(4, 4 + len(deltas))) and deltas
    assert kinds[4 + len(deltas):] == ["response.output_text.done", "response.content_part.done",
                                       "response.output_item.done", "response." + whole.status]
    final = events[-1].response
    text = "".join(events[i].delta for i in deltas)
    assert text == final.output_text == events[-4].text == whole.output_text
    assert final.usage.output_tokens == whole.usage.output_tokens and final.status == whole.status
    assert len({e.item_id for e in events if hasattr(e, "item_id")}) == 1

    # on the wire: each event's `event:` line names its data's type
    with httpx.stream("POST", server.base_url + "/v1/responses", json={**kwargs, "stream": True},
                      timeout=120) as raw:
        lines = [line for line in raw.iter_lines() if line]
    names, data = lines[0::2], lines[1::2]
    assert [n.removeprefix("event: ") for n in names] == [json.loads(d.removeprefix("data: "))["type"] for d in data]
    assert names[-1] == "event: response." + whole.status


def _valid_call(item) -> dict:
    assert item.type == "function_call" and item.call_id.startswith("call_") and item.name == "get_weather"
    arguments = json.loads(item.arguments)
    jsonschema.validate(arguments, WEATHER["function"]["parameters"])
    return arguments


def test_a_forced_call_cut_off_by_max_output_tokens_keeps_its_text(client) -> None:
    """As chat keeps a cut-off call's text as content (issue 36 item 4): it was an empty output_text."""
    cut = client.responses.create(input=QUESTION, **{**GREEDY, "max_output_tokens": 8}, tools=[WEATHER_TOOL],
                                  tool_choice={"type": "function", "name": "get_weather"})
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"
    (message,) = cut.output
    assert message.type == "message" and message.content[0].text.startswith("<tool_call>")


def test_forced_function_call_and_its_output_round_trip(client) -> None:
    ask = [{"role": "user", "content": QUESTION}]
    forced = {**GREEDY, "max_output_tokens": 64, "tools": [WEATHER_TOOL], "parallel_tool_calls": False,
              "tool_choice": {"type": "function", "name": "get_weather"}}
    first = client.responses.create(input=ask, **forced)
    (call,) = first.output
    _valid_call(call)
    assert first.status == "completed"

    # streamed: the same call, its arguments' deltas joined; the SDK's stream helper accumulates the events
    with client.responses.stream(input=ask, **forced) as stream:
        events = list(stream)
        accumulated = stream.get_final_response()
    arguments = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    (done,) = [e for e in events if e.type == "response.function_call_arguments.done"]
    (streamed,) = events[-1].response.output
    assert arguments == done.arguments == streamed.arguments == call.arguments and streamed.name == call.name
    assert [item.model_dump() for item in accumulated.output] == [streamed.model_dump()]

    answer = client.responses.create(input=[*ask, call.model_dump(exclude_none=True), {
        "type": "function_call_output", "call_id": call.call_id, "output": "Sunny, 21 C"}],
        tools=[WEATHER_TOOL], tool_choice="none", **GREEDY)
    (message,) = answer.output
    assert message.type == "message" and answer.output_text.strip()
    # the call and its output are in the prompt: more tokens than the question alone (tools hidden by "none")
    without = client.responses.create(input=ask, tools=[WEATHER_TOOL], tool_choice="none", **GREEDY)
    assert answer.usage.input_tokens > without.usage.input_tokens + 10


def test_structured_output_with_text_format(client) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                               "population_millions": {"type": "integer", "minimum": 0,
                                                                       "maximum": 100}},
              "required": ["city", "population_millions"], "additionalProperties": False}
    response = client.responses.create(
        input="Name a big city of France.", text={"format": {"type": "json_schema", "name": "city", "schema": schema,
                                                             "strict": True}}, **{**GREEDY, "max_output_tokens": 60})
    assert response.status == "completed" and response.text.format.type == "json_schema"
    jsonschema.validate(json.loads(response.output_text), schema)

    class Capital(pydantic.BaseModel):  # (bounded, so that the 135M model's answer ends within the limit)
        country: str = pydantic.Field(max_length=20)
        capital: str = pydantic.Field(max_length=20)

    parsed = client.responses.parse(input="Name a country and its capital.", text_format=Capital,
                                    **{**GREEDY, "max_output_tokens": 60})
    assert isinstance(parsed.output_parsed, Capital)


def test_previous_response_id_continues_the_stored_conversation(client) -> None:
    first_turn = "My name is Ada and I live in Paris."
    first = client.responses.create(input=first_turn, **GREEDY)
    follow_up = client.responses.create(input="Where do I live?", previous_response_id=first.id, **GREEDY)
    assert follow_up.previous_response_id == first.id
    # the same conversation sent whole: the same prompt, token for token
    whole = client.responses.create(input=[{"role": "user", "content": first_turn},
                                           {"role": "assistant", "content": first.output_text},
                                           {"role": "user", "content": "Where do I live?"}], store=False, **GREEDY)
    assert follow_up.usage.input_tokens == whole.usage.input_tokens
    assert follow_up.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens

    assert client.responses.retrieve(follow_up.id).output_text == follow_up.output_text
    client.responses.delete(follow_up.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(follow_up.id)
    with pytest.raises(openai.BadRequestError) as refused:  # store=False: nothing was kept
        client.responses.create(input="And my name?", previous_response_id=whole.id, **GREEDY)
    assert refused.value.body["code"] == "previous_response_not_found"


def test_the_store_forgets_the_least_recently_used_past_its_limit(client) -> None:
    short = {**GREEDY, "max_output_tokens": 2}
    oldest = client.responses.create(input="One.", **short)
    kept = [client.responses.create(input=f"Turn {i}.", **short) for i in range(STORE_LIMIT)]
    with pytest.raises(openai.BadRequestError) as forgotten:
        client.responses.create(input="Again?", previous_response_id=oldest.id, **short)
    error = forgotten.value.body
    assert error["code"] == "previous_response_not_found" and error["param"] == "previous_response_id"
    assert f"last {STORE_LIMIT} stored responses" in error["message"]
    assert client.responses.create(input="Again?", previous_response_id=kept[0].id, **short).status


@pytest.mark.parametrize(("fields", "param", "named"), [
    ({"tools": [{"type": "web_search"}]}, "tools[0].type", "web_search"),
    ({"tools": [WEATHER_TOOL], "tool_choice": {"type": "file_search"}}, "tool_choice.type", "file_search"),
    # (the default model's template has no effort levels)
    ({"reasoning": {"effort": "high"}}, "reasoning.effort", "reasoning_effort"),
    ({"reasoning": {"summary": "auto"}}, "reasoning.summary", "summar"),
    ({"input": [{"type": "reasoning", "summary": [], "encrypted_content": "gAAA"}]}, "input[0].encrypted_content",
     "encrypted"),
    ({"background": True}, "background", "background"),
    ({"include": ["message.output_text.logprobs"]}, "include", "include"),
    ({"truncation": "auto"}, "truncation", "truncation"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "data:,"}]}]},
     "input[0].content[0].type", "input_image"),
    ({"input": [{"role": "user", "content": "hi", "lang": "en"}]}, "input[0].lang", "input[0].lang"),
])
def test_unserved_fields_are_400s_naming_them(client, fields, param, named) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(**{"input": "hi", **GREEDY, **fields})
    assert refused.value.body["param"] == param and named in refused.value.body["message"]


def test_langchain_use_responses_api(server) -> None:
    """LangChain's ChatOpenAI with use_responses_api (what its agents send): text, a forced call, a schema."""
    langchain_openai = pytest.importorskip("langchain_openai")

    def chat(max_tokens: int):
        return langchain_openai.ChatOpenAI(base_url=server.base_url + "/v1", api_key="unused", model="m",
                                           temperature=0, max_tokens=max_tokens, use_responses_api=True, max_retries=0)

    reply = chat(12).invoke("Count from 1 to 10.")
    assert reply.text.strip() and reply.usage_metadata["output_tokens"] > 0

    def get_weather(city: str, unit: str) -> str:
        """The current weather of a city"""
        return "sunny"

    (call,) = chat(64).bind_tools([get_weather], tool_choice="get_weather").invoke(QUESTION).tool_calls
    assert call["name"] == "get_weather" and set(call["args"]) == {"city", "unit"}

    class Weather(pydantic.BaseModel):
        city: str = pydantic.Field(max_length=20)
        unit: str = pydantic.Field(pattern="^[CF]$")

    assert isinstance(chat(64).with_structured_output(Weather).invoke(QUESTION), Weather)


def test_a_repeated_prompt_has_cached_tokens(client) -> None:
    kwargs = {**GREEDY, "max_output_tokens": 2, "input": "Name three colors of the rainbow, please, in order."}
    first = client.responses.create(**kwargs)
    again = client.responses.create(**kwargs)
    assert again.usage.input_tokens == first.usage.input_tokens
    assert again.usage.input_tokens_details.cached_tokens >= again.usage.input_tokens // 2
    streamed = list(client.responses.create(**kwargs, stream=True))[-1].response.usage
    assert streamed.input_tokens_details.cached_tokens >= again.usage.input_tokens // 2


def test_llama_servers_timings_per_token_and_progress(server) -> None:
    body = {"model": "m", "input": "Count from 1 to 10.", "max_output_tokens": 4, "temperature": 0, "stream": True,
            "timings_per_token": True, "return_progress": True}
    with httpx.stream("POST", server.base_url + "/v1/responses", json=body, timeout=120) as raw:
        events = [json.loads(line[6:]) for line in raw.iter_lines() if line.startswith("data: ")]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    # llama-server's reports: one before the prompt's first batch (processed = cache), then one after each batch
    progress = [e for e in events if "prompt_progress" in e]
    assert len(progress) >= 2 and all(e["type"] == "response.in_progress" for e in progress)
    first, last = progress[0]["prompt_progress"], progress[-1]["prompt_progress"]
    assert first["processed"] == first["cache"] and last["processed"] == last["total"] > 0
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    generated = [e["timings"]["predicted_n"] for e in deltas]  # (the tokens so far, on every event)
    assert deltas and generated == sorted(generated) and generated[0] >= 1
    assert events[-1]["type"] == "response.incomplete" and "timings" in events[-1]


THINKING = Path(__file__).resolve().parents[1] / "data" / "qwq-32b.jinja"
# a template that refuses a conversation without a user message, as many templates do (raise_exception)
REFUSING = "{% for m in messages %}{% if m.role == 'user' %}{% set ns = true %}{% endif %}{% endfor %}" \
           "{% if messages | selectattr('role', 'equalto', 'user') | list | length == 0 %}" \
           "{{ raise_exception('No user query found in messages.') }}{% endif %}" \
           "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}" \
           "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"


def _sdk(model_path, template: str):
    engine = pl.BatchEngine(model_path, parallel=1, n_ctx=1024, n_threads=2, chat_template=template)
    http = TestClient(create_app(ServerState(engine, "m")))
    http.__enter__()
    return engine, http, openai.OpenAI(base_url=f"{http.base_url}/v1", api_key="unused", http_client=http,
                                       max_retries=0)


@pytest.fixture(scope="module")
def thinker(model_path):
    """The SDK on an in-process server whose template thinks."""
    engine, http, sdk = _sdk(model_path, THINKING.read_text())
    yield sdk
    http.__exit__(None, None, None)
    engine.close()


def test_reasoning_items_whole_and_streamed(thinker) -> None:
    kwargs = {**GREEDY, "max_output_tokens": 30, "input": "What is 2+2?"}
    whole = thinker.responses.create(**kwargs)
    thought = whole.output[0]
    assert thought.type == "reasoning" and thought.id.startswith("rs_") and thought.summary == []
    (part,) = thought.content
    assert part.type == "reasoning_text" and part.text.strip() and "<think>" not in part.text
    assert all(item.type != "reasoning" for item in whole.output[1:])
    assert 0 < whole.usage.output_tokens_details.reasoning_tokens <= whole.usage.output_tokens

    with thinker.responses.stream(**kwargs) as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert "".join(e.delta for e in events if e.type == "response.reasoning_text.delta") == part.text
    (done,) = [e for e in events if e.type == "response.reasoning_text.done"]
    assert done.text == part.text and done.item_id == final.output[0].id
    assert [i.type for i in final.output] == [i.type for i in whole.output]
    assert final.output[0].content == thought.content and final.output_text == whole.output_text
    assert final.usage.output_tokens_details.reasoning_tokens == whole.usage.output_tokens_details.reasoning_tokens

    # effort none: thinking off (the block the template opens is closed), so no reasoning item
    off = thinker.responses.create(**kwargs, reasoning={"effort": "none"})
    assert [item.type for item in off.output] == ["message"] and off.usage.input_tokens > whole.usage.input_tokens
    with pytest.raises(openai.BadRequestError) as refused:  # (QwQ's template has no effort levels)
        thinker.responses.create(**kwargs, reasoning={"effort": "high"})
    assert refused.value.body["param"] == "reasoning.effort"


def test_reasoning_items_are_replayed(thinker) -> None:
    """A stored response's reasoning item, and one sent back in input, are the assistant turn's reasoning: the
    follow-up's prompt is the same either way."""
    first = thinker.responses.create(**GREEDY, input="What is 2+2?")
    follow_up = thinker.responses.create(**GREEDY, input="And 3+3?", previous_response_id=first.id)
    sent = thinker.responses.create(**GREEDY, store=False, input=[
        {"role": "user", "content": "What is 2+2?"}, *(i.model_dump(exclude_none=True) for i in first.output),
        {"role": "user", "content": "And 3+3?"}])
    assert follow_up.usage.input_tokens == sent.usage.input_tokens


def test_a_template_refusal_names_input(model_path) -> None:
    engine, http, sdk = _sdk(model_path, REFUSING)
    try:
        with pytest.raises(openai.BadRequestError) as refused:
            sdk.responses.create(**GREEDY, instructions="Be brief.", input=[{"role": "assistant", "content": "Hi"}])
        error = refused.value.body
        assert error["param"] == "input" and "No user query found" in error["message"]
        assert error["code"] == "chat_template_error"
        assert sdk.responses.create(**GREEDY, input="Hi").status  # (a conversation it takes)
    finally:
        http.__exit__(None, None, None)
        engine.close()
