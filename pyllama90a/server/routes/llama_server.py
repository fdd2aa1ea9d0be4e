"""llama-server's native routes, for clients written for it: POST /completion (and /completions, which
llama-server serves the same way), /infill (a /completion of a fill-in-the-middle prompt: core/model/fim.py),
/tokenize, /detokenize, /apply-template, /embeddings and /embedding (its list shape), GET /props (its slots:
slots.py). Requests are read by protocol/requests.py, answers shaped by responses/llama_server.py; errors keep
the OpenAI routes' contract (server/errors.py)."""
from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from ...core.constrained.vocab import end_of_generation
from ...errors import ChatTemplateError
from ..embeddings import embeddings
from ..errors import CHAT_INPUTS, COMPLETION_INPUTS, EMBEDDING_INPUTS, RouteInputs
from ..generation import generate, ignored_fields
from ..protocol import openapi as doc
from ..protocol.base import parse
from ..protocol.body import read_request
from ..protocol.embeddings import EmbeddingRequest
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
from .family import Family, State

router = Family()


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
                                   stream=gen.stream,
                                   eog=end_of_generation(engine.model.handle) if gen.request.ignore_eos else ())

    def shape_for(ident: str, prompts: list[list[int]], common: dict[str, Any]) -> NativeCompletionShape:
        return NativeCompletionShape(ident, state.model_name, prompts=prompts, settings=settings,
                                     several=gen.prompts is not None,
                                     detokenize=lambda tokens: engine.model.detokenize(tokens, special=True),
                                     return_tokens=gen.return_tokens,
                                     probabilities=gen.request.logprobs is not None,
                                     post_sampling=gen.request.post_sampling_probs, **common)
    return await generate(state, request, gen, ignored, chat=False, shape_for=shape_for)


@router.serve("POST", "/completion", also_at=("/completions",), inputs=COMPLETION_INPUTS, doc=doc.generation(
    "llama-server's completion (also at /completions): content, tokens, stop_type, timings; a stream ends without "
    "[DONE]", NativeCompletionRequest, doc.NATIVE_COMPLETIONS))
async def completion(request: Request, state: State) -> Response:
    return await _complete(state, request, NativeCompletionRequest)


@router.serve("POST", "/infill", doc=doc.generation(
    "llama-server's fill-in-the-middle completion: a /completion of the model's FIM prompt (a model without FIM "
    "prefix, suffix and middle tokens answers 400, code infill_not_supported)", InfillRequest,
    doc.NATIVE_COMPLETION))
async def infill(request: Request, state: State) -> Response:
    return await _complete(state, request, InfillRequest)


@router.serve("POST", "/embeddings", also_at=("/embedding",), inputs=EMBEDDING_INPUTS, doc=doc.reading(
    "llama-server's embeddings (also at /embedding): one pooled vector per input, in a list", EmbeddingRequest,
    doc.NATIVE_EMBEDDINGS, "one vector per input"))
async def native_embeddings(request: Request, state: State) -> Response:
    return await embeddings(state, request, native=True)


# tokenizer and template work, their bodies' too, runs on the text pool (server/executors.py); each route reads
# state.engine when it runs: a server whose RPC workers came back serves from a new engine

@router.serve("POST", "/tokenize", inputs=RouteInputs("content", "content"), doc=doc.reading(
    "llama-server's tokenizer (no BOS and special tokens parsed unless asked)", TokenizeRequest, doc.TOKENIZE))
async def tokenize(request: Request, state: State) -> StreamingResponse:
    model, text = state.engine.model, state.executors.text
    req, ignored = await read_request(request, state.limits, TokenizeRequest, pool=text)
    tokens = await text.run(model.tokenize, req.content, add_special=req.add_special,
                            parse_special=req.parse_special)

    def piece_of(token: int) -> bytes:
        return model.handle.token_piece(token, special=True)
    # (Starlette reads a plain iterator in its thread pool: the chunks are made off the event loop)
    return StreamingResponse(tokens_body(tokens, piece_of if req.with_pieces else None),
                             media_type="application/json", headers=ignored_fields(request, ignored))


@router.serve("POST", "/detokenize", inputs=RouteInputs("tokens", "tokens"),
              doc=doc.reading("Token ids to text", DetokenizeRequest, doc.DETOKENIZE))
async def detokenize(request: Request, state: State) -> JSONResponse:
    model, text = state.engine.model, state.executors.text
    req, ignored = await read_request(request, state.limits, DetokenizeRequest, pool=text)
    return JSONResponse({"content": await text.run(model.detokenize, req.tokens, True)},
                        headers=ignored_fields(request, ignored))


@router.serve("POST", "/apply-template", inputs=CHAT_INPUTS, doc=doc.reading(
    "The prompt the chat template renders for a chat request's messages", ApplyTemplateRequest, doc.PROMPT))
async def apply_template(request: Request, state: State) -> JSONResponse:
    model, text = state.engine.model, state.executors.text
    (messages, tools, kwargs), ignored = await read_request(request, state.limits, ApplyTemplateRequest, pool=text)
    prompt = await text.run(model.apply_chat_template, messages, tools=tools, **kwargs)
    return JSONResponse({"prompt": prompt}, headers=ignored_fields(request, ignored))


@router.serve("GET", "/props", doc=doc.fixed("llama-server's server properties", {
    200: doc.json_body("the default generation settings, slots, model path, chat template", doc.PROPS),
    **doc.errors(401, 429, 503)}))
async def props(state: State) -> dict[str, Any]:
    engine = state.engine
    return {"default_generation_settings": {"id": 0, "id_task": -1, "n_ctx": engine.n_ctx_slot,
                                            "speculative": engine.speculative is not None,
                                            "is_processing": False,
                                            "params": default_settings(state)},
            "total_slots": engine.parallel, "model_alias": state.model_name, "model_path": str(engine.model.path),
            "chat_template": await state.executors.text.run(_chat_template, state),
            "modalities": {"vision": False, "audio": False}, "build_info": state.fingerprint,
            "is_sleeping": False, "attention": _attention(state)}


def _attention(state: ServerState) -> dict[str, Any]:
    """How attention runs (this server's own /props field): the flash-attention path, its device, why, and the
    calibration file flash_attn "auto" followed (null: the built-in table, or a path the flag asked for)."""
    choice = state.engine.model.attention
    return {"flash_attn": choice.flash_attn, "backend": choice.backend, "reason": choice.reason,
            "fused_decode": choice.fused_decode, "calibration": choice.calibration}
