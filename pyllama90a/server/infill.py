"""llama-server's POST /infill body to a /completion request: input_prefix and input_suffix (required strings),
input_extra (a list of {"filename", "text"} chunks) and prompt (a string, the start of the middle) become the
FIM prompt's tokens (pyllama90a/fim.py); every other field is /completion's, read by native_requests.py."""
from __future__ import annotations

from typing import Any

from ..fim import infill_prompt
from ..model import Model
from .api_requests import MISSING, Limits, _bad, _settle_unknown, _unknown
from .native_requests import NativeCompletion, _object, native_completion_request, prompt_tokenizer

INFILL_FIELDS = frozenset({"input_prefix", "input_suffix", "input_extra", "prompt"})
CHUNK_FIELDS = frozenset({"filename", "text"})


def _chunk_unknowns(extra: Any) -> list[str]:
    """The unknown fields of input_extra's chunks, as input_extra[i].name (their shape is checked by fim.py)."""
    if not isinstance(extra, list):
        return []
    return [name for i, chunk in enumerate(extra) if isinstance(chunk, dict)
            for name in _unknown(chunk, CHUNK_FIELDS, f"input_extra[{i}].")]


def infill_request(body: Any, limits: Limits, model: Model) -> NativeCompletion:
    """POST /infill. Run in a worker thread: the texts are tokenized here."""
    body = _object(body)
    for name in ("input_prefix", "input_suffix"):
        if body.get(name, MISSING) is MISSING:
            raise _bad(name, f"'{name}' is required: a string (it may be empty)")
    extra = body.get("input_extra")
    prompt = body.get("prompt")
    tokens = infill_prompt(model, body["input_prefix"], body["input_suffix"],
                           input_extra=() if extra is None else extra, prompt="" if prompt is None else prompt)
    rest = {k: v for k, v in body.items() if k not in INFILL_FIELDS}
    native = native_completion_request({**rest, "prompt": tokens}, limits, prompt_tokenizer(model))
    native.gen.ignored = sorted({*native.gen.ignored, *_settle_unknown(_chunk_unknowns(extra), limits)})
    return native
