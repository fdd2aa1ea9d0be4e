"""The FastAPI application: the route families attached in one place (routes/: OpenAI's, also without the /v1
prefix as llama-server serves them; llama-server's; its slots and LoRA adapters; /health and /metrics), the
error funnel, the API key check and, with --cors-origins, CORS. What depends on the routes (which are public,
which /metrics names, which inputs an error names, the OpenAPI document) is derived from their declarations:
`ROUTES`."""
from __future__ import annotations

import hmac
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware

from ..errors import ClosedError, LlamaError
from .errors import INPUTS_KEY, APIError, answer, route_inputs
from .protocol.base import IGNORED_HEADER, Limits
from .routes import anthropic, llama_server, lora, not_served, openai, openai_responses, rerank, slots, status
from .routes.family import Access, Declared, RouteTable
from .state import CorsFlags, ServerState

__all__ = ["ServerState", "create_app"]

TITLE, OPENAPI_PATH = "pyllama90a", "/openapi.json"
DOCUMENT_VERSION = "0.1.0"  # (FastAPI's default, which the document has always said)
# the families, in the order of the document; FastAPI serves the OpenAPI document itself, answered without the
# API key (a client reads it before it has one)
ROUTES = RouteTable((status.router, openai.router, openai_responses.router, anthropic.router, llama_server.router,
                     slots.router, lora.router, rerank.router, not_served.router),
                    builtin=[Declared("GET", OPENAPI_PATH, None, access=Access.PUBLIC)])


class _App(FastAPI):
    """FastAPI whose OpenAPI document is made from the routes' declarations, for the served state's limits."""

    def openapi(self) -> dict[str, Any]:
        if not self.openapi_schema:
            self.openapi_schema = openapi_document(self.state.server.limits)
        return self.openapi_schema


def openapi_document(limits: Limits) -> dict[str, Any]:
    """The OpenAPI document of a server with `limits` (served at /openapi.json)."""
    return get_openapi(title=TITLE, version=DOCUMENT_VERSION, routes=ROUTES.documented(limits))


def create_app(state: ServerState) -> FastAPI:
    app = _App(title=TITLE, version=DOCUMENT_VERSION, docs_url=None, redoc_url=None, openapi_url=OPENAPI_PATH)
    app.state.server = state  # (the routes' `State` dependency)

    @app.exception_handler(APIError)
    @app.exception_handler(LlamaError)
    async def _answer(request: Request, exc: Exception) -> JSONResponse:
        error = answer(exc, route_inputs(request.scope))
        return JSONResponse(error.body(route_inputs(request.scope).errors), status_code=error.status,
                            headers=error.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = "not_found" if exc.status_code == 404 else None
        error = APIError(exc.status_code, str(exc.detail), code=code)
        return JSONResponse(error.body(route_inputs(request.scope).errors), status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def _server_bug(request: Request, exc: Exception) -> JSONResponse:
        # only a bug of this server gets here (request input is answered with 4xx before): Starlette re-raises
        # the exception after this response, and uvicorn logs its traceback
        return JSONResponse(APIError(500, "internal server error", type="server_error").body(
            route_inputs(request.scope).errors), status_code=500)

    app.add_middleware(_AuthAndCount, state=state)
    if state.cors_origins:  # added last, so outermost: a preflight is answered before the API key check
        app.add_middleware(_Cors, **cors_settings(state.cors_origins, state.cors))
    for family in ROUTES.families:
        app.include_router(family)
    return app


LOCALHOST_ORIGINS = r"https?://(localhost|127\.0\.0\.1|\[::1\])(:[0-9]+)?"


def cors_settings(origins: tuple[str, ...], flags: CorsFlags | None = None) -> dict[str, Any]:
    """CORSMiddleware's settings for --cors-origins: "*" (any origin), "localhost" (pages served from this
    machine, any port) and exact origins; and llama-server's --cors-methods, --cors-headers, --cors-credentials
    (off by default here: the API key is a header, which a page sends itself, not a cookie)."""
    flags = flags or CorsFlags()
    return {"allow_origins": [o for o in origins if o != "localhost"],
            "allow_origin_regex": LOCALHOST_ORIGINS if "localhost" in origins else None,
            "allow_methods": list(flags.methods), "allow_headers": list(flags.headers),
            "allow_credentials": flags.credentials,
            "expose_headers": [IGNORED_HEADER, "Retry-After"], "max_age": 600}


class _Cors(CORSMiddleware):
    """Starlette's CORS, whose preflight of an origin not allowed is answered as llama-server answers it: 200
    without Access-Control-Allow-Origin (the browser then refuses the page's request), not a 400."""

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code == 400 and not self.is_allowed_origin(request_headers["origin"]):
            headers = {k: v for k, v in response.headers.items()
                       if k.lower() not in ("access-control-allow-origin", "content-length", "content-type")}
            return PlainTextResponse("", status_code=200, headers=headers)
        return response


class _AuthAndCount:
    """ASGI middleware: the API key check on every route but the public ones, the 503 of a draining server, and
    the response counts of /metrics; it hands the route's error inputs on in the scope (errors.INPUTS_KEY).
    (Plain ASGI rather than Starlette's BaseHTTPMiddleware, which would hide a client's disconnect from the
    routes.)"""

    def __init__(self, app: Any, state: ServerState) -> None:
        self.app, self.state = app, state

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        route = path if path in ROUTES.metric_labels else "other"
        inputs = scope[INPUTS_KEY] = ROUTES.inputs(path)
        key = self.state.api_key
        public = path in (ROUTES.public_with_metrics if self.state.metrics_public else ROUTES.public)
        if key is not None and not public and not _authorized(Headers(scope=scope), key):
            response = JSONResponse(APIError(401, "Incorrect or missing API key (send 'Authorization: Bearer <key>' "
                                                  "or 'X-Api-Key: <key>')", type="authentication_error",
                                         code="invalid_api_key").body(inputs.errors),
                                    status_code=401)
            await response(scope, receive, send)
            self.state.responses[(route, 401)] += 1
            return
        if self.state.draining and path not in ROUTES.served_while_draining:  # a request on a kept-alive connection
            response = JSONResponse(answer(ClosedError("shutting down"), inputs).body(inputs.errors), status_code=503,
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
