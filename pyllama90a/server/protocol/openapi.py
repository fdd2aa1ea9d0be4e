"""The OpenAPI description of the routes (FastAPI serves it at /openapi.json): request bodies generated from
their protocol models (protocol.py), and every response with its status and shape, for clients and for
property-based testing (schemathesis generates requests from them and checks the answers against them).

The routes read their bodies themselves (request_body.py: bounded, strict JSON, errors in OpenAI's shape), so
each route's decorator is handed its request schema here rather than FastAPI deriving it from a parameter.
"""
from __future__ import annotations

from typing import Any

from . import requests as p
from .base import IGNORED_HEADER, LIMIT, Limits, ProtocolModel

Schema = dict[str, Any]


def request_schema(model: type[ProtocolModel], limits: Limits) -> Schema:
    """`model`'s JSON schema, self-contained (its nested models' definitions inlined: the document has no
    components) and with this server's --max-tokens-limit for LIMIT."""
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return resolve(defs[node["$ref"].rsplit("/", 1)[1]])
            return {k: limits.max_tokens_limit if v == LIMIT else resolve(v) for k, v in node.items()}
        return [resolve(v) for v in node] if isinstance(node, list) else node
    resolved: dict[str, Any] = resolve(schema)  # (a dict resolves to a dict)
    return resolved


def _obj(required: str, **properties: Any) -> Schema:
    """An object schema: its properties, those named in `required` (space-separated) required."""
    return {"type": "object", "required": required.split(), "properties": properties}


STR, INT, BOOL, OBJ = {"type": "string"}, {"type": "integer"}, {"type": "boolean"}, {"type": "object"}
ERROR = _obj("error", error=_obj("message type param code", message=STR, type=STR, param={"type": ["string", "null"]},
                                 code={"type": ["string", "null"]}))
USAGE = _obj("prompt_tokens completion_tokens total_tokens",
             **{k: {"type": "integer", "minimum": 0} for k in ("prompt_tokens", "completion_tokens", "total_tokens")})
TIMINGS: Schema = {"type": "object", "description": "llama-server's: prompt_n, prompt_ms, predicted_n, predicted_ms, "
                                     "and their per-token and per-second rates",
                   "properties": {k: {"type": "number", "minimum": 0} for k in (
                       "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_n",
                       "predicted_ms", "predicted_per_token_ms", "predicted_per_second")}}
FINISH_REASON: Schema = {"enum": ["stop", "length", "tool_calls", None]}
_TOOL_CALL = _obj("function", id=STR, type={"const": "function"},
                  function=_obj("name arguments", name=STR, arguments=STR))
_NATIVE_COMPLETION = _obj("content stop", content=STR, tokens={"type": "array", "items": INT}, stop=BOOL,
                          stop_type={"enum": ["eos", "word", "limit"]}, stopping_word=STR, tokens_predicted=INT,
                          tokens_evaluated=INT, timings=OBJ, generation_settings=OBJ, prompt=STR, truncated=BOOL)
TOKENIZE = _obj("tokens", tokens={"type": "array", "items": {"anyOf": [INT, _obj(
    "id piece", id=INT, piece={"anyOf": [STR, {"type": "array", "items": INT}]})]}})
DETOKENIZE, PROMPT = _obj("content", content=STR), _obj("prompt", prompt=STR)
SLOT_ACTION = _obj("id_slot", id_slot=INT, filename=STR, n_saved=INT, n_written=INT, n_restored=INT, n_read=INT,
                   n_erased=INT, timings=OBJ)
PROPS = _obj("default_generation_settings total_slots model_path chat_template", default_generation_settings=OBJ,
             total_slots=INT, model_path=STR, chat_template=STR)
SLOTS = {"type": "array", "items": _obj("id n_ctx is_processing", id=INT, n_ctx=INT, is_processing=BOOL)}
LORA_ADAPTERS = {"type": "array", "items": _obj("id path scale", id=INT, path=STR, scale={"type": "number"})}
NATIVE_EMBEDDINGS = {"type": "array", "items": _obj("index embedding", index=INT, embedding={"type": "array"})}


def _answer(obj: str, choice: Schema) -> Schema:
    return _obj("id object created model choices", id=STR, object={"enum": [obj]}, created=INT, model=STR,
                choices={"type": "array", "items": choice}, usage=USAGE, system_fingerprint=STR, timings=TIMINGS)


COMPLETION = _answer("text_completion", _obj("index text finish_reason logprobs", index=INT, text=STR,
                                             finish_reason=FINISH_REASON, logprobs={"type": ["object", "null"]}))
CHAT_COMPLETION = _answer("chat.completion", _obj(
    "index message finish_reason", index=INT, finish_reason=FINISH_REASON, logprobs={"type": ["object", "null"]},
    message=_obj("role content", role={"const": "assistant"}, content={"type": ["string", "null"]},
                 tool_calls={"type": "array", "items": _TOOL_CALL})))
EMBEDDINGS = _obj("object data model usage", object={"const": "list"}, model=STR, usage=OBJ, data={
    "type": "array", "items": _obj("object index embedding", object={"const": "embedding"}, index=INT, embedding={
        "anyOf": [{"type": "array", "items": {"type": "number"}}, STR]})})
MODEL = _obj("id object created owned_by", id=STR, object={"const": "model"}, created=INT, owned_by=STR)
HEALTH = _obj("status slots_busy slots_idle queue_depth", status={"enum": ["ok", "shutting_down", "error"]},
              reason=STR, slots_busy=INT, slots_idle=INT, queue_depth=INT,
              saturated={"type": "array", "items": STR, "description": "kinds of work whose threads are all busy"})


def _json(description: str, schema: Schema) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _unknown_fields(limits: Limits) -> str:
    """How the server treats request fields it does not know (--unknown-fields)."""
    if limits.unknown_fields == "reject":
        return "Fields this server does not know are refused with a 400 (code unknown_field) naming them."
    return (f"Fields this server does not know are ignored and named in the {IGNORED_HEADER} response header "
            "(and the server's log).")


def _ok_headers(limits: Limits) -> dict[str, Any]:
    if limits.unknown_fields == "reject":
        return {}
    return {"headers": {IGNORED_HEADER: {
        "description": "the request's unknown fields, which were ignored: sorted, comma-separated, percent-encoded "
                       "where not plain ASCII (a chat message's as messages[i].name); absent when there are none",
        "schema": {"type": "string"}}}}


def _request_body(model: type[ProtocolModel], limits: Limits) -> dict[str, Any]:
    return {"requestBody": {"required": True, "description": _unknown_fields(limits),
                            "content": {"application/json": {"schema": request_schema(model, limits)}}}}


def _errors(*statuses: int) -> dict[int, dict[str, Any]]:
    why = {400: "malformed body, wrong type or range, unimplemented or (--unknown-fields reject) unknown field "
                "(param names it)",
           401: "wrong or missing API key (--api-key: 'Authorization: Bearer KEY' or 'X-Api-Key: KEY')",
           404: "no such model or route",
           413: "body larger than --max-request-bytes",
           429: "queue full: the engine's or this kind of work's (--queue-size, --pool-queue-size; Retry-After)",
           409: "the slot is generating (code slot_busy)",
           500: "a bug of this server", 501: "not enabled on this server (slot files: --slot-save-path)",
           503: "shutting down, or the engine stopped (code says which)"}
    return {s: _json(why[s], ERROR) for s in statuses}


def _generation_route(summary: str, request: type[ProtocolModel], answer: Schema, limits: Limits) -> dict[str, Any]:
    ok = _json("the whole answer, or with stream=true server-sent events ending in `data: [DONE]`", answer)
    ok.update(_ok_headers(limits))
    # (OpenAPI 3.1: the schema of an event stream describes one event; data is a JSON chunk, or [DONE] last)
    ok["content"]["text/event-stream"] = {"schema": {"type": "object", "required": ["data"],
                                                     "properties": {"data": {"type": "string"}}}}
    return {"summary": summary, "openapi_extra": _request_body(request, limits),
            "responses": {200: ok, **_errors(400, 401, 413, 429, 500, 503)}}


def _native_route(summary: str, request: type[ProtocolModel], answer: Schema, limits: Limits) -> dict[str, Any]:
    return {"summary": summary, "openapi_extra": _request_body(request, limits),
            "responses": {200: {**_json(summary, answer), **_ok_headers(limits)},
                          **_errors(400, 401, 413, 429, 500, 503)}}


def route_docs(limits: Limits) -> dict[str, dict[str, Any]]:
    """Keyword arguments of each route's decorator (summary, openapi_extra, responses)."""
    return {
        "completions": _generation_route("Text completion", p.CompletionRequest, COMPLETION, limits),
        "chat": _generation_route("Chat completion", p.ChatRequest, CHAT_COMPLETION, limits),
        "embeddings": {"summary": "Embeddings", "openapi_extra": _request_body(p.EmbeddingRequest, limits),
                       "responses": {200: {**_json("one vector per input", EMBEDDINGS), **_ok_headers(limits)},
                                     **_errors(400, 401, 413, 429, 500, 503)}},
        "models": {"summary": "The served model", "responses": {
            200: _json("a list of one model", {"type": "object", "required": ["object", "data"],
                                               "properties": {"object": {"const": "list"},
                                                              "data": {"type": "array", "items": MODEL}}}),
            **_errors(401, 503)}},
        "model": {"summary": "One model", "responses": {200: _json("the model", MODEL), **_errors(401, 404, 503)}},
        "health": {"summary": "Liveness and load", "responses": {
            200: _json("serving", HEALTH), 503: _json("shutting down, or the engine stopped (reason)", HEALTH)}},
        "native_completion": {
            **_generation_route("llama-server's completion (also at /completions): content, tokens, stop_type, "
                                "timings; a stream ends without [DONE]", p.NativeCompletionRequest,
                                _NATIVE_COMPLETION, limits)},
        "infill": {
            **_generation_route("llama-server's fill-in-the-middle completion: a /completion of the model's FIM "
                                "prompt (a model without FIM prefix, suffix and middle tokens answers 400, code "
                                "infill_not_supported)", p.InfillRequest, _NATIVE_COMPLETION, limits)},
        "native_embeddings": {"summary": "llama-server's embeddings (also at /embedding): one pooled vector per "
                                         "input, in a list", "openapi_extra": _request_body(p.EmbeddingRequest, limits),
                              "responses": {200: {**_json("one vector per input", NATIVE_EMBEDDINGS),
                                                  **_ok_headers(limits)}, **_errors(400, 401, 413, 429, 500, 503)}},
        "tokenize": _native_route("llama-server's tokenizer (no BOS and special tokens parsed unless asked)",
                                  p.TokenizeRequest, TOKENIZE, limits),
        "detokenize": _native_route("Token ids to text", p.DetokenizeRequest, DETOKENIZE, limits),
        "apply_template": _native_route("The prompt the chat template renders for a chat request's messages",
                                        p.ApplyTemplateRequest, PROMPT, limits),
        "props": {"summary": "llama-server's server properties", "responses": {
            200: _json("the default generation settings, slots, model path, chat template", PROPS),
            **_errors(401, 429, 503)}},
        "slot_action": {
            "summary": "llama-server's slot files: ?action=save|restore (body {filename}, a plain name in "
                       "--slot-save-path) or erase; the slot must be idle",
            "openapi_extra": {"requestBody": {"required": False, "content": {"application/json": {
                "schema": {"type": "object", "properties": {"filename": {"type": "string"}}}}}}},
            "responses": {200: _json("what was saved, restored or erased", SLOT_ACTION),
                          **_errors(400, 401, 409, 413, 429, 501, 503)}},
        "slots": {"summary": "The slots and whether each is generating (fail_on_no_slot=1: 503 when none is free)",
                  "responses": {200: _json("one entry per slot", SLOTS), **_errors(400, 401, 503)}},
        "lora_adapters": {"summary": "The LoRA adapters loaded (--lora) with their default scales",
                          "responses": {200: _json("one entry per adapter, by id", LORA_ADAPTERS),
                                        **_errors(401, 503)}},
        "set_lora_adapters": {
            "summary": "Set the default scales of the adapters named (others keep theirs) for requests from now on",
            "openapi_extra": {"requestBody": {"required": True, "content": {"application/json": {
                "schema": {"type": "array", "items": request_schema(p.LoraScale, limits)}}}}},
            "responses": {200: _json("done", _obj("success", success=BOOL)), **_errors(400, 401, 413, 503)}},
        "metrics": {"summary": "Prometheus metrics", "responses": {
            200: {"description": "Prometheus text format", "content": {"text/plain": {"schema": {"type": "string"}}}},
            **_errors(401)}},
    }
