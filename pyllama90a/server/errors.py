"""The one funnel from exceptions to HTTP answers in OpenAI's error shape, {"error": {"message", "type", "param",
"code"}} (with llama-server's types where it has its own: authentication_error, exceed_context_size_error and
its numbers), or on the routes that declare it Anthropic's, {"type": "error", "error": {"type", "message"}}:
`ANSWERS` maps a library exception class to its status, type and code, resolved along the class hierarchy (the
most specific entry wins), and `answer` makes the APIError for an exception raised in a route
or handed back by the engine in the middle of a generation. Which request input an answer's `param` names,
when the raiser named none, is the serving route's declared `RouteInputs` (routes/family.py)."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import (
    BusyError,
    ChatTemplateError,
    ClosedError,
    ContextOverflowError,
    EngineStoppedError,
    InfillUnsupportedError,
    InvalidArgumentError,
    LlamaError,
    LoraAdapterError,
    QueueFullError,
    StateFileError,
    UnsupportedChatTemplateError,
)

# how a route's errors are answered (its RouteInputs say): OpenAI's shape, or Anthropic's (/v1/messages)
ErrorShape = Literal["openai", "anthropic"]
# Anthropic's error type of each status the server answers (others: invalid_request_error, or api_error for 5xx)
ANTHROPIC_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error",
                   413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error"}


class APIError(Exception):
    """An error answered in OpenAI's shape, {"error": {"message", "type", "param", "code"}}, or Anthropic's."""

    def __init__(self, status: int, message: str, *, type: str = "invalid_request_error",  # noqa: A002
                 param: str | None = None, code: str | None = None, headers: Mapping[str, str] | None = None,
                 fields: Mapping[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = dict(headers or {})
        self.fields = dict(fields or {})  # more facts of the error, beside OpenAI's four (llama-server's numbers)

    def body(self, shape: ErrorShape = "openai") -> dict[str, Any]:
        """The answer's body in OpenAI's shape, or Anthropic's (its type from the status; the message names the
        field where it does not say it already)."""
        if shape == "anthropic":
            message = self.message if self.param is None or self.param in self.message else (
                f"{self.message} ({self.param})")
            kind = ANTHROPIC_TYPES.get(self.status, "api_error" if self.status >= 500 else "invalid_request_error")
            return {"type": "error", "error": {"type": kind, "message": message}}
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code,
                          **self.fields}}


@dataclass(frozen=True)
class RouteInputs:
    """What a route's errors name when the raiser named no field: the route's prompt (what does not fit the
    context) and what the template and tokenizer were given (a completion's may be any field: none)."""
    prompt: str | None = None
    rendered: str | None = None
    errors: ErrorShape = "openai"  # the shape its errors are answered in (APIError.body)


NO_INPUTS = RouteInputs()
CHAT_INPUTS, COMPLETION_INPUTS = RouteInputs("messages", "messages"), RouteInputs("prompt", None)
EMBEDDING_INPUTS = RouteInputs("input", "input")
ANTHROPIC_INPUTS = RouteInputs("messages", "messages", errors="anthropic")

# the ASGI scope's entry that carries the serving route's inputs (app.py's middleware sets it from the route's
# declaration), for the answers made below the app: a stream's error event (generation.py)
INPUTS_KEY = "pyllama90a.route_inputs"


def route_inputs(scope: Mapping[str, Any]) -> RouteInputs:
    """The inputs of the route that serves the request of `scope` (NO_INPUTS for a path no route declares)."""
    inputs = scope.get(INPUTS_KEY)
    return inputs if isinstance(inputs, RouteInputs) else NO_INPUTS

# how an answer's param is found: from the exception and the route's inputs
ParamRule = Callable[[BaseException, RouteInputs], "str | None"]
# the error's facts beyond OpenAI's four fields, from the exception
FieldsRule = Callable[[BaseException], Mapping[str, Any]]


def _raiser_or_rendered(exc: BaseException, inputs: RouteInputs) -> str | None:
    return getattr(exc, "param", None) or inputs.rendered


def _no_fields(exc: BaseException) -> Mapping[str, Any]:
    return {}


def _context_numbers(exc: BaseException) -> Mapping[str, Any]:
    """llama-server's exceed_context_size_error numbers: the prompt's tokens and the slot's context, where the
    raiser knew them."""
    return {name: value for name in ("n_prompt_tokens", "n_ctx")
            if (value := getattr(exc, name, None)) is not None}


@dataclass(frozen=True)
class Answer:
    status: int
    type: str = "invalid_request_error"
    code: str | None = None
    param: ParamRule = _raiser_or_rendered
    message: str = "{}"  # str.format'ed with the exception's text
    headers: Mapping[str, str] = field(default_factory=dict)
    fields: FieldsRule = _no_fields


ANSWERS: dict[type[BaseException], Answer] = {
    QueueFullError: Answer(429, "rate_limit_error", "rate_limit_exceeded", message="{}; retry shortly",
                           headers={"Retry-After": "1"}),
    EngineStoppedError: Answer(503, "server_error", "engine_stopped", message="the server cannot generate: {}"),
    ClosedError: Answer(503, "server_error", "server_shutting_down", message="the server is shutting down"),
    BusyError: Answer(409, code="slot_busy"),  # a slot file action on a generating slot
    StateFileError: Answer(400, code="bad_state_file", param=lambda exc, inputs: "filename"),
    # (llama-server's type, with its numbers; OpenAI's code)
    ContextOverflowError: Answer(400, "exceed_context_size_error", "context_length_exceeded",
                                 param=lambda exc, inputs: inputs.prompt, fields=_context_numbers),
    UnsupportedChatTemplateError: Answer(400, code="chat_template_unsupported", param=lambda exc, inputs: "messages"),
    ChatTemplateError: Answer(400, code="chat_template_error", param=lambda exc, inputs: "messages"),
    InfillUnsupportedError: Answer(400, code="infill_not_supported"),  # /infill on a model without FIM tokens
    LoraAdapterError: Answer(400, code="invalid_lora", param=lambda exc, inputs: "lora"),  # an id not loaded, a scale
    InvalidArgumentError: Answer(400),  # the request's own doing, found while it was served
    LlamaError: Answer(500, "server_error", message="generation failed: {}"),
}


def answer(exc: BaseException, inputs: RouteInputs = NO_INPUTS) -> APIError:
    """The APIError for `exc` raised by a route whose request inputs are `inputs` (an APIError is its own
    answer); one whose class has no entry is a 500."""
    if isinstance(exc, APIError):
        return exc
    entry = next((ANSWERS[c] for c in type(exc).__mro__ if c in ANSWERS), None)
    if entry is None:
        return APIError(500, "internal server error", type="server_error")
    return APIError(entry.status, entry.message.format(exc), type=entry.type, code=entry.code,
                    param=entry.param(exc, inputs), headers=entry.headers, fields=entry.fields(exc))
