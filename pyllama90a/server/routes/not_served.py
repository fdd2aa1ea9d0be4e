"""llama-server's routes of features this server does not have, each answered 404 (code not_supported) naming the
feature, rather than a bare "Not Found" a client reads as a wrong URL (a 4xx: the project's answers to what a
client asks are never 5xx): MCP servers and built-in tools (/tools), the
multi-model router (/models/load, /models/unload) and Vertex AI's prediction route (/predict). Images are no route:
their request fields are refused where they are sent (image_url and input_image content parts, image_data,
multimodal_data: a 400 naming the field)."""
from __future__ import annotations

from typing import NoReturn

from fastapi.responses import Response

from ..errors import APIError
from ..protocol import openapi as doc
from .family import Family

router = Family()


def _not_served(feature: str) -> NoReturn:
    raise APIError(404, f"{feature} is not served by this server (docs/server.md, 'Not served')",
                   code="not_supported")


def _doc(summary: str) -> doc.Doc:
    return doc.fixed(f"{summary}: not served (404 naming the feature)", doc.errors(401, 404, 503))


TOOLS, ROUTER = "llama-server's tools (MCP servers and built-in tools)", "the multi-model router"


@router.serve("GET", "/tools", doc=_doc("MCP servers and built-in tools"))
async def tools_list() -> Response:
    _not_served(TOOLS)


@router.serve("POST", "/tools", doc=_doc("Call an MCP or built-in tool"))
async def tools_call() -> Response:
    _not_served(TOOLS)


@router.serve("POST", "/models/load", doc=_doc("Load a model (router)"))
async def models_load() -> Response:
    _not_served(ROUTER + " (one model is served: the one /v1/models names)")


@router.serve("POST", "/models/unload", doc=_doc("Unload a model (router)"))
async def models_unload() -> Response:
    _not_served(ROUTER + " (one model is served: the one /v1/models names)")


@router.serve("POST", "/predict", doc=_doc("Vertex AI prediction"))
async def vertex_predict() -> Response:
    _not_served("Vertex AI's prediction route (/predict, instances)")
