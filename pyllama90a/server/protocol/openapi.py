"""What the OpenAPI document (FastAPI serves it at /openapi.json) says of a route: request bodies generated from
their protocol models (requests.py), and every response with its status and shape, for clients and for
property-based testing (schemathesis generates requests from them and checks the answers against them).

A route declares its entry beside it (routes/family.py) as a `Doc` made here: the entry for the server's
limits, which its request schema (--max-tokens-limit) and its unknown-fields note (--unknown-fields) depend
on. The routes read their bodies themselves (body.py: bounded, strict JSON, errors in OpenAI's shape), so
each entry carries its request schema rather than FastAPI deriving it from a parameter.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .base import IGNORED_HEADER, LIMIT, Limits, ProtocolModel

Schema = dict[str, Any]
# a route's entry for the server's limits: the keyword arguments FastAPI's route takes (summary, openapi_extra,
# responses)
Doc = Callable[[Limits], dict[str, Any]]


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
NATIVE_COMPLETION = _obj("content stop", content=STR, tokens={"type": "array", "items": INT}, stop=BOOL,
                         stop_type={"enum": ["eos", "word", "limit"]}, stopping_word=STR, tokens_predicted=INT,
                         tokens_evaluated=INT, timings=OBJ, generation_settings=OBJ, prompt=STR, truncated=BOOL)
# /completion's answer: one result, or a list of one per prompt when `prompt` is a list of prompts
NATIVE_COMPLETIONS = {"anyOf": [NATIVE_COMPLETION, {"type": "array", "items": NATIVE_COMPLETION}]}
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
_OUTPUT_ITEM = {"anyOf": [
    _obj("id type status role content", id=STR, type={"const": "message"}, status=STR, role={"const": "assistant"},
         content={"type": "array", "items": _obj("type text", type={"const": "output_text"}, text=STR)}),
    _obj("id type status call_id name arguments", id=STR, type={"const": "function_call"}, status=STR, call_id=STR,
         name=STR, arguments=STR),
    _obj("id type summary content", id=STR, type={"const": "reasoning"}, status=STR, summary={"type": "array"},
         content={"type": "array", "items": _obj("type text", type={"const": "reasoning_text"}, text=STR)})]}
RESPONSE = _obj("id object created_at status model output", id=STR, object={"const": "response"}, created_at=INT,
                status={"enum": ["completed", "incomplete", "in_progress"]}, model=STR,
                output={"type": "array", "items": _OUTPUT_ITEM}, incomplete_details={"type": ["object", "null"]},
                usage=_obj("input_tokens output_tokens total_tokens", input_tokens=INT, output_tokens=INT,
                           total_tokens=INT, input_tokens_details=_obj("cached_tokens", cached_tokens=INT),
                           output_tokens_details=_obj("reasoning_tokens", reasoning_tokens=INT)))
DELETED_RESPONSE = _obj("id object deleted", id=STR, object={"const": "response.deleted"}, deleted=BOOL)
MODEL = _obj("id object created owned_by", id=STR, object={"const": "model"}, created=INT, owned_by=STR,
             aliases={"type": "array", "items": STR}, tags={"type": "array", "items": STR})
INPUT_TOKENS = _obj("input_tokens", input_tokens=INT)
MODELS = {"type": "object", "required": ["object", "data"],
          "properties": {"object": {"const": "list"}, "data": {"type": "array", "items": MODEL},
                         "models": {"type": "array", "items": _obj(
                             "name model capabilities", name=STR, model=STR, type=STR,
                             tags={"type": "array", "items": STR}, capabilities={"type": "array", "items": STR},
                             details=OBJ)}}}
SUCCESS = _obj("success", success=BOOL)
SLOT_FILE_BODY = {"requestBody": {"required": False, "content": {"application/json": {
    "schema": {"type": "object", "properties": {"filename": {"type": "string"}}}}}}}
HEALTH = _obj("status slots_busy slots_idle queue_depth", status={"enum": ["ok", "shutting_down", "error"]},
              reason=STR, slots_busy=INT, slots_idle=INT, queue_depth=INT,
              saturated={"type": "array", "items": STR, "description": "kinds of work whose threads are all busy"})


def json_body(description: str, schema: Schema) -> dict[str, Any]:
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


def errors(*statuses: int) -> dict[int, dict[str, Any]]:
    why = {400: "malformed body, wrong type or range, unimplemented or (--unknown-fields reject) unknown field "
                "(param names it)",
           401: "wrong or missing API key (--api-key: 'Authorization: Bearer KEY' or 'X-Api-Key: KEY')",
           404: "no such model or route",
           413: "body larger than --max-request-bytes",
           429: "queue full: the engine's or this kind of work's (--queue-size, --pool-queue-size; Retry-After)",
           409: "the slot is generating (code slot_busy)",
           500: "a bug of this server", 501: "not enabled on this server (slot files: --slot-save-path)",
           503: "shutting down, or the engine stopped (code says which)"}
    return {s: json_body(why[s], ERROR) for s in statuses}


def generation(summary: str, request: type[ProtocolModel], answer: Schema,
               events: str = "server-sent events ending in `data: [DONE]`") -> Doc:
    """A generation route's entry: its answer whole or as server-sent `events`."""
    def doc(limits: Limits) -> dict[str, Any]:
        ok = json_body(f"the whole answer, or with stream=true {events}", answer)
        ok.update(_ok_headers(limits))
        # (OpenAPI 3.1: the schema of an event stream describes one event; data is a JSON chunk, or [DONE] last)
        ok["content"]["text/event-stream"] = {"schema": {"type": "object", "required": ["data"],
                                                         "properties": {"data": {"type": "string"}}}}
        return {"summary": summary, "openapi_extra": _request_body(request, limits),
                "responses": {200: ok, **errors(400, 401, 413, 429, 500, 503)}}
    return doc


def reading(summary: str, request: type[ProtocolModel], answer: Schema, description: str | None = None) -> Doc:
    """The entry of a route that reads a protocol request and answers JSON (`description`: its 200's; by
    default the summary)."""
    def doc(limits: Limits) -> dict[str, Any]:
        return {"summary": summary, "openapi_extra": _request_body(request, limits),
                "responses": {200: {**json_body(description or summary, answer), **_ok_headers(limits)},
                              **errors(400, 401, 413, 429, 500, 503)}}
    return doc


def fixed(summary: str, responses: dict[int, Any], openapi_extra: dict[str, Any] | None = None) -> Doc:
    """The entry of a route whose document depends on no limit."""
    extra = {} if openapi_extra is None else {"openapi_extra": openapi_extra}
    return lambda limits: {"summary": summary, **extra, "responses": responses}


ANTHROPIC_ERROR = _obj("type error", type={"const": "error"}, error=_obj("type message", type=STR, message=STR))
_ANTHROPIC_USAGE = _obj("input_tokens output_tokens", input_tokens=INT, output_tokens=INT,
                        cache_creation_input_tokens=INT, cache_read_input_tokens=INT)
ANTHROPIC_MESSAGE = _obj(
    "id type role model content stop_reason usage", id=STR, type={"const": "message"}, role={"const": "assistant"},
    model=STR, content={"type": "array", "items": _obj("type", type={"enum": ["thinking", "text", "tool_use"]},
                                                          thinking=STR, signature=STR, text=STR, id=STR, name=STR,
                                                          input=OBJ)},
    stop_reason={"enum": ["end_turn", "max_tokens", "stop_sequence", "tool_use"]},
    stop_sequence={"type": ["string", "null"]}, usage=_ANTHROPIC_USAGE)
INPUT_TOKENS = _obj("input_tokens", input_tokens=INT)


def anthropic(summary: str, request: type[ProtocolModel], answer: Schema, *, stream: bool = False) -> Doc:
    """An Anthropic route's entry: its errors in Anthropic's shape; with `stream`, its answer as events too."""
    def doc(limits: Limits) -> dict[str, Any]:
        ok = {**json_body(summary, answer), **_ok_headers(limits)}
        if stream:  # (`event: <type>` and `data: <JSON with that type>` per event)
            ok["content"]["text/event-stream"] = {"schema": {"type": "object", "required": ["event", "data"],
                                                             "properties": {"event": STR, "data": STR}}}
        fails = {s: json_body(e["description"], ANTHROPIC_ERROR) for s, e in errors(400, 401, 413, 429, 500,
                                                                                  503).items()}
        return {"summary": summary, "openapi_extra": _request_body(request, limits), "responses": {200: ok, **fails}}
    return doc


def list_of(summary: str, item: type[ProtocolModel], responses: dict[int, Any]) -> Doc:
    """The entry of a route whose body is a JSON list of `item`s."""
    return lambda limits: {"summary": summary, "openapi_extra": {"requestBody": {
        "required": True, "content": {"application/json": {"schema": {
            "type": "array", "items": request_schema(item, limits)}}}}}, "responses": responses}
