"""The embeddings routes' work: /v1/embeddings and llama-server's list-shaped /embeddings, on a second
context of the engine's weights (the embedder, which the rerank routes use too), stopped early when the client
goes away."""
from __future__ import annotations

import asyncio
import base64
import threading
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np
from fastapi import Request
from fastapi.responses import JSONResponse, Response

from ..core.model.model import Model
from .errors import APIError
from .generation import DISCONNECT_POLL_S, ignored_fields
from .protocol.body import read_request
from .protocol.embeddings import EmbeddingRequest
from .protocol.requests import EmbeddingText, mixed_tokens
from .state import ServerState


class Cancelled(Exception):
    """The client of an embeddings (or rerank) request went away: the inputs left are not done."""


EMBED_CHUNK = 8  # inputs embedded (documents reranked) between two looks at whether the client is still there
T = TypeVar("T")


def _on_embedder(state: ServerState, work: Callable[[Model, threading.Event], T], cancelled: threading.Event) -> T:
    """Embeddings and reranks come from a second context on the engine's loaded weights, made on first use (pooled
    as the GGUF says, no KV reuse); it runs beside the engine's context, and the weights stay loaded until both
    are closed. `work` runs holding it."""
    with state.embed_lock:
        if cancelled.is_set():  # (its client left while it waited for the embedder)
            raise Cancelled
        if state.embedder is None:
            engine = state.engine
            state.embedder = engine.model.with_context(embedding=True, n_ctx=2048, n_batch=2048, n_ubatch=2048,
                                                       n_threads=engine.n_threads)
        return work(state.embedder, cancelled)


def in_chunks(inputs: list[Any], cancelled: threading.Event, do: Callable[[list[Any]], np.ndarray]) -> np.ndarray:
    """do(inputs) a few at a time, so that a request whose client left (`cancelled`) stops within one chunk
    instead of holding the embedder (and every request behind it) for all of its inputs."""
    parts = []
    for start in range(0, len(inputs), EMBED_CHUNK):
        if cancelled.is_set():
            raise Cancelled
        parts.append(do(inputs[start:start + EMBED_CHUNK]))
    return np.concatenate(parts)


async def on_embedder(state: ServerState, request: Request, work: Callable[[Model, threading.Event], T]) -> T | None:
    """work(embedder, cancelled) on the embeddings pool; None when the client went away first (answer 499)."""
    cancelled = threading.Event()
    job = asyncio.ensure_future(state.executors.embeddings.run(_on_embedder, state, work, cancelled))
    while not (await asyncio.wait({job}, timeout=DISCONNECT_POLL_S))[0]:
        if await request.is_disconnected():  # nobody will read the answer
            # a job still queued leaves the embeddings queue (and its place there) now; a running one stops at its
            # next chunk of inputs and leaves the pool then
            cancelled.set()
            job.cancel()
            await asyncio.wait({job})
            if not job.cancelled():
                job.exception()  # (retrieved: Cancelled, or an answer nobody reads)
            return None
    done: T = await job
    return done


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
    req, ignored = await read_request(request, state.limits, EmbeddingRequest, pool=state.executors.embeddings)
    inputs: list[EmbeddingText] = req.input or req.content
    _refuse_foreign_ids(state, req.model, inputs)

    def embed(embedder: Model, cancelled: threading.Event) -> tuple[np.ndarray, int]:
        # (ids and strings mixed: the strings tokenized here, by the embedder's tokenizer)
        texts = [item if isinstance(item, str) else mixed_tokens(embedder, item) for item in inputs]
        n_tokens = sum(len(embedder.tokenize(t)) if isinstance(t, str) else len(t) for t in texts)
        return in_chunks(texts, cancelled, embedder.embed), n_tokens

    done = await on_embedder(state, request, embed)
    if done is None:
        return Response(status_code=499)
    vectors, n_tokens = done
    # (llama-server's metrics count an embedding's prompt and its decodes, one per input, as a generation's)
    state.timed.update(embedding_tokens=n_tokens, embedding_decodes=len(vectors))
    headers = ignored_fields(request, ignored)
    values: list[Any] = [base64.b64encode(vec.astype("<f4").tobytes()).decode() if req.encoding_format == "base64"
                         else vec.astype(float).tolist() for vec in vectors]
    if native:  # (one pooled vector per input: llama-server's list of one per token is for pooling none)
        return JSONResponse([{"index": i, "embedding": [v]} for i, v in enumerate(values)], headers=headers)
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(values)]
    return JSONResponse({"object": "list", "data": data, "model": state.model_name,
                         "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}}, headers=headers)

