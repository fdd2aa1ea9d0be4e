"""One function per client: its {check: thunk} for an API (run.py's matrix). Each imports its client when
called, so that a client's import failing is that client's result, not the run's."""
from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from checks import (
    CHAT_PROMPT,
    KEY,
    MAX_TOKENS,
    STRUCT_PROMPT,
    STRUCT_TOKENS,
    TOOL_PROMPT,
    WEATHER_DESC,
    WEATHER_SCHEMA,
    Capital,
    NotOffered,
    five,
    get_weather,
    one_call,
    text_of,
)


def sdk(api: str, base: str, model: str) -> dict[str, Callable[[], str]]:
    """The official SDKs: openai for Chat Completions and Responses, anthropic for Messages."""
    if api == "messages":
        import anthropic
        ac = anthropic.Anthropic(base_url=base, api_key=KEY, max_retries=0)
        user = [{"role": "user", "content": TOOL_PROMPT}]
        tool = {"name": "get_weather", "description": WEATHER_DESC, "input_schema": WEATHER_SCHEMA}

        def a_stream() -> str:
            with ac.messages.stream(model=model, max_tokens=MAX_TOKENS,
                                    messages=[{"role": "user", "content": CHAT_PROMPT}]) as s:
                return text_of("".join(s.text_stream))

        def a_tools() -> str:
            first = ac.messages.create(model=model, max_tokens=MAX_TOKENS, messages=user, tools=[tool],
                                       tool_choice={"type": "tool", "name": "get_weather"})
            call = one_call([b for b in first.content if b.type == "tool_use"])
            follow = ac.messages.create(model=model, max_tokens=MAX_TOKENS, tools=[tool], messages=[
                *user, {"role": "assistant", "content": first.content},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                              "content": get_weather(**call.input)}]}])
            return f"call {call.input}; then {follow.stop_reason}: {follow.content[0].type}"

        def a_structured() -> Capital:
            # (this SDK's parse() takes no temperature argument: it goes in the body)
            return ac.messages.parse(model=model, max_tokens=MAX_TOKENS, output_format=Capital,
                                     extra_body={"temperature": 0},
                                     messages=[{"role": "user", "content": STRUCT_PROMPT}]).parsed_output
        return {"chat": lambda: text_of(ac.messages.create(
                    model=model, max_tokens=MAX_TOKENS, messages=[{"role": "user", "content": CHAT_PROMPT}]
                ).content[0].text),
                "stream": a_stream, "tools": a_tools, "structured": lambda: five(a_structured)}
    import openai
    oc = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0)
    if api == "responses":
        rtool = {"type": "function", "name": "get_weather", "description": WEATHER_DESC,
                 "parameters": WEATHER_SCHEMA}

        def r_stream() -> str:
            events = oc.responses.create(model=model, input=CHAT_PROMPT, max_output_tokens=MAX_TOKENS, stream=True)
            return text_of("".join(e.delta for e in events if e.type == "response.output_text.delta"))

        def r_tools() -> str:
            items: list[Any] = [{"role": "user", "content": TOOL_PROMPT}]
            first = oc.responses.create(model=model, input=items, tools=[rtool], max_output_tokens=MAX_TOKENS,
                                        tool_choice={"type": "function", "name": "get_weather"})
            call = one_call([o for o in first.output if o.type == "function_call"])
            items += [o.model_dump(exclude_none=True) for o in first.output]
            items.append({"type": "function_call_output", "call_id": call.call_id,
                          "output": get_weather(**json.loads(call.arguments))})
            follow = oc.responses.create(model=model, input=items, tools=[rtool], max_output_tokens=MAX_TOKENS)
            return f"call {call.arguments}; then {[o.type for o in follow.output]}"
        return {"chat": lambda: text_of(oc.responses.create(model=model, input=CHAT_PROMPT,
                                                            max_output_tokens=MAX_TOKENS).output_text),
                "stream": r_stream, "tools": r_tools,
                "structured": lambda: five(lambda: oc.responses.parse(
                    model=model, input=STRUCT_PROMPT, temperature=0, max_output_tokens=MAX_TOKENS,
                    text_format=Capital).output_parsed)}
    msgs: list[Any] = [{"role": "user", "content": TOOL_PROMPT}]
    ctool = {"type": "function", "function": {"name": "get_weather", "description": WEATHER_DESC,
                                              "parameters": WEATHER_SCHEMA}}

    def c_stream() -> str:
        chunks = oc.chat.completions.create(model=model, max_tokens=MAX_TOKENS, stream=True,
                                            messages=[{"role": "user", "content": CHAT_PROMPT}])
        return text_of("".join(c.choices[0].delta.content or "" for c in chunks if c.choices))

    def c_tools() -> str:
        first = oc.chat.completions.create(model=model, messages=msgs, tools=[ctool], max_tokens=MAX_TOKENS,
                                           tool_choice={"type": "function", "function": {"name": "get_weather"}})
        call = one_call(first.choices[0].message.tool_calls or [])
        follow = oc.chat.completions.create(model=model, tools=[ctool], max_tokens=MAX_TOKENS, messages=[
            *msgs, first.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": get_weather(**json.loads(call.function.arguments))}])
        return f"call {call.function.arguments}; then {follow.choices[0].finish_reason}"
    return {"chat": lambda: text_of(oc.chat.completions.create(
                model=model, max_tokens=MAX_TOKENS, messages=[{"role": "user", "content": CHAT_PROMPT}]
            ).choices[0].message.content or ""),
            "stream": c_stream, "tools": c_tools,
            "structured": lambda: five(lambda: oc.chat.completions.parse(
                model=model, temperature=0, max_tokens=MAX_TOKENS, response_format=Capital,
                messages=[{"role": "user", "content": STRUCT_PROMPT}]).choices[0].message.parsed)}


def langchain(api: str, base: str, model: str) -> dict[str, Callable[[], str]]:
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    if api == "messages":
        from langchain_anthropic import ChatAnthropic
        llm: Any = ChatAnthropic(model=model, base_url=base, api_key=KEY, max_tokens=MAX_TOKENS, temperature=0,
                                 max_retries=0)
    else:
        from langchain_openai import ChatOpenAI
        llm = ChatOpenAI(model=model, base_url=base + "/v1", api_key=KEY, max_tokens=MAX_TOKENS, temperature=0,
                         max_retries=0, use_responses_api=api == "responses")
    weather = tool(get_weather)

    def tools() -> str:
        user = HumanMessage(TOOL_PROMPT)
        first = llm.bind_tools([weather], tool_choice="get_weather").invoke([user])
        call = one_call(first.tool_calls)
        follow = llm.bind_tools([weather]).invoke(
            [user, first, ToolMessage(get_weather(**call["args"]), tool_call_id=call["id"])])
        return f"call {call['args']}; then {follow.text[:40]!r} {len(follow.tool_calls)} calls"
    structured = llm.with_structured_output(Capital)
    return {"chat": lambda: text_of(llm.invoke(CHAT_PROMPT).text),
            "stream": lambda: text_of("".join(c.text for c in llm.stream(CHAT_PROMPT))),
            "tools": tools, "structured": lambda: five(lambda: structured.invoke(STRUCT_PROMPT))}


def litellm(api: str, base: str, model: str) -> dict[str, Callable[[], str]]:
    import litellm as ll
    user = [{"role": "user", "content": CHAT_PROMPT}]
    if api == "responses":
        how: dict[str, Any] = {"model": "openai/" + model, "api_base": base + "/v1", "api_key": KEY}
        rtool = {"type": "function", "name": "get_weather", "description": WEATHER_DESC,
                 "parameters": WEATHER_SCHEMA}

        def r_tools() -> str:
            items: list[Any] = [{"role": "user", "content": TOOL_PROMPT}]
            first = ll.responses(input=items, tools=[rtool], tool_choice={"type": "function", "name": "get_weather"},
                                 max_output_tokens=MAX_TOKENS, **how)
            call = one_call([o for o in first.output if getattr(o, "type", None) == "function_call"])
            items += [{"type": "function_call", "call_id": call.call_id, "name": call.name,
                       "arguments": call.arguments},
                      {"type": "function_call_output", "call_id": call.call_id,
                       "output": get_weather(**json.loads(call.arguments))}]
            follow = ll.responses(input=items, tools=[rtool], max_output_tokens=MAX_TOKENS, **how)
            return f"call {call.arguments}; then {[getattr(o, 'type', None) for o in follow.output]}"

        def r_structured() -> Capital:
            answer = ll.responses(input=STRUCT_PROMPT, temperature=0, max_output_tokens=STRUCT_TOKENS,
                                  text_format=Capital, **how)
            text = "".join(p.text for o in answer.output if getattr(o, "type", None) == "message" for p in o.content)
            return Capital.model_validate_json(text)
        return {"chat": lambda: text_of("".join(
                    p.text for o in ll.responses(input=CHAT_PROMPT, max_output_tokens=MAX_TOKENS, **how).output
                    if getattr(o, "type", None) == "message" for p in o.content)),
                "stream": lambda: text_of("".join(
                    e.delta for e in ll.responses(input=CHAT_PROMPT, max_output_tokens=MAX_TOKENS, stream=True, **how)
                    if getattr(e, "type", None) == "response.output_text.delta")),
                "tools": r_tools, "structured": lambda: five(r_structured)}
    if api == "messages":
        how = {"model": "anthropic/" + model, "api_base": base, "api_key": KEY}
    else:
        how = {"model": "openai/" + model, "api_base": base + "/v1", "api_key": KEY}
    ctool = {"type": "function", "function": {"name": "get_weather", "description": WEATHER_DESC,
                                              "parameters": WEATHER_SCHEMA}}

    def c_tools() -> str:
        msgs: list[Any] = [{"role": "user", "content": TOOL_PROMPT}]
        first = ll.completion(messages=msgs, tools=[ctool], max_tokens=MAX_TOKENS,
                              tool_choice={"type": "function", "function": {"name": "get_weather"}}, **how)
        call = one_call(first.choices[0].message.tool_calls or [])
        msgs += [first.choices[0].message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id,
                  "content": get_weather(**json.loads(call.function.arguments))}]
        follow = ll.completion(messages=msgs, tools=[ctool], max_tokens=MAX_TOKENS, **how)
        return f"call {call.function.arguments}; then {follow.choices[0].finish_reason}"
    return {"chat": lambda: text_of(ll.completion(messages=user, max_tokens=MAX_TOKENS, **how)
                                    .choices[0].message.content or ""),
            "stream": lambda: text_of("".join(c.choices[0].delta.content or "" for c in ll.completion(
                messages=user, max_tokens=MAX_TOKENS, stream=True, **how) if c.choices)),
            "tools": c_tools,
            "structured": lambda: five(lambda: Capital.model_validate_json(ll.completion(
                messages=[{"role": "user", "content": STRUCT_PROMPT}], temperature=0, max_tokens=STRUCT_TOKENS,
                response_format=Capital, **how).choices[0].message.content))}


def instructor(api: str, base: str, model: str) -> dict[str, Callable[[], str]]:
    """instructor offers structured output (and its streamed partials); chat and tools are the SDK's own."""
    import instructor as ins
    if api == "messages":
        import anthropic
        client = ins.from_anthropic(anthropic.Anthropic(base_url=base, api_key=KEY, max_retries=0))
    else:
        import openai
        client = ins.from_openai(openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0),
                                 mode=ins.Mode.RESPONSES_TOOLS if api == "responses" else ins.Mode.TOOLS)
    ask: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": STRUCT_PROMPT}],
                           "max_tokens": STRUCT_TOKENS, "max_retries": 0}
    # (anthropic 2.x's create() takes no temperature argument: it goes in the body)
    ask.update({"extra_body": {"temperature": 0}} if api == "messages" else {"temperature": 0})

    def partial() -> str:
        partials = list(client.create_partial(response_model=Capital, **ask))
        return f"last partial {partials[-1].model_dump() if partials else None}"

    def offered_not() -> str:
        raise NotOffered("instructor wraps the SDK for structured output only")
    return {"chat": offered_not, "stream": partial, "tools": offered_not,
            "structured": lambda: five(lambda: client.create(response_model=Capital, **ask))}


def pydantic_ai(api: str, base: str, model: str) -> dict[str, Callable[[], str]]:
    from pydantic_ai import Agent
    from pydantic_ai.messages import ToolReturnPart
    if api == "messages":
        import anthropic
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider
        # (given its client: the provider's own httpx.AsyncClient is refused by anthropic 2.x, which is on httpx2)
        llm: Any = AnthropicModel(model, provider=AnthropicProvider(
            anthropic_client=anthropic.AsyncAnthropic(base_url=base, api_key=KEY, max_retries=0)))
    else:
        from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
        from pydantic_ai.providers.openai import OpenAIProvider
        kind = OpenAIResponsesModel if api == "responses" else OpenAIChatModel
        llm = kind(model, provider=OpenAIProvider(base_url=base + "/v1", api_key=KEY))
    settings: Any = {"max_tokens": MAX_TOKENS, "temperature": 0}
    agent: Agent[None, str] = Agent(llm, model_settings=settings)

    async def stream() -> str:
        async with agent.run_stream(CHAT_PROMPT) as run:
            return text_of("".join([d async for d in run.stream_text(delta=True)]))

    def tools() -> str:
        # pydantic-ai has no forced call of a function tool: under tool_choice auto the model decides
        helper: Agent[None, str] = Agent(llm, model_settings=settings, tools=[get_weather])
        run = helper.run_sync(TOOL_PROMPT)
        returns = [p for m in run.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            raise AssertionError(f"model content: no tool call, answered {run.output[:60]!r}")
        return f"tool returned {returns[0].content!r}; then {run.output[:40]!r}"
    structured: Agent[None, Capital] = Agent(llm, model_settings=settings, output_type=Capital, retries=0)
    return {"chat": lambda: text_of(agent.run_sync(CHAT_PROMPT).output),
            "stream": lambda: asyncio.run(stream()), "tools": tools,
            "structured": lambda: five(lambda: structured.run_sync(STRUCT_PROMPT).output)}


def llama_index(api: str, base: str, model: str) -> dict[str, Callable[[], str]]:
    from llama_index.core.llms import ChatMessage
    from llama_index.core.prompts import PromptTemplate
    from llama_index.core.tools import FunctionTool
    if api == "messages":
        from llama_index.llms.anthropic import Anthropic
        # (its Anthropic checks the name against the Claude models it knows: ours answers any name)
        llm: Any = Anthropic(model="claude-3-5-haiku-latest", base_url=base, api_key=KEY, max_tokens=STRUCT_TOKENS,
                             temperature=0, max_retries=0, timeout=300)
    elif api == "responses":
        from llama_index.llms.openai import OpenAIResponses
        # (its OpenAIResponses checks the name against the OpenAI models it knows: ours answers any name)
        llm = OpenAIResponses(model="gpt-4o-mini", api_base=base + "/v1", api_key=KEY, max_output_tokens=STRUCT_TOKENS,
                              temperature=0, max_retries=0, timeout=300)
    else:
        from llama_index.llms.openai_like import OpenAILike
        llm = OpenAILike(model=model, api_base=base + "/v1", api_key=KEY, max_tokens=STRUCT_TOKENS, temperature=0,
                         max_retries=0, timeout=300, is_chat_model=True, is_function_calling_model=True)
    user = [ChatMessage(role="user", content=CHAT_PROMPT)]
    weather = FunctionTool.from_defaults(fn=get_weather)

    def tools() -> str:
        history = [ChatMessage(role="user", content=TOOL_PROMPT)]
        first = llm.chat_with_tools([weather], chat_history=history, tool_required=True)
        call = one_call(llm.get_tool_calls_from_response(first, error_on_no_tool_call=False))
        history += [first.message, ChatMessage(role="tool", content=get_weather(**call.tool_kwargs),
                                               additional_kwargs={"tool_call_id": call.tool_id,
                                                                  "name": call.tool_name})]
        follow = llm.chat_with_tools([weather], chat_history=history)
        return f"call {call.tool_kwargs}; then {str(follow.message.content)[:40]!r}"
    return {"chat": lambda: text_of(str(llm.chat(user).message.content or "")),
            "stream": lambda: text_of("".join(c.delta or "" for c in llm.stream_chat(user))),
            "tools": tools,
            "structured": lambda: five(lambda: llm.structured_predict(Capital, PromptTemplate(STRUCT_PROMPT)))}


CLIENTS: dict[str, Callable[[str, str, str], dict[str, Callable[[], str]]]] = {
    "sdk": sdk, "langchain": langchain, "litellm": litellm, "instructor": instructor, "pydantic-ai": pydantic_ai,
    "llama-index": llama_index}
