"""The generation routes' work: a request's n generations queued on the engine, their chunks carried to the
event loop and shaped (responses/openai.py, responses/llama_server.py) into a whole answer or server-sent events;
a client that goes away frees its slots. A chat arrives checked and typed (protocol/chat.py): its Messages, Tools
and ToolChoice go to prepare_chat as they are."""
from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ..core.chat.prepare import PreparedChat, prepare_chat
from ..core.engine.engine import Chunk, Handle
from .errors import APIError, RouteInputs, answer, route_inputs
from .protocol.base import IGNORED_HEADER, shown_names
from .protocol.requests import Generation
from .responses.openai import ChatShape, CompletionShape, Shape
from .responses.timings import RequestTimer
from .state import ServerState

log = logging.getLogger(__name__)


def ignored_fields(request: Request, names: list[str]) -> dict[str, str]:
    """The response headers that name a request's unknown fields (--unknown-fields warn), and its log line."""
    if not names:
        return {}
    shown = shown_names(names)
    log.warning("%s: unknown request field(s) ignored: %s", request.url.path, shown)
    return {IGNORED_HEADER: shown}


# how often a non-streaming request checks that its client is still connected while it waits for tokens
DISCONNECT_POLL_S = 0.25


def _submit(state: ServerState, gen: Generation, deliver: list[Any], *,
            chat: bool) -> tuple[list[Handle], PreparedChat | None, list[list[int]]]:
    """Render a chat (template, tools), then queue the request's n generations; all or none are queued.
    Returns their handles, the prepared chat and each generation's prompt tokens.
    Run in a worker thread (a template renders, a grammar compiles, a long prompt is tokenized here). What it
    raises is answered by the app's handler (server/errors.py)."""
    state.workers.refuse_if_lost()
    engine = state.engine
    # the n generations are queued one after another, before the engine thread moves any into a free slot, so
    # more than the queue holds can never be queued at once, even on an idle server: a 429 ("retry shortly")
    # would invite endless retries
    if gen.n > engine.queue_size:
        raise APIError(400, f"n={gen.n} is more than this server's queue of {engine.queue_size} places can hold "
                            f"(--queue-size)", param="n")
    prepared, request = None, gen.request
    if chat:
        assert gen.messages is not None  # (ChatRequest.convert sets them)
        prepared = prepare_chat(engine.model, gen.messages, tools=gen.tools, tool_choice=gen.tool_choice,
                                parallel_tool_calls=gen.parallel_tool_calls, constraint=request.constraint,
                                template_kwargs=gen.template_kwargs, add_generation_prompt=gen.add_generation_prompt,
                                continue_final_message=gen.continue_final_message,
                                reasoning_format=gen.reasoning_format, reasoning_budget=gen.reasoning_budget,
                                reasoning_budget_message=gen.reasoning_budget_message)
        request = replace(request, constraint=prepared.constraint, thinking=prepared.thinking)
        prompt = prepared.tokens
    else:
        prompt = engine.tokenize_prompt(gen.prompt)
    # (llama-server's list of prompts on /completion: one generation each; else n of the one prompt)
    prompts = [engine.tokenize_prompt(p) for p in gen.prompts] if gen.prompts else [prompt] * len(deliver)
    seed = request.sampling.seed
    progress = gen.stream and gen.answer.return_progress  # (llama-server reports progress on streams only)
    handles: list[Handle] = []
    try:
        for i, send in enumerate(deliver):
            # choices differ by their seed (seed + i when the request gives one)
            choice = request if seed is None else replace(
                request, sampling=replace(request.sampling, seed=(seed + i) % 0xFFFFFFFF))
            handles.append(engine.submit_request(prompts[i], choice, send, slot=gen.slot, progress=progress))
    except BaseException:
        for handle in handles:
            handle.cancel()
        raise
    return handles, prepared, prompts


# a route's own answer shape: (id, each generation's prompt tokens, the settings every shape takes, and a chat's
# "output" and "reasoning", the readers of its tool calls and thinking block) -> Shape
ShapeFor = Callable[[str, list[list[int]], dict[str, Any]], Shape]


async def generate(state: ServerState, request: Request, gen: Generation, ignored: list[str], *, chat: bool,
                    shape_for: ShapeFor | None = None) -> Response:
    """Queue a checked request and answer it whole or as server-sent events, in OpenAI's chat or completion
    shape, or in `shape_for`'s (llama-server's /completion, Anthropic's /v1/messages)."""
    chunks: asyncio.Queue[tuple[int, Chunk]] = asyncio.Queue()
    mailbox = state.mailbox(asyncio.get_running_loop())
    deliver = [mailbox.sender(chunks, i) for i in range(gen.n)]
    timer = RequestTimer()
    # rendering a template, compiling a grammar, tokenizing a long prompt: never on the event loop
    handles, prepared, prompts = await state.executors.submit.run(_submit, state, gen, deliver, chat=chat)
    prompt = prompts[0]

    headers = ignored_fields(request, ignored)  # (logged once the request is accepted)
    ident = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
    common: dict[str, Any] = {"fingerprint": state.fingerprint, "timer": timer,
                              **gen.answer.shape_settings(state.engine.model, prompt)}
    if prepared is not None:  # (a chat's: the readers of its thinking block and its tool calls)
        common.update(output=prepared.output, reasoning=prepared.reasoning)
    shape = (shape_for(ident, prompts, common) if shape_for is not None
             else ChatShape(ident, state.model_name, gen.n, **common) if chat
             else CompletionShape(ident, state.model_name, gen.n, **common))
    if gen.stream:
        return StreamingResponse(_sse(state, chunks, handles, shape, gen.include_usage, route_inputs(request.scope)),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **headers})
    try:
        next_check = time.monotonic() + DISCONNECT_POLL_S
        while not shape.finished:
            try:
                item = await asyncio.wait_for(chunks.get(), timeout=DISCONNECT_POLL_S)
            except asyncio.TimeoutError:
                item = None
            if time.monotonic() >= next_check:
                if await request.is_disconnected():  # nobody will read the answer: free the slots now
                    return Response(status_code=499)
                next_check = time.monotonic() + DISCONNECT_POLL_S
            if item is None:
                continue
            choice, chunk = item
            if chunk.error is not None:
                raise chunk.error
            shape.add(choice, chunk)
    finally:
        for handle in handles:
            handle.cancel()  # a client gone before the end (or an error) frees the slots
    state.note_timings(shape)
    # (llama-server's shape detokenizes the prompt and the generated tokens under the model's lock, which a long
    # tokenize elsewhere holds for seconds: in the submit pool, never on the event loop)
    whole = await state.executors.submit.finish(shape.whole) if shape.ends_in_model else shape.whole()
    return JSONResponse(whole, headers=headers)


async def _sse(state: ServerState, chunks: asyncio.Queue[tuple[int, Chunk]], handles: list[Handle], shape: Shape,
               include_usage: bool, inputs: RouteInputs) -> AsyncIterator[str]:
    """Server-sent events; if the client goes away Starlette cancels this generator and the slots are freed."""
    try:
        for event in shape.opening():
            yield _event(event, shape.named_events)
        while not shape.finished:
            choice, chunk = await chunks.get()
            if chunk.error is not None:  # the status (200) is sent: the error goes in a last event
                for event in shape.error_events(answer(chunk.error, inputs).body(inputs.errors)):
                    yield _event(event, shape.named_events)
                break
            events = (await state.executors.submit.finish(shape.events, choice, chunk)  # (as generate's whole())
                      if shape.ends_in_model and chunk.finish_reason is not None else shape.events(choice, chunk))
            for event in events:
                yield _event(event, shape.named_events)
        else:
            state.note_timings(shape)
            if include_usage:
                yield _event(shape.usage_only())
        if shape.done_marker:
            yield "data: [DONE]\n\n"
    finally:
        for handle in handles:
            handle.cancel()


def _event(payload: dict[str, Any], named: bool = False) -> str:
    data = f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"
    return f"event: {payload['type']}\n{data}" if named else data

