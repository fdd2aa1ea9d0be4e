"""OpenAI's Responses API: POST /v1/responses (also /responses, as llama-server serves it), GET and DELETE
/v1/responses/{id} of a stored response. A request is read by protocol/openai_responses.py onto the chat path
(its messages, tools and constraint go through prepare_chat and the engine as a chat's do) and answered by
responses/openai_responses.py; stored responses live in the server's bounded ResponseStore (--responses-store)."""
from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import Response

from ..errors import APIError
from ..generation import generate
from ..protocol import openapi as doc
from ..protocol.body import read_request
from ..protocol.openai_responses import RESPONSES_INPUTS, ResponsesRequest, ResponsesTurn, in_input
from ..responses.openai import Shape
from ..responses.openai_responses import ResponseShape
from ..state import ServerState
from .family import Family, State

router = Family()

EVENTS = "server-sent events (`event: <type>` and `data:`), response.created first and response.completed last"


@router.serve("POST", "/v1/responses", also_at=("/responses",), inputs=RESPONSES_INPUTS,
              doc=doc.generation("Response (OpenAI's Responses API)", ResponsesRequest, doc.RESPONSE, EVENTS))
async def create_response(request: Request, state: State) -> Response:
    turn: ResponsesTurn
    turn, ignored = await read_request(request, state.limits, ResponsesRequest, state.response_store,
                                       state.engine.model, pool=state.executors.parse)

    def shape_for(ident: str, prompts: list[list[int]], settings: dict[str, Any]) -> Shape:
        return ResponseShape("resp_" + ident.partition("-")[2], state.model_name, turn, store=state.response_store,
                             **settings)
    with in_input():  # (what the template or the tokenizer refuses is in input and instructions)
        return await generate(state, request, turn.generation, ignored, chat=True, shape_for=shape_for)


def _not_found(state: ServerState, response_id: str) -> APIError:
    return APIError(404, f"No response with id '{response_id[:80]}' is stored here (this server keeps the last "
                         f"{state.response_store.limit} stored responses in memory, --responses-store)",
                    param="response_id", code="not_found")


@router.serve("GET", "/v1/responses/{response_id}", doc=doc.fixed("A stored response", {
    200: doc.json_body("the response as it was answered", doc.RESPONSE), **doc.errors(401, 404, 503)}))
async def get_response(response_id: str, state: State) -> dict[str, Any]:
    stored = state.response_store.get(response_id)
    if stored is None:
        raise _not_found(state, response_id)
    return stored.response


@router.serve("DELETE", "/v1/responses/{response_id}", doc=doc.fixed("Forget a stored response", {
    200: doc.json_body("the response is forgotten", doc.DELETED_RESPONSE), **doc.errors(401, 404, 503)}))
async def delete_response(response_id: str, state: State) -> dict[str, Any]:
    if not state.response_store.delete(response_id):
        raise _not_found(state, response_id)
    return {"id": response_id, "object": "response.deleted", "deleted": True}
