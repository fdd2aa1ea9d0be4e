"""The OpenAPI description of the routes (FastAPI serves it at /openapi.json): request bodies with the fields
and ranges api_requests.py accepts, and every response with its status and shape.

The routes parse their bodies themselves (request_body.py, api_requests.py: bounded, strict, errors in
OpenAI's shape), so FastAPI cannot derive these schemas; they are written here for clients and for
property-based testing (schemathesis generates requests from them and checks the answers against them).
"""
from __future__ import annotations

from typing import Any

from ..core.request import MAX_TOP_LOGPROBS
from .api_requests import IGNORED_HEADER, MAX_EMBEDDING_INPUTS, MAX_N, Limits

Schema = dict[str, Any]


def _nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def _number(lo: float, hi: float) -> Schema:
    return _nullable({"type": "number", "minimum": lo, "maximum": hi})


def _integer(lo: int, hi: int) -> Schema:
    return _nullable({"type": "integer", "minimum": lo, "maximum": hi})


ERROR: Schema = {
    "type": "object", "required": ["error"],
    "properties": {"error": {
        "type": "object", "required": ["message", "type", "param", "code"],
        "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                       "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}}}

USAGE: Schema = {"type": "object", "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
                 "properties": {k: {"type": "integer", "minimum": 0}
                                for k in ("prompt_tokens", "completion_tokens", "total_tokens")}}

TIMINGS: Schema = {"type": "object", "description": "llama-server's: prompt_n, prompt_ms, predicted_n, predicted_ms, "
                                     "and their per-token and per-second rates",
                   "properties": {k: {"type": "number", "minimum": 0} for k in (
                       "prompt_n", "prompt_ms", "prompt_per_token_ms", "prompt_per_second", "predicted_n",
                       "predicted_ms", "predicted_per_token_ms", "predicted_per_second")}}

FINISH_REASON: Schema = {"enum": ["stop", "length", "tool_calls", None]}

# what the fields refused by refused_fields.py may be: only their no-op values
NO_OP_FIELDS: dict[str, Schema] = {
    "functions": _nullable({"type": "array", "maxItems": 0}),
}

_FUNCTION_NAME: Schema = {"type": "string", "pattern": "^[A-Za-z0-9_.\\-]{1,64}$"}
# tool calling (pyllama90a/chat.py, toolcalls/): a required or named call is constrained to the schema
TOOL_FIELDS: dict[str, Schema] = {
    "tools": _nullable({"type": "array", "items": {
        "type": "object", "required": ["type", "function"],
        "properties": {"type": {"const": "function"}, "function": {
            "type": "object", "required": ["name"],
            "properties": {"name": _FUNCTION_NAME, "description": {"type": "string"},
                           "parameters": {"type": "object"}, "strict": _nullable({"type": "boolean"})}}}}}),
    "tool_choice": _nullable({"anyOf": [{"enum": ["none", "auto", "required"]}, {
        "type": "object", "required": ["type", "function"],
        "properties": {"type": {"const": "function"},
                       "function": {"type": "object", "required": ["name"], "properties": {"name": _FUNCTION_NAME}}}}]}),
    "parallel_tool_calls": _nullable({"type": "boolean"}),
    "chat_template_kwargs": _nullable({"type": "object", "description": "extra variables of the Jinja chat template"}),
}

# structured output (pyllama90a/constrained): the shapes; a schema or grammar that does not compile is a 400 too
CONSTRAINT_FIELDS: dict[str, Schema] = {
    "response_format": _nullable({"type": "object", "required": ["type"], "additionalProperties": False,
                                  "properties": {"type": {"enum": ["text", "json_object", "json_schema"]},
                                                 "json_schema": {"type": "object"}, "schema": {"type": "object"}}}),
    "grammar": _nullable({"type": "string", "description": "a GBNF grammar (llama.cpp's extension)"}),
    "json_schema": _nullable({"type": "object", "description": "llama.cpp's extension: the output's JSON schema"}),
    "logit_bias": _nullable({"type": "object", "propertyNames": {"pattern": "^[0-9]{1,12}$"},
                             "additionalProperties": {"type": "number", "minimum": -100, "maximum": 100}}),
}


def _generation_fields(limits: Limits) -> dict[str, Schema]:
    max_tokens = _integer(1, limits.max_tokens_limit)
    return {
        "model": _nullable({"type": "string", "description": "any name: the one loaded model answers"}),
        "max_tokens": max_tokens,
        "max_completion_tokens": max_tokens,
        "temperature": _number(0.0, 2.0),
        "top_p": _number(0.0, 1.0),
        "top_k": _integer(0, 1 << 30),
        "min_p": _number(0.0, 1.0),
        "repeat_penalty": _number(1e-6, 100.0),
        "frequency_penalty": _number(-2.0, 2.0),
        "presence_penalty": _number(-2.0, 2.0),
        "seed": _integer(-(2**63), 2**64 - 1),
        "stop": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}, "maxItems": 16},
                           {"type": "null"}]},
        "stream": _nullable({"type": "boolean"}),
        "stream_options": _nullable({"type": "object",
                                     "properties": {"include_usage": _nullable({"type": "boolean"})}}),
        "n": _integer(1, MAX_N),
        "ignore_eos": _nullable({"type": "boolean"}),
        "user": _nullable({"type": "string"}),
        **NO_OP_FIELDS,
        **CONSTRAINT_FIELDS,
    }


def _completion_request(limits: Limits) -> Schema:
    tokens: Schema = {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}
    prompt = {"anyOf": [{"type": "string", "minLength": 1}, tokens,
                        {"type": "array", "items": {"anyOf": [{"type": "string", "minLength": 1}, tokens]},
                         "minItems": 1, "maxItems": 1}]}
    return {"type": "object", "required": ["prompt"],
            "properties": {**_generation_fields(limits), "prompt": prompt, "logprobs": _integer(0, 5),
                           "best_of": _integer(1, 1), "echo": _nullable({"const": False}),
                           "suffix": _nullable({"type": "string", "maxLength": 0})}}


_TOOL_CALL: Schema = {"type": "object", "required": ["function"],
                      "properties": {"id": {"type": "string"}, "type": {"const": "function"},
                                     "function": {"type": "object", "required": ["name", "arguments"],
                                                  "properties": {"name": {"type": "string"},
                                                                 "arguments": {"type": "string"}}}}}


_PART: Schema = {"type": "object", "required": ["type", "text"],
                 "properties": {"type": {"const": "text"}, "text": {"type": "string"}}}
_MESSAGES: Schema = {"type": "array", "minItems": 1, "items": {
    "type": "object", "required": ["role"],
    "properties": {"role": {"type": "string", "minLength": 1},
                   "content": {"anyOf": [{"type": "string"}, {"type": "array", "items": _PART}, {"type": "null"}]},
                   "name": _nullable({"type": "string"}),
                   "tool_call_id": _nullable({"type": "string"}),
                   "tool_calls": _nullable({"type": "array", "items": _TOOL_CALL})}}}


def _chat_request(limits: Limits) -> Schema:
    return {"type": "object", "required": ["messages"],
            "properties": {**_generation_fields(limits), **TOOL_FIELDS, "messages": _MESSAGES,
                           "logprobs": _nullable({"type": "boolean"}), "top_logprobs": _integer(0, 20)}}


APPLY_TEMPLATE_REQUEST: Schema = {"type": "object", "required": ["messages"], "properties": {
    "model": _nullable({"type": "string"}), "messages": _MESSAGES, **TOOL_FIELDS}}


_TOKEN_IDS: Schema = {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1}
_EMBEDDING_INPUT: Schema = {"anyOf": [
    {"type": "string", "minLength": 1},
    {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1, "maxItems": MAX_EMBEDDING_INPUTS},
    _TOKEN_IDS, {"type": "array", "items": _TOKEN_IDS, "minItems": 1, "maxItems": MAX_EMBEDDING_INPUTS}]}
EMBEDDING_REQUEST: Schema = {
    "type": "object", "oneOf": [{"required": ["input"]}, {"required": ["content"]}],
    "properties": {"model": _nullable({"type": "string"}),
                   "input": {**_EMBEDDING_INPUT, "description": "texts or token ids, one form per request"},
                   "content": {**_EMBEDDING_INPUT, "description": "llama-server's name for input"},
                   "encoding_format": _nullable({"enum": ["float", "base64"]}),
                   "dimensions": {"type": "null", "description": "only null: shorter embeddings are not supported"}}}


def _native_completion_request(limits: Limits) -> Schema:
    """llama-server's /completion: /v1/completions' fields, n_predict, n_probs, return_tokens, a mixed prompt."""
    schema = _completion_request(limits)
    mixed = {"type": "array", "minItems": 1,
             "items": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "minLength": 1}]}}
    schema["properties"] = {
        **schema["properties"], "prompt": {"anyOf": [schema["properties"]["prompt"], mixed]},
        "n": _integer(1, 1), "return_tokens": _nullable({"type": "boolean"}),
        "n_predict": _nullable({"anyOf": [{"const": -1}, {"type": "integer", "minimum": 1,
                                                          "maximum": limits.max_tokens_limit}]}),
        "n_probs": _integer(0, MAX_TOP_LOGPROBS)}
    return schema


def _infill_request(limits: Limits) -> Schema:
    """llama-server's /infill: /completion's fields, with a prompt that is the start of the middle (text)."""
    schema = _native_completion_request(limits)
    chunk = {"type": "object", "required": ["text"],
             "properties": {"filename": {"type": "string"}, "text": {"type": "string"}}}
    schema["required"] = ["input_prefix", "input_suffix"]
    schema["properties"] = {
        **schema["properties"], "input_prefix": {"type": "string", "description": "the text before the gap"},
        "input_suffix": {"type": "string", "description": "the text after the gap"},
        "input_extra": _nullable({"type": "array", "items": chunk,
                                  "description": "other files' chunks, put before the FIM prefix"}),
        "prompt": _nullable({"type": "string", "description": "the start of the middle, after the FIM middle token"})}
    return schema


_NATIVE_COMPLETION: Schema = {
    "type": "object", "required": ["content", "stop"],
    "properties": {"content": {"type": "string"}, "tokens": {"type": "array", "items": {"type": "integer"}},
                   "stop": {"type": "boolean"}, "stop_type": {"enum": ["eos", "word", "limit"]},
                   "stopping_word": {"type": "string"}, "tokens_predicted": {"type": "integer"},
                   "tokens_evaluated": {"type": "integer"}, "timings": {"type": "object"},
                   "generation_settings": {"type": "object"}, "prompt": {"type": "string"},
                   "truncated": {"type": "boolean"}}}

TOKENIZE_REQUEST: Schema = {
    "type": "object", "required": ["content"],
    "properties": {"content": {"type": "string"}, "add_special": _nullable({"type": "boolean"}),
                   "parse_special": _nullable({"type": "boolean"}), "with_pieces": _nullable({"type": "boolean"})}}
TOKENIZE: Schema = {"type": "object", "required": ["tokens"], "properties": {"tokens": {"type": "array", "items": {
    "anyOf": [{"type": "integer"}, {"type": "object", "required": ["id", "piece"], "properties": {
        "id": {"type": "integer"},
        "piece": {"anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "integer"}}]}}}]}}}}
DETOKENIZE_REQUEST: Schema = {"type": "object", "required": ["tokens"], "properties": {
    "tokens": {"type": "array", "items": {"type": "integer", "minimum": 0}}}}
DETOKENIZE: Schema = {"type": "object", "required": ["content"], "properties": {"content": {"type": "string"}}}
PROMPT: Schema = {"type": "object", "required": ["prompt"], "properties": {"prompt": {"type": "string"}}}
SLOT_ACTION: Schema = {"type": "object", "required": ["id_slot"], "properties": {
    "id_slot": {"type": "integer"}, "filename": {"type": "string"}, "n_saved": {"type": "integer"},
    "n_written": {"type": "integer"}, "n_restored": {"type": "integer"}, "n_read": {"type": "integer"},
    "n_erased": {"type": "integer"}, "timings": {"type": "object"}}}
PROPS: Schema = {"type": "object", "required": ["default_generation_settings", "total_slots", "model_path",
                                                "chat_template"],
                 "properties": {"default_generation_settings": {"type": "object"}, "total_slots": {"type": "integer"},
                                "model_path": {"type": "string"}, "chat_template": {"type": "string"}}}
SLOTS: Schema = {"type": "array", "items": {"type": "object", "required": ["id", "n_ctx", "is_processing"],
                                            "properties": {"id": {"type": "integer"}, "n_ctx": {"type": "integer"},
                                                           "is_processing": {"type": "boolean"}}}}
NATIVE_EMBEDDINGS: Schema = {"type": "array", "items": {
    "type": "object", "required": ["index", "embedding"],
    "properties": {"index": {"type": "integer"}, "embedding": {"type": "array"}}}}


def _object(obj: str | list[str], choice: Schema) -> Schema:
    return {"type": "object", "required": ["id", "object", "created", "model", "choices"],
            "properties": {"id": {"type": "string"}, "object": {"enum": [obj] if isinstance(obj, str) else obj},
                           "created": {"type": "integer"}, "model": {"type": "string"},
                           "choices": {"type": "array", "items": choice}, "usage": USAGE,
                           "system_fingerprint": {"type": "string"}, "timings": TIMINGS}}


COMPLETION = _object("text_completion", {
    "type": "object", "required": ["index", "text", "finish_reason", "logprobs"],
    "properties": {"index": {"type": "integer"}, "text": {"type": "string"}, "finish_reason": FINISH_REASON,
                   "logprobs": {"type": ["object", "null"]}}})

CHAT_COMPLETION = _object("chat.completion", {
    "type": "object", "required": ["index", "message", "finish_reason"],
    "properties": {"index": {"type": "integer"}, "finish_reason": FINISH_REASON,
                   "message": {"type": "object", "required": ["role", "content"],
                               "properties": {"role": {"const": "assistant"},
                                              "content": {"type": ["string", "null"]},
                                              "tool_calls": {"type": "array", "items": _TOOL_CALL}}},
                   "logprobs": {"type": ["object", "null"]}}})

EMBEDDINGS: Schema = {
    "type": "object", "required": ["object", "data", "model", "usage"],
    "properties": {"object": {"const": "list"}, "model": {"type": "string"},
                   "data": {"type": "array", "items": {
                       "type": "object", "required": ["object", "index", "embedding"],
                       "properties": {"object": {"const": "embedding"}, "index": {"type": "integer"},
                                      "embedding": {"anyOf": [{"type": "array", "items": {"type": "number"}},
                                                              {"type": "string"}]}}}},
                   "usage": {"type": "object"}}}

MODEL: Schema = {"type": "object", "required": ["id", "object", "created", "owned_by"],
                 "properties": {"id": {"type": "string"}, "object": {"const": "model"},
                                "created": {"type": "integer"}, "owned_by": {"type": "string"}}}

HEALTH: Schema = {"type": "object", "required": ["status", "slots_busy", "slots_idle", "queue_depth"],
                  "properties": {"status": {"enum": ["ok", "shutting_down", "error"]}, "reason": {"type": "string"},
                                 "slots_busy": {"type": "integer"}, "slots_idle": {"type": "integer"},
                                 "queue_depth": {"type": "integer"}}}


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


def _request_body(schema: Schema, limits: Limits) -> dict[str, Any]:
    return {"requestBody": {"required": True, "description": _unknown_fields(limits),
                            "content": {"application/json": {"schema": schema}}}}


def _errors(*statuses: int) -> dict[int, dict[str, Any]]:
    why = {400: "malformed body, wrong type or range, unimplemented or (--unknown-fields reject) unknown field "
                "(param names it)",
           401: "wrong or missing API key (--api-key: 'Authorization: Bearer KEY' or 'X-Api-Key: KEY')",
           404: "no such model or route",
           413: "body larger than --max-request-bytes", 429: "queue full (Retry-After)",
           409: "the slot is generating (code slot_busy)",
           500: "a bug of this server", 501: "not enabled on this server (slot files: --slot-save-path)",
           503: "shutting down, or the engine stopped (code says which)"}
    return {s: _json(why[s], ERROR) for s in statuses}


def _generation_route(summary: str, request: Schema, answer: Schema, limits: Limits) -> dict[str, Any]:
    ok = _json("the whole answer, or with stream=true server-sent events ending in `data: [DONE]`", answer)
    ok.update(_ok_headers(limits))
    # (OpenAPI 3.1: the schema of an event stream describes one event; data is a JSON chunk, or [DONE] last)
    ok["content"]["text/event-stream"] = {"schema": {"type": "object", "required": ["data"],
                                                     "properties": {"data": {"type": "string"}}}}
    return {"summary": summary, "openapi_extra": _request_body(request, limits),
            "responses": {200: ok, **_errors(400, 401, 413, 429, 500, 503)}}


def _native_route(summary: str, request: Schema, answer: Schema, limits: Limits) -> dict[str, Any]:
    return {"summary": summary, "openapi_extra": _request_body(request, limits),
            "responses": {200: {**_json(summary, answer), **_ok_headers(limits)}, **_errors(400, 401, 413, 500, 503)}}


def route_docs(limits: Limits) -> dict[str, dict[str, Any]]:
    """Keyword arguments of each route's decorator (summary, openapi_extra, responses)."""
    return {
        "completions": _generation_route("Text completion", _completion_request(limits), COMPLETION, limits),
        "chat": _generation_route("Chat completion", _chat_request(limits), CHAT_COMPLETION, limits),
        "embeddings": {"summary": "Embeddings", "openapi_extra": _request_body(EMBEDDING_REQUEST, limits),
                       "responses": {200: {**_json("one vector per input", EMBEDDINGS), **_ok_headers(limits)},
                                     **_errors(400, 401, 413, 500, 503)}},
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
                                "timings; a stream ends without [DONE]", _native_completion_request(limits),
                                _NATIVE_COMPLETION, limits)},
        "infill": {
            **_generation_route("llama-server's fill-in-the-middle completion: a /completion of the model's FIM "
                                "prompt (a model without FIM prefix, suffix and middle tokens answers 400, code "
                                "infill_not_supported)", _infill_request(limits), _NATIVE_COMPLETION, limits)},
        "native_embeddings": {"summary": "llama-server's embeddings (also at /embedding): one pooled vector per "
                                         "input, in a list", "openapi_extra": _request_body(EMBEDDING_REQUEST, limits),
                              "responses": {200: {**_json("one vector per input", NATIVE_EMBEDDINGS),
                                                  **_ok_headers(limits)}, **_errors(400, 401, 413, 500, 503)}},
        "tokenize": _native_route("llama-server's tokenizer (no BOS and special tokens parsed unless asked)",
                                  TOKENIZE_REQUEST, TOKENIZE, limits),
        "detokenize": _native_route("Token ids to text", DETOKENIZE_REQUEST, DETOKENIZE, limits),
        "apply_template": _native_route("The prompt the chat template renders for a chat request's messages",
                                        APPLY_TEMPLATE_REQUEST, PROMPT, limits),
        "props": {"summary": "llama-server's server properties", "responses": {
            200: _json("the default generation settings, slots, model path, chat template", PROPS),
            **_errors(401, 503)}},
        "slot_action": {
            "summary": "llama-server's slot files: ?action=save|restore (body {filename}, a plain name in "
                       "--slot-save-path) or erase; the slot must be idle",
            "openapi_extra": {"requestBody": {"required": False, "content": {"application/json": {
                "schema": {"type": "object", "properties": {"filename": {"type": "string"}}}}}}},
            "responses": {200: _json("what was saved, restored or erased", SLOT_ACTION),
                          **_errors(400, 401, 409, 413, 501, 503)}},
        "slots": {"summary": "The slots and whether each is generating (fail_on_no_slot=1: 503 when none is free)",
                  "responses": {200: _json("one entry per slot", SLOTS), **_errors(400, 401, 503)}},
        "metrics": {"summary": "Prometheus metrics", "responses": {
            200: {"description": "Prometheus text format", "content": {"text/plain": {"schema": {"type": "string"}}}}}},
    }
