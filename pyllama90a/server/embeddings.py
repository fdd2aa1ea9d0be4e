"""The embeddings routes' work: /v1/embeddings and llama-server's list-shaped /embeddings, on a second
context of the engine's weights, stopped early when the client goes away."""
from __future__ import annotations

import asyncio
import base64
import threading
from typing import Any

import numpy as np
from fastapi import Request
from fastapi.responses import JSONResponse, Response

from .errors import APIError
from .generation import DISCONNECT_POLL_S, ignored_fields
from .protocol.body import read_request
from .protocol.requests import EmbeddingRequest, EmbeddingText, mixed_tokens
from .state import ServerState


class _Cancelled(Exception):
    """The client of an embeddings request went away: the inputs left are not embedded."""


EMBED_CHUNK = 8  # inputs embedded between two looks at whether the client is still there


def _embed(state: ServerState, inputs: list[EmbeddingText], cancelled: threading.Event) -> tuple[np.ndarray, int]:
    """Embeddings come from a second context on the engine's loaded weights, made on first use (pooled, no KV
    reuse); it runs beside the engine's context, and the weights stay loaded until both are closed. Inputs are
    embedded a few at a time, so a request whose client left (`cancelled`) stops within one chunk instead of
    holding the embedder (and every request behind it) for all of its inputs."""
    with state.embed_lock:
        if cancelled.is_set():  # (its client left while it waited for the embedder)
            raise _Cancelled
        if state.embedder is None:
            engine = state.engine
            state.embedder = engine.model.with_context(embedding=True, n_ctx=2048, n_batch=2048, n_ubatch=2048,
                                                       n_threads=engine.n_threads)
        # (ids and strings mixed: the strings tokenized here, by the embedder's tokenizer)
        texts = [item if isinstance(item, str) else mixed_tokens(state.embedder, item) for item in inputs]
        n_tokens = sum(len(state.embedder.tokenize(t)) if isinstance(t, str) else len(t) for t in texts)
        parts = []
        for start in range(0, len(texts), EMBED_CHUNK):
            if cancelled.is_set():
                raise _Cancelled
            parts.append(state.embedder.embed(texts[start:start + EMBED_CHUNK]))
        return np.concatenate(parts), n_tokens



def _refuse_foreign_ids(state: ServerState, model: str | None, inputs: list[EmbeddingText]) -> None:
    """Token ids are embedded as this model's ids only when the request names no model or this one (its name or an
    alias). A client that names another model (LangChain's OpenAIEmbeddings: "text-embedding-3-small") tokenized
    its texts with that model's tokenizer (tiktoken): ids in this vocabulary's range would embed other words,
    silently; a 400 says to send the texts."""
    if model is None or model == state.model_name or model in state.model_aliases:
        return
    if any(isinstance(i, list) for i in inputs):
        raise APIError(400, f"token ids for model {model!r} are that model's tokenizer's, not this server's "
                            f"{state.model_name!r}: send the texts (LangChain: OpenAIEmbeddings("
                            f"check_embedding_ctx_length=False)), or name model {state.model_name!r} if the ids "
                            f"come from its tokenizer (/tokenize)", param="input", code="foreign_token_ids")


async def embeddings(state: ServerState, request: Request, *, native: bool) -> Response:
    """/v1/embeddings, or (native) llama-server's /embeddings: a list of {index, embedding: [vector]}."""
    pool = state.executors.embeddings
    req, ignored = await read_request(request, state.limits, EmbeddingRequest, pool=pool)
    inputs = req.input or req.content
    _refuse_foreign_ids(state, req.model, inputs)
    cancelled = threading.Event()
    work = asyncio.ensure_future(pool.run(_embed, state, inputs, cancelled))
    while not (await asyncio.wait({work}, timeout=DISCONNECT_POLL_S))[0]:
        if await request.is_disconnected():  # nobody will read the vectors
            # a job still queued leaves the embeddings queue (and its place there) now; a running one stops at its
            # next chunk of inputs and leaves the pool then
            cancelled.set()
            work.cancel()
            await asyncio.wait({work})
            if not work.cancelled():
                work.exception()  # (retrieved: _Cancelled, or vectors nobody reads)
            return Response(status_code=499)
    vectors, n_tokens = await work
    headers = ignored_fields(request, ignored)
    values: list[Any] = [base64.b64encode(vec.astype("<f4").tobytes()).decode() if req.encoding_format == "base64"
                         else vec.astype(float).tolist() for vec in vectors]
    if native:  # (one pooled vector per input: llama-server's list of one per token is for pooling none)
        return JSONResponse([{"index": i, "embedding": [v]} for i, v in enumerate(values)], headers=headers)
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(values)]
    return JSONResponse({"object": "list", "data": data, "model": state.model_name,
                         "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}}, headers=headers)

