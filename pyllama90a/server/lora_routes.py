"""llama-server's /lora-adapters: GET lists the adapters loaded with --lora (id, path, default scale); POST
[{"id", "scale"}, ...] sets the default scales of those named, for requests queued from then on. A request's
own `lora` field (protocol.py) overrides the defaults for it."""
from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request

from .errors import APIError
from .protocol import LoraScale, lora_pairs
from .protocol_base import parse
from .request_body import read_json
from .state import ServerState

PATHS = ("/lora-adapters",)


def adapter_list(state: ServerState) -> list[dict[str, Any]]:
    engine = state.engine
    return [{"id": info.id, "path": str(info.path), "scale": scale}
            for info, scale in zip(engine.model.lora, engine.lora.defaults, strict=True)]


def register(app: FastAPI, state: ServerState, docs: dict[str, dict[str, Any]]) -> None:
    """Add GET and POST /lora-adapters to `app` (server/openapi.py's `docs` describe them)."""

    @app.get(PATHS[0], **docs["lora_adapters"])
    async def lora_adapters() -> list[dict[str, Any]]:
        return adapter_list(state)

    @app.post(PATHS[0], **docs["set_lora_adapters"])
    async def set_lora_adapters(request: Request) -> dict[str, Any]:
        body = await read_json(request, state.limits.max_request_bytes, state.executors.parse)
        if not isinstance(body, list):
            raise APIError(400, 'the body must be a list of {"id": ..., "scale": ...} objects', param="lora")
        items = [parse(LoraScale, item, state.limits)[0] for item in body]
        state.engine.lora.set_defaults(lora_pairs(items))  # (a bad id or scale: LoraAdapterError, a 400)
        return {"success": True}
