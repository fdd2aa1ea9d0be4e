"""llama-server's native routes, for clients written for it: POST /completion (and /completions, which
llama-server serves the same way), /infill (a /completion of a fill-in-the-middle prompt: fim.py),
/tokenize, /detokenize, /apply-template, /embeddings and /embedding (its list shape), GET /props and /slots.
Requests are read by protocol.py, answers shaped by native_responses.py; errors keep the OpenAI routes'
contract (server/errors.py)."""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ...errors import ChatTemplateError
from ..embeddings import embeddings
from ..errors import APIError
from ..generation import generate, ignored_fields
from ..protocol.base import parse
from ..protocol.body import read_request
from ..protocol.requests import (
    ApplyTemplateRequest,
    DetokenizeRequest,
    Generation,
    InfillRequest,
    NativeCompletionRequest,
    TokenizeRequest,
)
from ..responses.llama_server import NativeCompletionShape, generation_settings
from ..state import ServerState
from . import slots as slot_files

COMPLETION_PATHS = ("/completion", "/completions")
EMBEDDING_PATHS = ("/embeddings", "/embedding")
PATHS = (*COMPLETION_PATHS, "/infill", *EMBEDDING_PATHS, "/tokenize", "/detokenize", "/apply-template", "/props",
         "/slots")


def default_settings(state: ServerState) -> dict[str, Any]:
    """The generation settings of a /completion request that sets none (llama-server's /props shows them)."""
    defaults, _ = parse(NativeCompletionRequest, {"prompt": "-"}, state.limits)
    return generation_settings(defaults.request, n_ctx=state.engine.n_ctx_slot, model=state.model_name,
                               stream=False)


def _chat_template(state: ServerState) -> str:
    """The Jinja template chats render with ("" when the model has none and llama.cpp's built-in one is used,
    or when the GGUF's does not compile: a chat request then says why)."""
    try:
        template = state.engine.model.chat_template
    except ChatTemplateError:
        return ""
    return template.source if template is not None else ""


def _piece(piece: bytes) -> str | list[int]:
    """A token's text, or its bytes where they are not whole UTF-8 (llama-server's with_pieces)."""
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return list(piece)


TOKENS_PER_CHUNK = 1 << 16  # of a /tokenize answer


def tokens_body(tokens: list[int], piece_of: Callable[[int], bytes] | None) -> Iterator[bytes]:
    """The /tokenize answer {"tokens": [...]} (with_pieces: {"id", "piece"} objects, each token's rendered once),
    in chunks made as the client reads them: a 16 MiB text of digits is 16.7 million tokens, whose answer built
    whole (a dict per token, then its JSON) took 4.6 GB and stalled the event loop."""
    yield b'{"tokens":['
    rendered: dict[int, str] = {}
    for start in range(0, len(tokens), TOKENS_PER_CHUNK):
        part = tokens[start:start + TOKENS_PER_CHUNK]
        if piece_of is None:
            text = ",".join(map(str, part))
        else:
            for t in set(part).difference(rendered):
                rendered[t] = json.dumps({"id": t, "piece": _piece(piece_of(t))}, ensure_ascii=False,
                                         separators=(",", ":"))
            text = ",".join(rendered[t] for t in part)
        yield (("," if start else "") + text).encode()
    yield b"]}"


async def _complete(state: ServerState, request: Request, model: type[NativeCompletionRequest]) -> Response:
    """Read, generate and answer a /completion (or /infill) request in llama-server's shape."""
    engine = state.engine
    gen: Generation
    gen, ignored = await read_request(request, state.limits, model, engine.model, pool=state.executors.parse)
    settings = generation_settings(gen.request, n_ctx=engine.n_ctx_slot, model=state.model_name,
                                   stream=gen.stream)

    def shape_for(ident: str, prompt: list[int], common: dict[str, Any]) -> NativeCompletionShape:
        return NativeCompletionShape(ident, state.model_name, prompt=prompt, settings=settings,
                                     detokenize=lambda tokens: engine.model.detokenize(tokens, special=True),
                                     return_tokens=gen.return_tokens,
                                     probabilities=gen.request.logprobs is not None, **common)
    return await generate(state, request, gen, ignored, chat=False, shape_for=shape_for)


def register(app: FastAPI, state: ServerState, docs: dict[str, dict[str, Any]]) -> None:
    """Add the native routes to `app` (server/openapi.py's `docs` describe them)."""
    settings = default_settings(state)  # depends only on the server's limits, slot size and model name
    text = state.executors.text  # tokenizer and template work, their bodies' too (server/executors.py)
    # each route reads state.engine when it runs: a server whose RPC workers came back serves from a new engine

    async def completion(request: Request) -> Response:
        return await _complete(state, request, NativeCompletionRequest)

    app.add_api_route(COMPLETION_PATHS[0], completion, methods=["POST"], **docs["native_completion"])
    app.add_api_route(COMPLETION_PATHS[1], completion, methods=["POST"], include_in_schema=False)

    @app.post("/infill", **docs["infill"])
    async def infill(request: Request) -> Response:
        return await _complete(state, request, InfillRequest)

    async def native_embeddings(request: Request) -> Response:
        return await embeddings(state, request, native=True)

    app.add_api_route(EMBEDDING_PATHS[0], native_embeddings, methods=["POST"], **docs["native_embeddings"])
    app.add_api_route(EMBEDDING_PATHS[1], native_embeddings, methods=["POST"], include_in_schema=False)

    @app.post("/tokenize", **docs["tokenize"])
    async def tokenize(request: Request) -> StreamingResponse:
        model = state.engine.model
        req, ignored = await read_request(request, state.limits, TokenizeRequest, pool=text)
        tokens = await text.run(model.tokenize, req.content, add_special=req.add_special,
                                parse_special=req.parse_special)

        def piece_of(token: int) -> bytes:
            return model.handle.token_piece(token, special=True)
        # (Starlette reads a plain iterator in its thread pool: the chunks are made off the event loop)
        return StreamingResponse(tokens_body(tokens, piece_of if req.with_pieces else None),
                                 media_type="application/json", headers=ignored_fields(request, ignored))

    @app.post("/detokenize", **docs["detokenize"])
    async def detokenize(request: Request) -> JSONResponse:
        model = state.engine.model
        req, ignored = await read_request(request, state.limits, DetokenizeRequest, pool=text)
        return JSONResponse({"content": await text.run(model.detokenize, req.tokens, True)},
                            headers=ignored_fields(request, ignored))

    @app.post("/apply-template", **docs["apply_template"])
    async def apply_template(request: Request) -> JSONResponse:
        model = state.engine.model
        (messages, tools, kwargs), ignored = await read_request(request, state.limits, ApplyTemplateRequest,
                                                                pool=text)
        prompt = await text.run(model.apply_chat_template, messages, tools=tools, **kwargs)
        return JSONResponse({"prompt": prompt}, headers=ignored_fields(request, ignored))

    @app.get("/props", **docs["props"])
    async def props() -> dict[str, Any]:
        engine = state.engine
        model = engine.model
        return {"default_generation_settings": {"id": 0, "id_task": -1, "n_ctx": engine.n_ctx_slot,
                                                "speculative": False, "is_processing": False,
                                                "params": settings},
                "total_slots": engine.parallel, "model_alias": state.model_name, "model_path": str(model.path),
                "chat_template": await text.run(_chat_template, state),
                "modalities": {"vision": False, "audio": False}, "build_info": state.fingerprint,
                "is_sleeping": False}

    @app.post("/slots/{id_slot}", **docs["slot_action"])
    async def slot_action(request: Request, id_slot: str) -> JSONResponse:
        return await slot_files.slot_action(state, request, id_slot)

    @app.get("/slots", **docs["slots"])
    async def slots(request: Request) -> list[dict[str, Any]]:
        engine = state.engine
        fail_on_no_slot = request.query_params.get("fail_on_no_slot", "0")
        if fail_on_no_slot not in ("0", "1"):
            raise APIError(400, "'fail_on_no_slot' must be 0 or 1", param="fail_on_no_slot")
        usage = engine.slot_usage()
        if fail_on_no_slot == "1" and all(busy for busy, _ in usage):
            raise APIError(503, "no slot is free", type="unavailable_error", code="no_slot_available")
        return [{"id": i, "id_task": -1, "n_ctx": engine.n_ctx_slot, "speculative": False, "is_processing": busy,
                 "n_cached": n_cached} for i, (busy, n_cached) in enumerate(usage)]
