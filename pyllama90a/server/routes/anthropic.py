"""Anthropic's Messages API: POST /v1/messages (a chat, whole or as Anthropic's server-sent events) and
/v1/messages/count_tokens. Requests are read by protocol/anthropic.py into the chat route's Generation and
generated on the same path (generation.py, with responses/anthropic.py's shape); errors come in Anthropic's
shape (the routes declare it: errors.ANTHROPIC_INPUTS)."""
from __future__ import annotations

import uuid
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from ...core.chat.prepare import prepare_chat
from ..errors import ANTHROPIC_INPUTS
from ..generation import generate, ignored_fields
from ..protocol import openapi as doc
from ..protocol.anthropic import CountTokensRequest, MessagesRequest, MessagesTurn
from ..protocol.body import read_request
from ..protocol.requests import Generation
from ..responses.anthropic import MessageShape
from ..state import ServerState
from .family import Family, State

router = Family()


@router.serve("POST", "/v1/messages", inputs=ANTHROPIC_INPUTS, doc=doc.anthropic(
    "Anthropic's Messages API: a chat answered as a message, or with stream=true Anthropic's events",
    MessagesRequest, doc.ANTHROPIC_MESSAGE, stream=True))
async def messages(request: Request, state: State) -> Response:
    turn: MessagesTurn
    engine = state.engine
    turn, ignored = await read_request(request, state.limits, MessagesRequest, engine.model,
                                       pool=state.executors.parse)
    gen = turn.generation

    def shape_for(ident: str, prompts: list[list[int]], common: dict[str, Any]) -> MessageShape:
        return MessageShape("msg_" + uuid.uuid4().hex, state.model_name, stops=gen.request.stops,
                            detokenize=lambda tokens: engine.model.detokenize(tokens, special=True),
                            show_thinking=turn.show_thinking, **common)
    return await generate(state, request, gen, ignored, chat=True, shape_for=shape_for)


def _count(state: ServerState, gen: Generation) -> int:
    """The prompt's tokens, rendered and tokenized as /v1/messages renders them (its usage: input_tokens and
    cache_read_input_tokens)."""
    assert gen.messages is not None  # (AnthropicChat.chat sets them)
    return len(prepare_chat(state.engine.model, gen.messages, tools=gen.tools, tool_choice=gen.tool_choice,
                            parallel_tool_calls=gen.parallel_tool_calls, template_kwargs=gen.template_kwargs).tokens)


@router.serve("POST", "/v1/messages/count_tokens", inputs=ANTHROPIC_INPUTS, doc=doc.anthropic(
    "The input tokens of a Messages request (its prompt, tools included)", CountTokensRequest, doc.INPUT_TOKENS))
async def count_tokens(request: Request, state: State) -> Response:
    text = state.executors.text  # (template and tokenizer work)
    gen, ignored = await read_request(request, state.limits, CountTokensRequest, state.engine.model, pool=text)
    return JSONResponse({"input_tokens": await text.run(_count, state, gen)},
                        headers=ignored_fields(request, ignored))
