"""OpenAI request bodies to engine arguments, with OpenAI's 400 errors for anything malformed.

Known fields of the wrong type or out of range name the field in the error's `param`; so do fields that would
change the output but are not implemented (refused_fields.py). Fields that change nothing are accepted
(refused_fields.HARMLESS_FIELDS). Any other field, top-level or of a chat message, is unknown: with
Limits.unknown_fields "warn" the request is served and the parsed request lists them (`ignored`, sent back in
the X-Ignored-Fields header), with "reject" it is a 400 naming them. A few llama.cpp extensions are
implemented: top_k, min_p, repeat_penalty, ignore_eos.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote

from ..chat_template import Messages, normalize_messages
from ..constrained import Constraint, ConstraintError, constraint_from
from ..core import GenerationRequest
from ..errors import InvalidArgumentError
from ..sampling import SamplingParams
from ..toolcalls import Tools, check_tool_choice, check_tools
from .errors import APIError
from .refused_fields import (CHAT_ONLY_FIELDS, HARMLESS_FIELDS, HARMLESS_MESSAGE_FIELDS, MESSAGE_FIELDS, REQUEST_FIELDS,
                             refused_field)


def _bad(param: str, message: str) -> APIError:
    return APIError(400, message, param=param)


MISSING = object()

COMPLETIONS_MAX_TOKENS_DEFAULT = 16  # OpenAI's, for /v1/completions

UNKNOWN_FIELDS_MODES = ("warn", "reject")


@dataclass(frozen=True)
class Limits:
    """The server's bounds on a request (flags of `python -m pyllama90a.server`)."""
    max_tokens_default: int = 1024  # a chat request's max_tokens when it gives none
    max_tokens_limit: int = 32768   # the most max_tokens (max_completion_tokens) a request may ask for
    max_request_bytes: int = 16 * 2**20  # the largest body (a 128K-token prompt as JSON text is a few MiB)
    unknown_fields: str = "warn"    # fields known nowhere here: "warn" (served, named in a header) or "reject" (400)

    def __post_init__(self) -> None:
        if self.unknown_fields not in UNKNOWN_FIELDS_MODES:
            raise ValueError(f"unknown_fields must be one of {', '.join(UNKNOWN_FIELDS_MODES)}, "
                             f"got {self.unknown_fields!r}")


# the fields each route implements; with refused_fields.py's REQUEST_FIELDS (generation routes only) and
# HARMLESS_FIELDS they are the known ones, and every other field of a request is unknown
_GENERATION_FIELDS = frozenset({
    "model", "n", "max_tokens", "max_completion_tokens", "stream", "stream_options", "temperature", "top_p", "top_k",
    "min_p", "repeat_penalty", "frequency_penalty", "presence_penalty", "seed", "stop", "ignore_eos",
    "response_format", "grammar", "json_schema", "logit_bias"})
COMPLETION_FIELDS = (_GENERATION_FIELDS | {"prompt", "logprobs"} | REQUEST_FIELDS.keys() | CHAT_ONLY_FIELDS.keys()
                     | HARMLESS_FIELDS)
CHAT_FIELDS = (_GENERATION_FIELDS | {"messages", "logprobs", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls",
                                     "chat_template_kwargs"} | REQUEST_FIELDS.keys() | HARMLESS_FIELDS)
CHAT_MESSAGE_FIELDS = (frozenset({"role", "content", "tool_calls", "tool_call_id", "name"}) | MESSAGE_FIELDS.keys()
                       | HARMLESS_MESSAGE_FIELDS)
MAX_N = 128  # OpenAI's limit on choices per request
EMBEDDING_FIELDS = frozenset({"model", "input", "content", "encoding_format", "dimensions"}) | HARMLESS_FIELDS

IGNORED_HEADER = "X-Ignored-Fields"
_SHOWN_NAMES, _SHOWN_NAME_CHARS = 20, 64  # bounds on the names one header, log line or error message carries


def _unknown(body: dict, known: frozenset[str], prefix: str = "") -> list[str]:
    """The names of `body`'s unknown fields, in the request's order."""
    return [prefix + name for name in body if name not in known]


def _settle_unknown(names: list[str], limits: Limits) -> list[str]:
    """The unknown fields of a request (in its order) as the sorted list it reports; a 400 in "reject" mode."""
    if names and limits.unknown_fields == "reject":
        raise APIError(400, f"unknown request field(s): {shown_names(sorted(names))} (this server's "
                            "--unknown-fields is 'reject'; check the spelling, or send only fields it implements)",
                       param=names[0][:200], code="unknown_field")
    return sorted(names)


def shown_names(names: list[str]) -> str:
    """'a, b, c' for a header, a log line or an error message: each name percent-encoded where it is not plain
    ASCII (a header holds no control or non-Latin-1 characters, and a comma inside a name would read as two)
    and cut short, and at most 20 of them: a request cannot make a header larger than a client accepts."""
    shown = []
    for name in names[:_SHOWN_NAMES]:
        text = quote(name, safe="[]")
        if len(text) > _SHOWN_NAME_CHARS:  # cut, and not inside a %XX
            text = re.sub(r"%[0-9A-F]?$", "", text[:_SHOWN_NAME_CHARS]) + "..."
        shown.append(text)
    if len(names) > _SHOWN_NAMES:
        shown.append(f"...({len(names) - _SHOWN_NAMES} more)")
    return ", ".join(shown)


def _shown(value: Any) -> str:
    """repr(value), cut short: an error message does not echo a megabyte of the request back."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _number(body: dict, name: str, default: float, lo: float, hi: float) -> float:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _bad(name, f"'{name}' must be a number, got {_shown(value)}")
    if not lo <= value <= hi:
        raise _bad(name, f"'{name}' must be between {lo} and {hi}, got {_shown(value)}")
    return float(value)


def _integer(body: dict, name: str, default: int | None, lo: int, hi: int) -> int | None:
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(name, f"'{name}' must be an integer, got {_shown(value)}")
    if not lo <= value <= hi:
        raise _bad(name, f"'{name}' must be between {lo} and {hi}, got {_shown(value)}")
    return value


def _boolean(body: dict, name: str, default: bool) -> bool:
    value = body.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise _bad(name, f"'{name}' must be a boolean, got {_shown(value)}")
    return value


def _check_unused(body: dict) -> None:
    """Fields that change nothing here are still checked for their type: a wrong one is a client's bug."""
    for name, kind, label in (("user", str, "a string"), ("metadata", dict, "an object"), ("store", bool, "a boolean"),
                              ("service_tier", str, "a string")):
        value = body.get(name)
        if value is not None and not isinstance(value, kind):
            raise _bad(name, f"'{name}' must be {label}, got {_shown(value)}")


def _stops(body: dict) -> tuple[str, ...]:
    """The stop strings, less empty ones: OpenAI's API takes "" and means nothing by it, while a
    GenerationRequest refuses it (core/request.py)."""
    value = body.get("stop")
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or len(stops) > 16 or not all(isinstance(s, str) for s in stops):
        raise _bad("stop", "'stop' must be a string or a list of at most 16 strings")
    return tuple(s for s in stops if s)


@dataclass
class Generation:
    """What both completion routes hand to the engine: the checked GenerationRequest (its constraint, for a
    chat, the response format: tools add theirs when the chat is prepared) and how to serve it."""
    request: GenerationRequest
    stream: bool
    include_usage: bool          # stream_options.include_usage: a last chunk with the usage
    n: int = 1                   # choices: n generations of the same prompt, in parallel slots
    prompt: Any = None           # str or list of token ids (completions)
    messages: Messages | None = None  # (chat)
    tools: Tools | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None  # None: the chat template's capability (chat.prepare_chat)
    template_kwargs: dict[str, Any] | None = None  # chat_template_kwargs: extra template variables
    ignored: list[str] = field(default_factory=list)  # unknown fields, sorted (served: --unknown-fields warn)


def _constraint(body: dict) -> Constraint | None:
    """The output constraint a request asks for: OpenAI's response_format, or llama.cpp's grammar (GBNF) or
    json_schema; "" and {} mean none, as in llama.cpp's server. A bad one is a 400 naming its field."""
    grammar, schema = body.get("grammar"), body.get("json_schema")
    if grammar is not None and not isinstance(grammar, str):
        raise _bad("grammar", f"'grammar' must be a GBNF grammar as a string, got {_shown(grammar)}")
    if schema is not None and not isinstance(schema, dict):
        raise _bad("json_schema", f"'json_schema' must be a JSON schema object, got {_shown(schema)}")
    fields = {"response_format": body.get("response_format"), "grammar": grammar or None, "json_schema": schema or None}
    given = [name for name, value in fields.items() if value is not None]
    if len(given) > 1:
        raise _bad(given[1], f"give at most one of response_format, grammar and json_schema, got {', '.join(given)}")
    if not given:
        return None
    try:
        return constraint_from(**{given[0]: fields[given[0]]})
    except ConstraintError as e:
        raise _bad(given[0], str(e)) from None


def _check_model(body: dict) -> None:
    """'model' may name anything (the one loaded model answers), but when given it is a string."""
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise _bad("model", f"'model' must be a string, got {_shown(model)}")


def _refuse_unimplemented(body: dict, fields: dict = REQUEST_FIELDS, prefix: str = "") -> None:
    refused = refused_field(body, fields)
    if refused is not None:
        raise _bad(prefix + refused[0], refused[1])


def _max_tokens(body: dict, default: int, limit: int) -> int:
    """max_completion_tokens (OpenAI's newer name) or max_tokens, in [1, limit]; both are checked when both are
    given, and the newer one wins."""
    legacy = _integer(body, "max_tokens", None, 1, limit)
    newer = _integer(body, "max_completion_tokens", None, 1, limit)
    return newer if newer is not None else legacy if legacy is not None else default


def _common(body: Any, max_tokens_default: int, limits: Limits) -> Generation:
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    _check_model(body)
    n = _integer(body, "n", None, 1, MAX_N) or 1
    _refuse_unimplemented(body)
    _check_unused(body)
    constraint = _constraint(body)
    logit_bias = body.get("logit_bias")
    if logit_bias is not None and not (isinstance(logit_bias, dict) and all(
            re.fullmatch(r"[0-9]{1,12}", k) and isinstance(v, (int, float)) and not isinstance(v, bool)
            and -100 <= v <= 100 for k, v in logit_bias.items())):
        raise _bad("logit_bias", "'logit_bias' must be an object mapping token ids to biases in [-100, 100]")
    ignore_eos = _boolean(body, "ignore_eos", False)
    max_tokens = _max_tokens(body, min(max_tokens_default, limits.max_tokens_limit), limits.max_tokens_limit)
    stream = _boolean(body, "stream", False)
    options = body.get("stream_options")
    options = {} if options is None else options
    if not isinstance(options, dict):
        raise _bad("stream_options", "'stream_options' must be an object")
    include_usage = _boolean(options, "include_usage", False)
    temperature = _number(body, "temperature", 1.0, 0.0, 2.0)
    sampling = {
        "temperature": temperature,
        "top_p": _number(body, "top_p", 1.0, 0.0, 1.0),
        "top_k": _integer(body, "top_k", 40, 0, 1 << 30),
        "min_p": _number(body, "min_p", 0.05, 0.0, 1.0),
        "repeat_penalty": _number(body, "repeat_penalty", 1.0, 1e-6, 100.0),
        "frequency_penalty": _number(body, "frequency_penalty", 0.0, -2.0, 2.0),
        "presence_penalty": _number(body, "presence_penalty", 0.0, -2.0, 2.0),
        "seed": _integer(body, "seed", None, -(2**63), 2**64 - 1),
    }
    if sampling["seed"] is not None:
        sampling["seed"] %= 0xFFFFFFFF  # llama.cpp seeds are 32-bit; 0xFFFFFFFF itself means "random"
    try:
        request = GenerationRequest(max_tokens, _stops(body), SamplingParams(**sampling), constraint,  # type: ignore[arg-type]
                                    logit_bias or None, ignore_eos=ignore_eos)
    except InvalidArgumentError as e:  # (ignore_eos with a constraint)
        raise APIError(400, str(e), param=e.param) from None
    return Generation(request, stream, include_usage, n)


def completion_request(body: Any, limits: Limits) -> Generation:
    """POST /v1/completions. One prompt: a string, token ids, or a list holding one of those."""
    gen = _common(body, COMPLETIONS_MAX_TOKENS_DEFAULT, limits)
    prompt = body.get("prompt", MISSING)
    if prompt is MISSING or prompt is None:
        raise _bad("prompt", "'prompt' is required")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, list):
        if not prompt or not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            raise _bad("prompt", "'prompt' must be a string, a list of token ids, or a list with one of those "
                                 "(several prompts per request are not supported)")
    elif not isinstance(prompt, str) or not prompt:
        raise _bad("prompt", "'prompt' must be a non-empty string or a list of token ids")
    gen.prompt = prompt
    _refuse_unimplemented(body, CHAT_ONLY_FIELDS)
    gen.request = replace(gen.request, logprobs=_integer(body, "logprobs", None, 0, 5))
    gen.ignored = _settle_unknown(_unknown(body, COMPLETION_FIELDS), limits)
    return gen


def _message(m: Any, index: int) -> None:
    """A chat message, checked for what this server refuses (normalize_messages checks the rest)."""
    where = f"messages[{index}]"
    if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not m["role"]:
        raise _bad(where, "each message must be an object with a string 'role'")
    _refuse_unimplemented(m, MESSAGE_FIELDS, f"{where}.")
    if m.get("name") is not None and m["role"] != "tool":  # (a tool result's name is the function's)
        raise _bad(f"{where}.name", "'name' is supported on tool messages only (a chat template drops the "
                                    "names of other messages)")


def _tools(body: dict, gen: Generation) -> None:
    """tools, tool_choice, parallel_tool_calls and chat_template_kwargs, checked into `gen`."""
    try:
        gen.tools = check_tools(body.get("tools")) or None
    except InvalidArgumentError as e:
        raise _bad("tools", str(e)) from None
    tool_choice = body.get("tool_choice")
    if not gen.tools and tool_choice not in (None, "none"):  # (OpenAI's answer too: nothing to choose from)
        raise _bad("tool_choice", "'tool_choice' needs a non-empty 'tools' list (only 'none' is allowed without)")
    try:
        choice = check_tool_choice(tool_choice, gen.tools or [])
    except InvalidArgumentError as e:
        raise _bad("tool_choice", str(e)) from None
    gen.tool_choice = {"type": "function", "function": {"name": choice.name}} if choice.name else choice.mode
    gen.parallel_tool_calls = None if body.get("parallel_tool_calls") is None else \
        _boolean(body, "parallel_tool_calls", True)
    kwargs = body.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise _bad("chat_template_kwargs", "'chat_template_kwargs' must be an object of template variables")
    gen.template_kwargs = kwargs or None


def chat_messages(body: dict) -> tuple[Messages, list[str]]:
    """A chat request's messages, checked and normalized, and the unknown fields of the messages."""
    messages = body.get("messages", MISSING)
    if messages is MISSING or messages is None:
        raise _bad("messages", "'messages' is required")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", "'messages' must be a non-empty list")
    unknown: list[str] = []
    for i, m in enumerate(messages):
        _message(m, i)
        unknown += _unknown(m, CHAT_MESSAGE_FIELDS, f"messages[{i}].")
    try:
        return normalize_messages(messages), unknown
    except InvalidArgumentError as e:
        raise _bad(e.param or "messages", str(e)) from None


def chat_request(body: Any, limits: Limits) -> Generation:
    """POST /v1/chat/completions."""
    gen = _common(body, limits.max_tokens_default, limits)
    gen.messages, unknown = chat_messages(body)
    unknown = _unknown(body, CHAT_FIELDS) + unknown
    _tools(body, gen)
    if _boolean(body, "logprobs", False):
        gen.request = replace(gen.request, logprobs=_integer(body, "top_logprobs", 0, 0, 20))
    elif body.get("top_logprobs") is not None:
        raise _bad("top_logprobs", "'top_logprobs' needs 'logprobs': true")
    gen.ignored = _settle_unknown(unknown, limits)
    return gen


MAX_EMBEDDING_INPUTS = 2048  # OpenAI's limit; also bounds the work one request can ask for


@dataclass
class EmbeddingRequest:
    inputs: list[str | list[int]]
    base64: bool
    ignored: list[str] = field(default_factory=list)  # unknown fields, sorted (served: --unknown-fields warn)


def _token_ids(value: Any) -> bool:
    return (isinstance(value, list) and bool(value)
            and all(isinstance(t, int) and not isinstance(t, bool) for t in value))


def _embedding_inputs(value: Any, name: str) -> list[str | list[int]]:
    """OpenAI's input forms: a string, a list of strings, a list of token ids, a list of token-id lists (one
    form per request, as OpenAI takes them)."""
    if isinstance(value, str) and value:
        return [value]
    if _token_ids(value):
        return [value]
    if isinstance(value, list) and value:
        if all(isinstance(v, str) and v for v in value):
            return list(value)
        if all(_token_ids(v) for v in value):
            return list(value)
    raise _bad(name, f"'{name}' must be a non-empty string, a list of non-empty strings, a list of token ids, or a "
                     f"list of non-empty lists of token ids (one of these forms, not a mix)")


def embedding_request(body: Any, limits: Limits | None = None) -> EmbeddingRequest:
    """POST /v1/embeddings: `input` in any of OpenAI's forms, or llama-server's `content` instead."""
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    _check_model(body)
    _check_unused(body)
    given = [name for name in ("input", "content") if name in body]
    if len(given) > 1:
        raise _bad("content", "give 'input' or llama-server's 'content', not both")
    if not given or body[given[0]] is None:
        raise _bad("input", "'input' is required")
    inputs = _embedding_inputs(body[given[0]], given[0])
    if len(inputs) > MAX_EMBEDDING_INPUTS:
        raise _bad(given[0], f"'{given[0]}' may hold at most {MAX_EMBEDDING_INPUTS} inputs, got {len(inputs)}")
    if body.get("dimensions") is not None:  # shorter vectors would be a different answer: not silently the full one
        raise _bad("dimensions", "'dimensions' is not supported: embeddings have the model's size")
    encoding = body.get("encoding_format", "float")
    if encoding not in ("float", "base64"):
        raise _bad("encoding_format", "'encoding_format' must be 'float' or 'base64'")
    return EmbeddingRequest(inputs, encoding == "base64",
                            _settle_unknown(_unknown(body, EMBEDDING_FIELDS), limits or Limits()))
