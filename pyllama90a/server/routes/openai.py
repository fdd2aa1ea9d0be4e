"""OpenAI's routes: /v1/models, /v1/completions, /v1/chat/completions (also without /v1, as llama-server serves
them) and /v1/embeddings. Requests are read by protocol/requests.py, answers shaped by responses/openai.py."""
from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response

from ...core.chat.prepare import prepare_chat
from ..embeddings import embeddings as serve_embeddings
from ..errors import CHAT_INPUTS, COMPLETION_INPUTS, EMBEDDING_INPUTS, APIError
from ..generation import generate, ignored_fields
from ..protocol import openapi as doc
from ..protocol.body import read_request
from ..protocol.embeddings import EmbeddingRequest
from ..protocol.requests import ChatRequest, CompletionRequest, Generation
from ..state import ServerState
from .family import Family, State

router = Family()


def _model_card(state: ServerState) -> dict[str, Any]:
    # (aliases and tags: llama-server's --alias and --tags)
    return {"id": state.model_name, "object": "model", "created": state.created, "owned_by": "pyllama90a",
            "aliases": list(state.model_aliases), "tags": list(state.model_tags)}


@router.serve("GET", "/v1/models", also_at=("/models",), doc=doc.fixed("The served model", {
    200: doc.json_body("a list of one model", doc.MODELS), **doc.errors(401, 503)}))
async def models(state: State) -> dict[str, Any]:
    # (llama-server's "models" too, Ollama's list form, with what the model can do: text, no images here)
    listed = {"name": state.model_name, "model": state.model_name, "type": "model",
              "tags": list(state.model_tags), "capabilities": ["completion"], "details": {"format": "gguf"}}
    return {"models": [listed], "object": "list", "data": [_model_card(state)]}


@router.serve("GET", "/v1/models/{model_id:path}", doc=doc.fixed("One model", {
    200: doc.json_body("the model", doc.MODEL), **doc.errors(401, 404, 503)}))
async def model(model_id: str, state: State) -> dict[str, Any]:
    if model_id != state.model_name and model_id not in state.model_aliases:
        raise APIError(404, f"The model '{model_id}' does not exist; this server serves '{state.model_name}'",
                       param="model", code="model_not_found")
    return _model_card(state)


@router.serve("POST", "/v1/completions", inputs=COMPLETION_INPUTS,
              doc=doc.generation("Text completion", CompletionRequest, doc.COMPLETION))
async def completions(request: Request, state: State) -> Response:
    # (its constraint compiles in a worker process: the thread only waits, off the event loop)
    gen, ignored = await read_request(request, state.limits, CompletionRequest, state.engine.model,
                                      pool=state.executors.parse)
    return await generate(state, request, gen, ignored, chat=False)


@router.serve("POST", "/v1/chat/completions", also_at=("/chat/completions",), inputs=CHAT_INPUTS,
              doc=doc.generation("Chat completion", ChatRequest, doc.CHAT_COMPLETION))
async def chat_completions(request: Request, state: State) -> Response:
    gen, ignored = await read_request(request, state.limits, ChatRequest, state.engine.model,
                                      pool=state.executors.parse)
    return await generate(state, request, gen, ignored, chat=True)


def _count_chat(state: ServerState, gen: Generation) -> int:
    """The prompt tokens of a chat request, rendered and tokenized as /v1/chat/completions would."""
    assert gen.messages is not None  # (ChatRequest.convert sets them)
    prepared = prepare_chat(state.engine.model, gen.messages, tools=gen.tools, tool_choice=gen.tool_choice,
                            parallel_tool_calls=gen.parallel_tool_calls, constraint=gen.request.constraint,
                            template_kwargs=gen.template_kwargs)
    return len(prepared.tokens)


@router.serve("POST", "/v1/chat/completions/input_tokens", also_at=("/chat/completions/input_tokens",),
              inputs=CHAT_INPUTS, doc=doc.reading(
                  "llama-server's token count of a chat request: its prompt's tokens, nothing generated",
                  ChatRequest, doc.INPUT_TOKENS))
async def chat_input_tokens(request: Request, state: State) -> Response:
    gen, ignored = await read_request(request, state.limits, ChatRequest, pool=state.executors.parse)
    n = await state.executors.submit.run(_count_chat, state, gen)
    return JSONResponse({"input_tokens": n}, headers=ignored_fields(request, ignored))


@router.serve("POST", "/v1/embeddings", inputs=EMBEDDING_INPUTS,
              doc=doc.reading("Embeddings", EmbeddingRequest, doc.EMBEDDINGS, "one vector per input"))
async def embeddings(request: Request, state: State) -> Response:
    return await serve_embeddings(state, request, native=False)
