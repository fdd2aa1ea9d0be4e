"""POST /v1/embeddings' body (and llama-server's /embeddings): `input` in OpenAI's forms and llama.cpp's (token
ids and texts mixed, {"prompt_string"} and {"content"} objects), or llama-server's `content` instead."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, ValidationInfo, WithJsonSchema, model_validator

from .base import bad
from .refused_fields import EMBEDDING_FIELDS
from .requests import TOKENS, EmbeddingText, Harmless, one_input

MAX_EMBEDDING_INPUTS = 2048  # OpenAI's limit; also bounds the work one request can ask for


def _embedding_inputs(value: Any, info: ValidationInfo) -> list[EmbeddingText]:
    """OpenAI's forms (a string, a list of strings, token ids, a list of token-id lists) and llama.cpp's: ids and
    strings mixed in one input, several inputs of different forms, {"prompt_string"} and {"content"} objects. A
    list that holds a number is one input, as llama.cpp reads it."""
    several = isinstance(value, list) and not any(type(v) is int for v in value)
    inputs = [one_input(v) for v in value] if several else [one_input(value)]
    if not inputs or any(i is None for i in inputs):
        where = next((i for i, v in enumerate(inputs) if v is None), None) if several and inputs else None
        raise bad(f"'{info.field_name}' must be a non-empty string, token ids (ids and strings may mix), a "
                  "{\"prompt_string\"} or {\"content\": [text parts]} object, or a non-empty list of those",
                  *(() if where is None else (where,)))
    if len(inputs) > MAX_EMBEDDING_INPUTS:
        raise bad(f"'{info.field_name}' may hold at most {MAX_EMBEDDING_INPUTS} inputs, got {len(inputs)}")
    return [i for i in inputs if i is not None]


EmbeddingInput = Annotated[Any, AfterValidator(_embedding_inputs), WithJsonSchema({"anyOf": [
    {"type": "string", "minLength": 1}, TOKENS,
    {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1, "maxItems": MAX_EMBEDDING_INPUTS},
    {"type": "array", "items": TOKENS, "minItems": 1, "maxItems": MAX_EMBEDDING_INPUTS}]})]


class EmbeddingRequest(Harmless):
    """POST /v1/embeddings: `input` in any of OpenAI's forms, or llama-server's `content` instead."""
    model_config = ConfigDict(json_schema_extra={"oneOf": [{"required": ["input"]}, {"required": ["content"]}]})
    refused = EMBEDDING_FIELDS
    model: str | None = None
    input: EmbeddingInput = Field(None, description="texts or token ids, one form per request")
    content: EmbeddingInput = Field(None, description="llama-server's name for input")
    encoding_format: Literal["float", "base64"] = "float"

    @model_validator(mode="before")
    @classmethod
    def _one_input(cls, body: Any) -> Any:
        if isinstance(body, dict) and "input" in body and "content" in body:
            raise bad("give 'input' or llama-server's 'content', not both", "content")
        if isinstance(body, dict) and body.get("input", body.get("content")) is None:
            raise bad("'input' is required", "input")
        return body
