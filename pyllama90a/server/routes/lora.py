"""llama-server's /lora-adapters: GET lists the adapters loaded with --lora (id, path, default scale); POST
[{"id", "scale"}, ...] sets the default scales of those named, for requests queued from then on. A request's
own `lora` field (protocol/requests.py) overrides the defaults for it. The POST body is read as a request's `lora` is:
its errors name lora[i].field, its unknown fields are named (X-Ignored-Fields) or refused (--unknown-fields)."""
from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from ..errors import APIError
from ..generation import ignored_fields
from ..protocol import openapi as doc
from ..protocol.base import ProtocolModel, parse
from ..protocol.body import read_json
from ..protocol.requests import LoraScale, lora_pairs
from ..state import ServerState
from .family import Family, State

router = Family()


class LoraDefaults(ProtocolModel):
    """POST /lora-adapters' body (a JSON list), as the `lora` field its items are named under."""
    lora: list[LoraScale]


def adapter_list(state: ServerState) -> list[dict[str, Any]]:
    engine = state.engine
    return [{"id": info.id, "path": str(info.path), "scale": scale}
            for info, scale in zip(engine.model.lora, engine.lora.defaults, strict=True)]


@router.serve("GET", "/lora-adapters", doc=doc.fixed(
    "The LoRA adapters loaded (--lora) with their default scales",
    {200: doc.json_body("one entry per adapter, by id", doc.LORA_ADAPTERS), **doc.errors(401, 503)}))
async def lora_adapters(state: State) -> list[dict[str, Any]]:
    return adapter_list(state)


@router.serve("POST", "/lora-adapters", doc=doc.list_of(
    "Set the default scales of the adapters named (others keep theirs) for requests from now on", LoraScale,
    {200: doc.json_body("done", doc.SUCCESS), **doc.errors(400, 401, 413, 503)}))
async def set_lora_adapters(request: Request, state: State) -> JSONResponse:
    body = await read_json(request, state.limits.max_request_bytes, state.executors.parse)
    if not isinstance(body, list):
        raise APIError(400, 'the body must be a list of {"id": ..., "scale": ...} objects', param="lora")
    defaults, ignored = parse(LoraDefaults, {"lora": body}, state.limits)
    state.engine.lora.set_defaults(lora_pairs(defaults.lora))  # (a bad id: LoraAdapterError, a 400)
    return JSONResponse({"success": True}, headers=ignored_fields(request, ignored))
