"""The FastAPI application: OpenAI routes over one BatchEngine (also without the /v1 prefix, as llama-server
serves them), llama-server's native routes (native_routes.py), /health and /metrics; the API key check and,
with --cors-origins, CORS."""
from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import json
import logging
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, AsyncIterator, Callable

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware

from .. import __version__
from ..chat import PreparedChat, prepare_chat
from ..engine import BatchEngine, Chunk, Handle
from ..errors import ClosedError, LlamaError
from ..model import Model
from . import native_routes
from .api_requests import (IGNORED_HEADER, Generation, Limits, chat_request, completion_request, embedding_request,
                           shown_names)
from .errors import APIError, answer
from .metrics import render_metrics
from .openapi_doc import route_docs
from .request_body import read_json
from .responses import ChatShape, CompletionShape, Shape
from .timings import RequestTimer

log = logging.getLogger(__name__)


@dataclass
class ServerState:
    engine: BatchEngine
    model_name: str
    api_key: str | None = None
    embedder: Model | None = None
    limits: Limits = field(default_factory=Limits)
    cors_origins: tuple[str, ...] = ()  # --cors-origins: "*", "localhost" or origins; none: no CORS headers
    created: int = field(init=False, default_factory=lambda: int(time.time()))
    draining: bool = field(init=False, default=False)  # shutting down: new requests get 503

    def __post_init__(self) -> None:
        self.responses: Counter[tuple[str, int]] = Counter()
        self.timed: Counter[str] = Counter()  # finished requests' timings, summed: for llama-server's metrics
        self.embed_lock = threading.Lock()
        self._mailbox: _Mailbox | None = None

    @property
    def fingerprint(self) -> str:
        """system_fingerprint: what answers, in this server's version and the engine's KV settings."""
        kv = self.engine.model.kv_cache
        return f"pyllama90a-{__version__}-{kv.type_k}-{kv.type_v}"

    def note_timings(self, shape: Shape) -> None:
        timings = shape.timings()
        self.timed.update({"prompt": timings["prompt_ms"] / 1e3, "predicted": timings["predicted_ms"] / 1e3,
                           "prompt_n": timings["prompt_n"], "predicted_n": timings["predicted_n"]})

    def mailbox(self, loop: asyncio.AbstractEventLoop) -> _Mailbox:
        if self._mailbox is None or self._mailbox.loop is not loop:
            self._mailbox = _Mailbox(loop)
        return self._mailbox


class _Mailbox:
    """Chunks from the engine thread to the event loop's queues, with one loop wake-up per batch of chunks
    (a decode step makes one chunk per slot) instead of one per chunk."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._pending: list[tuple[asyncio.Queue, tuple[int, Chunk]]] = []
        self._lock = threading.Lock()
        self._scheduled = False

    def sender(self, queue: asyncio.Queue, choice: int = 0) -> Callable[[Chunk], None]:
        """The engine's on_chunk for choice `choice` of a request: its chunks reach `queue` as (choice, chunk)."""
        def send(chunk: Chunk) -> None:  # engine thread
            with self._lock:
                self._pending.append((queue, (choice, chunk)))
                if self._scheduled:
                    return
                self._scheduled = True
            try:
                self.loop.call_soon_threadsafe(self._deliver)
            except RuntimeError:  # the loop is closed (shutting down): the engine cancels this request
                with self._lock:
                    self._scheduled = False
                raise
        return send

    def _deliver(self) -> None:  # event loop
        with self._lock:
            pending, self._pending, self._scheduled = self._pending, [], False
        for queue, item in pending:
            queue.put_nowait(item)


def create_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="pyllama90a", docs_url=None, redoc_url=None)
    app.state.server = state
    docs = route_docs(state.limits)

    @app.exception_handler(APIError)
    @app.exception_handler(LlamaError)
    async def _answer(request: Request, exc: Exception) -> JSONResponse:
        error = answer(exc, request.url.path)
        return JSONResponse(error.body(), status_code=error.status, headers=error.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = "not_found" if exc.status_code == 404 else None
        return JSONResponse(APIError(exc.status_code, str(exc.detail), code=code).body(), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _server_bug(request: Request, exc: Exception) -> JSONResponse:
        # only a bug of this server gets here (request input is answered with 4xx before): Starlette re-raises
        # the exception after this response, and uvicorn logs its traceback
        return JSONResponse(APIError(500, "internal server error", type="server_error").body(), status_code=500)

    app.add_middleware(_AuthAndCount, state=state)
    if state.cors_origins:  # added last, so outermost: a preflight is answered before the API key check
        app.add_middleware(CORSMiddleware, **cors_settings(state.cors_origins))

    @app.get("/health", **docs["health"])
    async def health() -> JSONResponse:
        stats = state.engine.stats()
        body: dict[str, Any] = {"status": "ok", "slots_busy": stats.busy_slots,
                                "slots_idle": stats.parallel - stats.busy_slots, "queue_depth": stats.queue_depth}
        if not state.engine.running:
            failure = state.engine.failure
            body.update(status="error", reason=f"the engine thread stopped on {failure!r}" if failure is not None
                        else "the engine is closed")
        elif state.draining:
            body.update(status="shutting_down", reason="the server is shutting down")
        return JSONResponse(body, status_code=200 if body["status"] == "ok" else 503)

    @app.get("/metrics", response_class=PlainTextResponse, **docs["metrics"])
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(render_metrics(state.engine, state.responses, state.timed),
                                 media_type="text/plain; version=0.0.4")

    @app.get("/v1/models", **docs["models"])
    @app.get("/models", include_in_schema=False)
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [_model_card(state)]}

    @app.get("/v1/models/{model_id:path}", **docs["model"])
    async def model(model_id: str) -> dict[str, Any]:
        if model_id != state.model_name:
            raise APIError(404, f"The model '{model_id}' does not exist; this server serves '{state.model_name}'",
                           param="model", code="model_not_found")
        return _model_card(state)

    @app.post("/v1/completions", **docs["completions"])
    async def completions(request: Request) -> Response:
        body = await read_json(request, state.limits.max_request_bytes)
        # (its constraint compiles in a worker process: the thread only waits, off the event loop)
        gen = await asyncio.to_thread(completion_request, body, state.limits)
        return await _generate(state, request, gen, chat=False)

    @app.post("/v1/chat/completions", **docs["chat"])
    @app.post("/chat/completions", include_in_schema=False)
    async def chat_completions(request: Request) -> Response:
        body = await read_json(request, state.limits.max_request_bytes)
        gen = await asyncio.to_thread(chat_request, body, state.limits)
        return await _generate(state, request, gen, chat=True)

    @app.post("/v1/embeddings", **docs["embeddings"])
    async def embeddings(request: Request) -> Response:
        return await _embeddings(state, request, native=False)

    native_routes.register(app, state, docs, _generate, _embeddings)
    return app


async def _embeddings(state: ServerState, request: Request, *, native: bool) -> Response:
    """/v1/embeddings, or (native) llama-server's /embeddings: a list of {index, embedding: [vector]}."""
    req = embedding_request(await read_json(request, state.limits.max_request_bytes), state.limits)
    cancelled = threading.Event()
    work = asyncio.ensure_future(asyncio.to_thread(_embed, state, req.inputs, cancelled))
    while not (await asyncio.wait({work}, timeout=DISCONNECT_POLL_S))[0]:
        if await request.is_disconnected():  # nobody will read the vectors: stop at the next chunk of inputs
            cancelled.set()
    if cancelled.is_set():
        with contextlib.suppress(_Cancelled):
            await work
        return Response(status_code=499)
    vectors, n_tokens = await work
    headers = _ignored_fields(request, req.ignored)
    values: list[Any] = [base64.b64encode(vec.astype("<f4").tobytes()).decode() if req.base64
                         else vec.astype(float).tolist() for vec in vectors]
    if native:  # (one pooled vector per input: llama-server's list of one per token is for pooling none)
        return JSONResponse([{"index": i, "embedding": [v]} for i, v in enumerate(values)], headers=headers)
    data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(values)]
    return JSONResponse({"object": "list", "data": data, "model": state.model_name,
                         "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}}, headers=headers)


# routes answered without the API key (every other path needs it, unknown ones too)
PUBLIC_ROUTES = frozenset({"/health", "/metrics", "/openapi.json"})
# the routes /metrics counts responses of by name (others as "other")
_ROUTES = {"/health", "/metrics", "/v1/models", "/v1/completions", "/v1/chat/completions", "/v1/embeddings",
           "/models", "/chat/completions", *native_routes.PATHS}

LOCALHOST_ORIGINS = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:[0-9]+)?"


def cors_settings(origins: tuple[str, ...]) -> dict[str, Any]:
    """CORSMiddleware's settings for --cors-origins: "*" (any origin), "localhost" (pages served from this
    machine, any port) and exact origins. No credentials (cookies): the API key is a header, which a page
    sends itself."""
    return {"allow_origins": [o for o in origins if o != "localhost"],
            "allow_origin_regex": LOCALHOST_ORIGINS if "localhost" in origins else None,
            "allow_methods": ["GET", "POST", "OPTIONS"], "allow_headers": ["*"],
            "expose_headers": [IGNORED_HEADER, "Retry-After"], "max_age": 600}


class _AuthAndCount:
    """ASGI middleware: the API key check on every route but PUBLIC_ROUTES and the response counts of
    /metrics. (Plain ASGI rather than Starlette's BaseHTTPMiddleware, which would hide a client's disconnect
    from the routes.)"""

    def __init__(self, app: Any, state: ServerState) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        route = path if path in _ROUTES else "other"
        key = self.state.api_key
        public = path in PUBLIC_ROUTES
        if key is not None and not public and not _authorized(Headers(scope=scope), key):
            response = JSONResponse(APIError(401, "Incorrect or missing API key (send 'Authorization: Bearer <key>' "
                                                  "or 'X-Api-Key: <key>')", code="invalid_api_key").body(),
                                    status_code=401)
            await response(scope, receive, send)
            self.state.responses[(route, 401)] += 1
            return
        if self.state.draining and not public:  # a request on a connection kept alive
            response = JSONResponse(answer(ClosedError("shutting down"), path).body(), status_code=503,
                                    headers={"Connection": "close", "Retry-After": "5"})
            await response(scope, receive, send)
            self.state.responses[(route, 503)] += 1
            return
        status = 500

        async def send_and_note_status(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note_status)
        finally:
            self.state.responses[(route, status)] += 1


def _authorized(headers: Headers, key: str) -> bool:
    """'Authorization: Bearer KEY' (OpenAI's) or 'X-Api-Key: KEY' (Anthropic's, which llama-server takes)."""
    scheme, _, token = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key.encode()):
        return True
    return hmac.compare_digest(headers.get("x-api-key", "").strip().encode(), key.encode())


def _ignored_fields(request: Request, names: list[str]) -> dict[str, str]:
    """The response headers that name a request's unknown fields (--unknown-fields warn), and its log line."""
    if not names:
        return {}
    shown = shown_names(names)
    log.warning("%s: unknown request field(s) ignored: %s", request.url.path, shown)
    return {IGNORED_HEADER: shown}


def _model_card(state: ServerState) -> dict[str, Any]:
    return {"id": state.model_name, "object": "model", "created": state.created, "owned_by": "pyllama90a"}


class _Cancelled(Exception):
    """The client of an embeddings request went away: the inputs left are not embedded."""


EMBED_CHUNK = 8  # inputs embedded between two looks at whether the client is still there


def _embed(state: ServerState, texts: list[str | list[int]], cancelled: threading.Event) -> tuple[np.ndarray, int]:
    """Embeddings come from a second context on the engine's loaded weights, made on first use (pooled, no KV
    reuse); it runs beside the engine's context, and the weights stay loaded until both are closed. Inputs are
    embedded a few at a time, so a request whose client left (`cancelled`) stops within one chunk instead of
    holding the embedder (and every request behind it) for all of its inputs."""
    with state.embed_lock:
        if state.embedder is None:
            engine = state.engine
            state.embedder = engine.model.with_context(embedding=True, n_ctx=2048, n_batch=2048, n_ubatch=2048,
                                                       n_threads=engine.n_threads)
        n_tokens = sum(len(state.embedder.tokenize(t)) if isinstance(t, str) else len(t) for t in texts)
        parts = []
        for start in range(0, len(texts), EMBED_CHUNK):
            if cancelled.is_set():
                raise _Cancelled
            parts.append(state.embedder.embed(texts[start:start + EMBED_CHUNK]))
        return np.concatenate(parts), n_tokens


# how often a non-streaming request checks that its client is still connected while it waits for tokens
DISCONNECT_POLL_S = 0.25


def _submit(state: ServerState, gen: Generation, deliver: list[Any], *,
            chat: bool) -> tuple[list[Handle], PreparedChat | None, list[int]]:
    """Render a chat (template, tools), then queue the request's n generations; all or none are queued.
    Returns their handles, the prepared chat and the prompt's tokens.
    Run in a worker thread (a template renders, a grammar compiles, a long prompt is tokenized here). What it
    raises is answered by the app's handler (server/errors.py)."""
    engine = state.engine
    # the n generations are queued one after another, before the engine thread moves any into a free slot, so
    # more than the queue holds can never be queued at once, even on an idle server: a 429 ("retry shortly")
    # would invite endless retries
    if gen.n > engine.queue_size:
        raise APIError(400, f"n={gen.n} is more than this server's queue of {engine.queue_size} places can hold "
                            f"(--queue-size)", param="n")
    prepared, request = None, gen.request
    if chat:
        assert gen.messages is not None  # (chat_request sets them)
        prepared = prepare_chat(engine.model, gen.messages, tools=gen.tools, tool_choice=gen.tool_choice,
                                parallel_tool_calls=gen.parallel_tool_calls, constraint=request.constraint,
                                template_kwargs=gen.template_kwargs)
        request = replace(request, constraint=prepared.constraint)
        prompt = prepared.tokens
    else:
        prompt = engine.tokenize_prompt(gen.prompt)
    seed = request.sampling.seed
    handles: list[Handle] = []
    try:
        for i, send in enumerate(deliver):
            # choices differ by their seed (seed + i when the request gives one)
            choice = request if seed is None else replace(
                request, sampling=replace(request.sampling, seed=(seed + i) % 0xFFFFFFFF))
            handles.append(engine.submit_request(prompt, choice, send))
    except BaseException:
        for handle in handles:
            handle.cancel()
        raise
    return handles, prepared, prompt


# a route's own answer shape: (id, the prompt's tokens, the settings every shape takes) -> Shape
ShapeFor = Callable[[str, list[int], dict[str, Any]], Shape]


async def _generate(state: ServerState, request: Request, gen: Generation, *, chat: bool,
                    shape_for: ShapeFor | None = None) -> Response:
    chunks: asyncio.Queue[tuple[int, Chunk]] = asyncio.Queue()
    mailbox = state.mailbox(asyncio.get_running_loop())
    deliver = [mailbox.sender(chunks, i) for i in range(gen.n)]
    timer = RequestTimer()
    # rendering a template, compiling a grammar, tokenizing a long prompt: never on the event loop
    handles, prepared, prompt = await asyncio.to_thread(_submit, state, gen, deliver, chat=chat)

    headers = _ignored_fields(request, gen.ignored)  # (logged once the request is accepted)
    ident = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
    common = {"fingerprint": state.fingerprint, "timer": timer}
    shape = (shape_for(ident, prompt, common) if shape_for is not None
             else ChatShape(ident, state.model_name, gen.n, prepared.output if prepared is not None else None,
                            **common) if chat
             else CompletionShape(ident, state.model_name, gen.n, **common))
    if gen.stream:
        return StreamingResponse(_sse(state, chunks, handles, shape, gen.include_usage, request.url.path),
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
    return JSONResponse(shape.whole(), headers=headers)


async def _sse(state: ServerState, chunks: asyncio.Queue, handles: list[Handle], shape: Shape, include_usage: bool,
               path: str) -> AsyncIterator[str]:
    """Server-sent events; if the client goes away Starlette cancels this generator and the slots are freed."""
    try:
        for event in shape.opening():
            yield _event(event)
        while not shape.finished:
            choice, chunk = await chunks.get()
            if chunk.error is not None:  # the status (200) is sent: the error goes in a last event
                yield _event(answer(chunk.error, path).body())
                break
            for event in shape.events(choice, chunk):
                yield _event(event)
        else:
            state.note_timings(shape)
            if include_usage:
                yield _event(shape.usage_only())
        if shape.done_marker:
            yield "data: [DONE]\n\n"
    finally:
        for handle in handles:
            handle.cancel()


def _event(payload: dict[str, Any]) -> str:
    return f"data: {json.dumps(payload, separators=(',', ':'))}\n\n"
