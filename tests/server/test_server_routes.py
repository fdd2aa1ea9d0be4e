"""One way to register a route (issue 35): each route of the app is declared once, by its family
(routes/family.py), and the tables that depend on the routes (the public paths, those served while draining,
the paths /metrics names, the error inputs, the OpenAPI document) are derived from those declarations.

The app is made in process on a random-weight synthetic model (no server process)."""
from __future__ import annotations

import json

import pytest
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from starlette.testclient import TestClient

import pyllama90a as pl
from pyllama90a.server import ServerState, create_app
from pyllama90a.server.app import OPENAPI_PATH, ROUTES, openapi_document
from pyllama90a.server.errors import (
    ANTHROPIC_INPUTS,
    CHAT_INPUTS,
    COMPLETION_INPUTS,
    EMBEDDING_INPUTS,
    NO_INPUTS,
    RouteInputs,
)
from pyllama90a.server.protocol import openapi as doc
from pyllama90a.server.protocol.base import Limits
from pyllama90a.server.routes.family import Access, Family, RouteTable
from pyllama90a.tools.synthetic import synthetic_model


@pytest.fixture(scope="module")
def app():
    engine = pl.BatchEngine(synthetic_model("tiny"), parallel=1, n_ctx=256, n_threads=1)
    yield create_app(ServerState(engine, "m", api_key="k"))
    engine.close()


def _served(routes: list) -> list[tuple[str, str]]:
    """(method, path) of every route `routes` serve, included routers' too (FastAPI keeps an included router
    as one entry since 0.13x, and copied its routes before)."""
    served = []
    for route in routes:
        included = getattr(route, "original_router", None)
        if isinstance(included, APIRouter):
            served += _served(included.routes)
        else:
            served += [(m, route.path) for m in sorted(route.methods) if m != "HEAD"]
    return served


def test_every_route_the_app_serves_is_declared(app: FastAPI) -> None:
    served = _served(app.routes)
    assert len(served) == len(set(served)) and ("POST", "/v1/chat/completions") in served
    assert set(served) == ROUTES.served
    # and each documented one is in the document, its aliases not
    documented = {(d.method, d.path) for f in ROUTES.families for d in f.declared}
    paths = openapi_document(Limits())["paths"]
    assert {(m.upper(), p.replace("{model_id}", "{model_id:path}")) for p, ms in paths.items() for m in ms} \
        == documented


def test_a_route_added_without_its_declaration_is_refused() -> None:
    family = Family()

    @family.serve("GET", "/declared", doc=doc.fixed("declared", {}))
    async def declared() -> None: ...

    @family.get("/undeclared")
    async def undeclared() -> None: ...

    with pytest.raises(ValueError, match="without their declaration"):
        RouteTable([family])
    family.routes[:] = [r for r in family.routes if isinstance(r, APIRoute) and r.path == "/declared"]
    assert RouteTable([family]).metric_labels == {"/declared"}


def test_two_declarations_of_one_path_must_agree() -> None:
    family = Family()

    @family.serve("GET", "/x", doc=doc.fixed("x", {}))
    async def get_x() -> None: ...

    @family.serve("POST", "/x", doc=doc.fixed("x", {}), access=Access.PUBLIC)
    async def post_x() -> None: ...

    with pytest.raises(ValueError, match="/x: its routes declare different"):
        RouteTable([family])


def test_the_derived_tables_are_the_servers() -> None:
    assert ROUTES.public == {"/health", OPENAPI_PATH}
    assert ROUTES.public_with_metrics == ROUTES.served_while_draining == {"/health", OPENAPI_PATH, "/metrics"}
    assert ROUTES.metric_labels == {
        "/health", "/metrics", "/v1/models", "/v1/completions", "/v1/chat/completions", "/v1/embeddings", "/models",
        "/chat/completions", "/completion", "/completions", "/infill", "/embeddings", "/embedding", "/tokenize",
        "/detokenize", "/apply-template", "/props", "/slots", "/lora-adapters", "/v1/responses", "/responses",
        "/v1/rerank", "/rerank", "/v1/reranking", "/reranking", "/tools", "/models/load", "/models/unload", "/predict",
        "/v1/messages", "/v1/messages/count_tokens", "/v1/chat/completions/input_tokens",
        "/chat/completions/input_tokens"}
    inputs = {p: d.inputs for p, d in ROUTES.by_path.items() if d.inputs != NO_INPUTS}
    assert inputs == {
        "/v1/chat/completions": CHAT_INPUTS, "/chat/completions": CHAT_INPUTS, "/apply-template": CHAT_INPUTS,
        "/v1/chat/completions/input_tokens": CHAT_INPUTS, "/chat/completions/input_tokens": CHAT_INPUTS,
        "/v1/completions": COMPLETION_INPUTS, "/completion": COMPLETION_INPUTS, "/completions": COMPLETION_INPUTS,
        "/v1/embeddings": EMBEDDING_INPUTS, "/embeddings": EMBEDDING_INPUTS, "/embedding": EMBEDDING_INPUTS,
        "/tokenize": RouteInputs("content", "content"), "/detokenize": RouteInputs("tokens", "tokens"),
        "/v1/responses": RouteInputs("input", "input"), "/responses": RouteInputs("input", "input"),
        **dict.fromkeys(("/v1/rerank", "/rerank", "/v1/reranking", "/reranking"),
                        RouteInputs("documents", "documents")),
        "/v1/messages": ANTHROPIC_INPUTS, "/v1/messages/count_tokens": ANTHROPIC_INPUTS}


def test_access_follows_the_declarations(app: FastAPI) -> None:
    """Without the key: the public routes answer, every other declared route and an unknown path are 401;
    a draining server still answers what a monitor reads, and names a route's input in its 503."""
    with TestClient(app) as client:
        for path in sorted(ROUTES.by_path):
            status = client.get(path.replace("{id_slot}", "0").replace("{model_id:path}", "m")).status_code
            assert (status != 401) == (path in ROUTES.public), path
        assert client.get("/nowhere").status_code == 401
        state = app.state.server
        state.draining = True
        try:
            assert client.get("/health").status_code == 503  # (its body says shutting_down)
            assert client.get("/metrics", headers={"X-Api-Key": "k"}).status_code == 200
            r = client.post("/chat/completions", headers={"X-Api-Key": "k"}, json={})
            assert r.status_code == 503 and r.headers["retry-after"] == "5"
            assert r.json()["error"]["param"] == "messages"
        finally:
            state.draining = False


def test_a_streams_error_event_names_the_routes_input() -> None:
    """The route's declared inputs travel with its request down to the stream's last event (generation.py):
    a chat stream ended by the engine's closing names `messages`, as the whole answer's 503 would."""
    engine = pl.BatchEngine(synthetic_model("tiny"), parallel=1, n_ctx=256, n_threads=1)
    try:
        with TestClient(create_app(ServerState(engine, "m"))) as client, client.stream(
                "POST", "/chat/completions", json={"messages": [{"role": "user", "content": "Hi"}], "stream": True,
                                                   "max_tokens": 200, "ignore_eos": True}) as r:
            assert r.status_code == 200
            events = []
            for line in r.iter_lines():
                if line:
                    events.append(line)
                    if len(events) == 2:
                        engine.close()  # (the request still generating gets an error chunk)
        assert events[-1] == "data: [DONE]"
        error = json.loads(events[-2][len("data: "):])["error"]
        assert error["code"] == "server_shutting_down" and error["param"] == "messages"
    finally:
        engine.close()
