"""Real clients against this package's server: each client x API x check, pass/fail with the error's first line.

    python benchmarks/clients/run.py --server-python PATH/TO/venv/bin/python --out DIR [--only CLIENT ...]

Run it with a Python that has the clients (they are not test dependencies: openai, anthropic, langchain-openai,
langchain-anthropic, litellm, instructor, pydantic-ai-slim[openai,anthropic], llama-index-llms-openai(-like),
llama-index-llms-anthropic). `--server-python` runs `python -m pyllama90a.server` (default model, 127.0.0.1) from
this checkout. The clients talk to it through a small logging proxy, so a failing check's report carries the exact
request bodies the client sent and our answers. APIs: Chat Completions (`chat`), Responses (`responses`),
Anthropic Messages (`messages`). Checks: `chat`, `stream`, `tools` (a forced call of one function, then its result
sent back and the model's answer read), `structured` (temperature 0, 5 requests, each parsed into a pydantic model).
Each client x API runs in a subprocess; each check has its own time limit. Writes results.json and results.md."""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

REPO = Path(__file__).resolve().parents[2]
APIS = ("chat", "responses", "messages")
CHECKS = ("chat", "stream", "tools", "structured")
KEY = "sk-local"
CHAT_PROMPT = "Say hello in one short sentence."
TOOL_PROMPT = "What is the weather in Paris? Use the get_weather tool."
STRUCT_PROMPT = "What is the capital of France? Answer with the city and its country."
MAX_TOKENS = 32  # short answers: a 2-core machine shared by others runs the matrix
STRUCT_TOKENS = 96  # a structured answer as a tool call (`<tool_call>{"name": ..., "arguments": ...}`) is longer


class Capital(BaseModel):
    city: str
    country: str


def get_weather(city: str) -> str:
    """Get the current weather in a city."""
    return f"Sunny and 21 C in {city}."


WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER_DESC = "Get the current weather in a city."


class NotOffered(Exception):
    """The client does not offer this check against a custom base URL (a client limitation)."""


def one_call(calls: list[Any]) -> Any:
    if len(calls) != 1:
        raise AssertionError(f"expected exactly one tool call, got {len(calls)}: {calls!r}"[:300])
    return calls[0]


def text_of(text: str) -> str:
    if not text.strip():
        raise AssertionError("empty answer")
    return text.strip()[:80]


def five(parse: Callable[[], Capital]) -> str:
    """Structured output: 5 requests at temperature 0, each must parse into Capital."""
    answers = [parse() for _ in range(5)]
    return f"5/5 parsed: {answers[0].model_dump()}"


# ---- one function per client: {check: thunk} for an API (base: the server's root URL, no /v1) ----

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


# ---- child: one client x API, each check under its own alarm; marks each check at the proxy ----

def child(client: str, api: str, base: str, model: str, limit: int) -> None:
    def alarm(*_: object) -> None:
        raise TimeoutError(f"no answer in {limit} s")
    signal.signal(signal.SIGALRM, alarm)
    try:
        checks = CLIENTS[client](api, base, model)
    except Exception as e:  # noqa: BLE001 - the client's own set-up failing is a result too
        checks = {c: (lambda e=e: (_ for _ in ()).throw(e)) for c in CHECKS}
    for check in CHECKS:
        urllib.request.urlopen(f"{base}/__check/{client}/{api}/{check}").read()
        signal.alarm(limit)
        start = time.monotonic()
        try:
            row = {"status": "pass", "detail": checks[check]()}
        except NotOffered as e:
            row = {"status": "n/a", "detail": str(e)}
        except BaseException as e:  # noqa: BLE001 - each failure is reported, never stops the matrix
            lines = (f"{type(e).__name__}: {e}".strip().splitlines() or [type(e).__name__])
            row = {"status": "fail", "detail": lines[0][:300]}
        finally:
            signal.alarm(0)
        row["seconds"] = round(time.monotonic() - start, 1)
        print(json.dumps({"client": client, "api": api, "check": check, **row}), flush=True)


# ---- the logging proxy: forwards to the server, records each request body and our answer per check ----

class Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    upstream: tuple[str, int]
    label: ClassVar[list[str]] = ["-"]  # the check now running (one at a time)
    log: ClassVar[dict[str, list[dict[str, Any]]]] = {}
    lock = threading.Lock()

    def log_message(self, *args: object) -> None:
        pass

    def handle(self) -> None:
        with contextlib.suppress(ConnectionResetError):  # a client closing its kept-alive connection
            super().handle()

    def relay(self) -> None:
        if self.path.startswith("/__check/"):
            self.label[0] = self.path[len("/__check/"):]
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
        up = http.client.HTTPConnection(*self.upstream, timeout=600)
        up.request(self.command, self.path, body=body, headers=headers)
        answer = up.getresponse()
        self.send_response(answer.status)
        for k, v in answer.getheaders():
            if k.lower() not in ("content-length", "transfer-encoding", "connection", "date", "server"):
                self.send_header(k, v)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        seen = bytearray()
        while chunk := answer.read1(65536):
            if len(seen) < 6000:
                seen += chunk
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        up.close()
        entry = {"method": self.command, "path": self.path, "request": body.decode("utf-8", "replace"),
                 "status": answer.status, "answer": seen[:6000].decode("utf-8", "replace")}
        with self.lock:
            self.log.setdefault(self.label[0], []).append(entry)

    do_GET = do_POST = do_DELETE = relay


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version
    names = ["openai", "anthropic", "langchain-core", "langchain-openai", "langchain-anthropic", "litellm",
             "instructor", "pydantic-ai-slim", "llama-index-core", "llama-index-llms-openai",
             "llama-index-llms-openai-like", "llama-index-llms-anthropic", "pydantic", "httpx"]
    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "-"
    return found


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| client | API | " + " | ".join(CHECKS) + " |", "|---|---|" + "---|" * len(CHECKS)]
    for client in CLIENTS:
        for api in APIS:
            cells = {r["check"]: r for r in rows if r["client"] == client and r["api"] == api}
            if not cells:
                continue
            out.append(f"| {client} | {api} | " + " | ".join(
                (cells[c]["status"] if cells[c]["status"] != "fail"
                 else "FAIL: " + cells[c]["detail"][:90].replace("|", "/")) if c in cells else "-"
                for c in CHECKS) + " |")
    return "\n".join(out) + "\n"


def combine(files: list[Path], out: Path) -> int:
    runs = [json.loads(f.read_text()) for f in files]
    rows = {(r["client"], r["api"], r["check"]): r for run in runs for r in run["rows"]}
    order = {name: i for i, name in enumerate(CLIENTS)}
    joined = sorted(rows.values(), key=lambda r: (order[r["client"]], APIS.index(r["api"]), CHECKS.index(r["check"])))
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({**runs[-1], "rows": joined, "runs": [str(f) for f in files]},
                                                 indent=1))
    (out / "results.md").write_text(table(joined))
    print(table(joined))
    return 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--server-python", default=sys.executable, help="a Python with pyllama90a installed")
    p.add_argument("--out", type=Path, help="where results.json, results.md and server.log go")
    p.add_argument("--only", nargs="*", default=list(CLIENTS), help="clients to run")
    p.add_argument("--apis", nargs="*", default=list(APIS))
    p.add_argument("--limit", type=int, default=180, help="seconds per check")
    p.add_argument("--combine", nargs="+", type=Path, help="join these results.json files into --out (a later "
                   "file's rows replace an earlier one's for the same client, API and check)")
    p.add_argument("--child", nargs=4, metavar=("CLIENT", "API", "BASE", "MODEL"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(*args.child, args.limit)
        return 0
    if args.out is None:
        p.error("--out is required")
    if args.combine:
        return combine(args.combine, args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = subprocess.Popen([args.server_python, "-m", "pyllama90a.server", "--port", str(port)], cwd=REPO,
                              stdout=(args.out / "server.log").open("w"), stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        for _ in range(240):
            try:
                models = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models"))
                break
            except OSError:
                if server.poll() is not None:
                    raise SystemExit(f"the server stopped: see {args.out / 'server.log'}") from None
                time.sleep(0.5)
        else:
            raise SystemExit("the server did not start in 120 s")
        model = models["data"][0]["id"]
        Proxy.upstream = ("127.0.0.1", port)
        proxy = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{proxy.server_address[1]}"
        rows: list[dict[str, Any]] = []
        for client in args.only:
            for api in args.apis:
                run = subprocess.run([sys.executable, __file__, "--limit", str(args.limit), "--child", client, api,
                                      base, model], capture_output=True, text=True,
                                     timeout=args.limit * len(CHECKS) + 120)
                got = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
                done = {r["check"] for r in got}
                got += [{"client": client, "api": api, "check": c, "status": "fail",
                         "detail": (run.stderr.strip().splitlines() or ["no result"])[-1][:300]}
                        for c in CHECKS if c not in done]
                for r in got:
                    if r["status"] == "fail":
                        r["exchanges"] = Proxy.log.get(f"{client}/{api}/{r['check']}", [])
                    print(f"{client:12} {api:10} {r['check']:10} {r['status']:5} {r.get('seconds', '-')!s:>6} s "
                          f"{r['detail'][:100]}", flush=True)
                rows += got
                # written after each client x API: a run stopped early keeps what it measured
                (args.out / "results.json").write_text(json.dumps(
                    {"model": model, "versions": versions(), "python": sys.version.split()[0], "rows": rows},
                    indent=1))
                (args.out / "results.md").write_text(table(rows))
        print(table(rows))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
