"""The FastAPI application: OpenAI routes over one BatchEngine (also without the /v1 prefix, as llama-server
serves them), llama-server's native routes (llama_server.py), /health and /metrics; the API key check and,
with --cors-origins, CORS."""
from __future__ import annotations

import hmac
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware

from ..errors import ClosedError, LlamaError
from .embeddings import embeddings as serve_embeddings
from .errors import APIError, answer
from .generation import generate
from .metrics import render_metrics
from .protocol.base import IGNORED_HEADER
from .protocol.body import read_request
from .protocol.openapi import route_docs
from .protocol.requests import ChatRequest, CompletionRequest
from .routes import llama_server, lora
from .state import ServerState
from .worker_recovery import lost_reason

__all__ = ["ServerState", "create_app"]


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
        lost = state.workers.lost_workers()
        if not state.engine.running:
            failure = state.engine.failure
            body.update(status="error", reason=f"the engine thread stopped on {failure!r}" if failure is not None
                        else "the engine is closed")
        elif lost:
            body.update(status="error", reason=lost_reason(lost), lost_workers=list(lost))
        elif state.draining:
            body.update(status="shutting_down", reason="the server is shutting down")
        # kinds of work whose threads are all busy with more waiting (server/executors.py): their routes are
        # delayed, or answered 429 once the kind's queue is full; the others are served as usual
        body["saturated"] = state.executors.saturated()
        return JSONResponse(body, status_code=200 if body["status"] == "ok" else 503)

    @app.get("/metrics", response_class=PlainTextResponse, **docs["metrics"])
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(render_metrics(state.engine, state.kv_cache, state.responses, state.timed,
                                                state.workers, state.executors.usage()),
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
        # (its constraint compiles in a worker process: the thread only waits, off the event loop)
        gen, ignored = await read_request(request, state.limits, CompletionRequest, pool=state.executors.parse)
        return await generate(state, request, gen, ignored, chat=False)

    @app.post("/v1/chat/completions", **docs["chat"])
    @app.post("/chat/completions", include_in_schema=False)
    async def chat_completions(request: Request) -> Response:
        gen, ignored = await read_request(request, state.limits, ChatRequest, pool=state.executors.parse)
        return await generate(state, request, gen, ignored, chat=True)

    @app.post("/v1/embeddings", **docs["embeddings"])
    async def embeddings(request: Request) -> Response:
        return await serve_embeddings(state, request, native=False)

    llama_server.register(app, state, docs)
    lora.register(app, state, docs)
    return app



# routes answered without the API key (every other path needs it, unknown ones too); /metrics only with
# --metrics-public (it shows per-route counts and the KV settings: llama-server keeps it behind the key too)
PUBLIC_ROUTES = frozenset({"/health", "/openapi.json"})
_SERVED_WHILE_DRAINING = PUBLIC_ROUTES | {"/metrics"}
# the routes /metrics counts responses of by name (others as "other")
_ROUTES = {"/health", "/metrics", "/v1/models", "/v1/completions", "/v1/chat/completions", "/v1/embeddings",
           "/models", "/chat/completions", *llama_server.PATHS, *lora.PATHS}

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

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        route = path if path in _ROUTES else "other"
        key = self.state.api_key
        public = path in PUBLIC_ROUTES or (path == "/metrics" and self.state.metrics_public)
        if key is not None and not public and not _authorized(Headers(scope=scope), key):
            response = JSONResponse(APIError(401, "Incorrect or missing API key (send 'Authorization: Bearer <key>' "
                                                  "or 'X-Api-Key: <key>')", code="invalid_api_key").body(),
                                    status_code=401)
            await response(scope, receive, send)
            self.state.responses[(route, 401)] += 1
            return
        if self.state.draining and path not in _SERVED_WHILE_DRAINING:  # a request on a connection kept alive
            response = JSONResponse(answer(ClosedError("shutting down"), path).body(), status_code=503,
                                    headers={"Connection": "close", "Retry-After": "5"})
            await response(scope, receive, send)
            self.state.responses[(route, 503)] += 1
            return
        status = 500

        async def send_and_note_status(message: dict[str, Any]) -> None:
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



def _model_card(state: ServerState) -> dict[str, Any]:
    return {"id": state.model_name, "object": "model", "created": state.created, "owned_by": "pyllama90a"}


