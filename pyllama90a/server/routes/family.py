"""One way to register a route: a `Family` (an API family's APIRouter) takes each route with its declaration,
beside the endpoint, once; `RouteTable` derives from the families the app attaches everything that depends on
the routes: the paths answered without the API key, those still served while the server drains, the paths
/metrics counts responses of by name, each path's error inputs and the OpenAPI document.

    @router.serve("POST", "/v1/chat/completions", also_at=("/chat/completions",), inputs=CHAT_INPUTS,
                  doc=openapi.generation("Chat completion", ChatRequest, openapi.CHAT_COMPLETION))
    async def chat_completions(request: Request, state: State) -> Response: ...

A route declares: its method and path; the paths that serve it too (the OpenAI routes without /v1, as
llama-server serves them; llama-server's aliases), left out of the document; its OpenAPI entry
(protocol/openapi.py's `Doc`, for the server's limits); which request inputs an error's `param` names when the
raiser named none (errors.RouteInputs); and who may call it (`Access`). Endpoints take the server's state as
the `State` dependency (the app's `state.server`), never from a closure.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Depends, Request
from fastapi.datastructures import Default, DefaultPlaceholder
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute

from ..errors import NO_INPUTS, RouteInputs
from ..protocol.base import Limits
from ..protocol.openapi import Doc
from ..state import ServerState


class Access(Enum):
    """Who may call a route when the server has an API key (--api-key)."""
    KEY = "key"  # only with the key, as every path no route declares
    PUBLIC = "public"  # anyone: what a load balancer or a client reads before it has a key
    # anyone with --metrics-public, else only with the key (it shows per-route counts and the KV settings:
    # llama-server keeps its /metrics behind the key too)
    METRICS = "metrics"


@dataclass(frozen=True)
class Declared:
    """A route's facts, as its family declared them (`doc` None: a route FastAPI adds itself)."""
    method: str
    path: str
    doc: Doc | None
    also_at: tuple[str, ...] = ()
    inputs: RouteInputs = NO_INPUTS
    access: Access = Access.KEY

    @property
    def paths(self) -> tuple[str, ...]:
        return (self.path, *self.also_at)


async def server_state(request: Request) -> ServerState:
    """The state the app serves (create_app puts it in `app.state.server`)."""
    state: ServerState = request.app.state.server
    return state


State = Annotated[ServerState, Depends(server_state)]
JSON = Default(JSONResponse)  # (FastAPI's default response class)
Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])


class Family(APIRouter):
    """One API family's routes: an APIRouter whose routes are added with `serve`, each with its declaration."""

    def __init__(self) -> None:
        super().__init__()
        self.declared: list[Declared] = []

    def serve(self, method: Literal["GET", "POST", "DELETE"], path: str, *, doc: Doc, also_at: tuple[str, ...] = (),
              inputs: RouteInputs = NO_INPUTS, access: Access = Access.KEY,
              response_class: type[Response] | DefaultPlaceholder = JSON) -> Callable[[Endpoint], Endpoint]:
        """Add the decorated endpoint at `path` and `also_at` for `method`, with its declaration."""
        declared = Declared(method, path, doc, also_at, inputs, access)

        def add(endpoint: Endpoint) -> Endpoint:
            for served in declared.paths:
                self.add_api_route(served, endpoint, methods=[method], include_in_schema=served == path,
                                   response_class=response_class)
            self.declared.append(declared)
            return endpoint
        return add


class RouteTable:
    """The routes of `families` (and `builtin`: the routes FastAPI adds itself, such as its OpenAPI
    document's), by path, and what is derived from their declarations. A route of a family added without a
    declaration, or two declarations of one path that disagree on what the path-keyed tables say, is an
    error here, when the app's module is imported."""

    def __init__(self, families: Iterable[Family], builtin: Iterable[Declared] = ()) -> None:
        self.families = tuple(families)
        self.declared = (*builtin, *(d for family in self.families for d in family.declared))
        # (method, path) of every route served, aliases too
        self.served = frozenset((d.method, path) for d in self.declared for path in d.paths)
        self.by_path: dict[str, Declared] = {}
        for declared in self.declared:
            for path in declared.paths:
                known = self.by_path.setdefault(path, declared)
                if (known.inputs, known.access) != (declared.inputs, declared.access):
                    raise ValueError(f"{path}: its routes declare different inputs or access")
        undeclared = [r for family in self.families for r in family.routes
                      if not (isinstance(r, APIRoute) and {(m, r.path) for m in r.methods or ()} <= self.served)]
        if undeclared:
            raise ValueError(f"routes added without their declaration (Family.serve): {undeclared}")
        # /metrics counts the families' routes by path; a path with parameters, and FastAPI's own routes, as "other"
        self.metric_labels = frozenset(p for family in self.families for d in family.declared for p in d.paths
                                       if "{" not in p)
        self.public = self._paths(Access.PUBLIC)
        self.public_with_metrics = self._paths(Access.PUBLIC, Access.METRICS)
        # what a monitor reads stays served while the server drains (every route that may be public)
        self.served_while_draining = self.public_with_metrics

    def _paths(self, *access: Access) -> frozenset[str]:
        return frozenset(p for p, d in self.by_path.items() if d.access in access)

    def inputs(self, path: str) -> RouteInputs:
        declared = self.by_path.get(path)
        return NO_INPUTS if declared is None else declared.inputs

    def documented(self, limits: Limits) -> list[APIRoute]:
        """The documented routes, each with its declared OpenAPI entry for `limits` (FastAPI's get_openapi makes
        the document from them; the served routes stay the same for every server's limits)."""
        documented = []
        for family in self.families:
            for declared in family.declared:
                route = next(r for r in family.routes if isinstance(r, APIRoute) and r.path == declared.path
                             and declared.method in (r.methods or ()))
                assert declared.doc is not None  # (Family.serve takes one)
                documented.append(APIRoute(route.path, route.endpoint, methods=[declared.method],
                                           name=route.name, response_class=route.response_class,
                                           **declared.doc(limits)))
        return documented
