"""The request body of OpenAI's Responses API (POST /v1/responses), converted onto the chat path: its `input`
items (messages, function_call, function_call_output: responses_items.py) and `instructions` become the chat's
Messages, its function tools and tool_choice the chat's Tools and ToolChoice, `text.format` the same constraint
response_format makes (core.constrained.constraint_from). A `previous_response_id` puts the stored
conversation (server/response_store.py) before this turn's input. `reasoning.effort` is the chat's reasoning
switch: "none" turns the template's thinking off (enable_thinking false), a level is the template's
`reasoning_effort` variable where it reads one (gpt-oss's), else a 400. What would change the output but is not
served (built-in tools, images and files, reasoning summaries, background runs, `include`d extras) is a 400
naming it.
"""
from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, SkipValidation, model_validator

from ...core.chat.messages import normalize_messages
from ...core.chat.template import compile_template
from ...core.constrained import constraint_from
from ...core.generation.request import GenerationRequest
from ...core.generation.sampling import SamplingParams
from ...core.toolcalls import NAME_PATTERN, check_tool_choice, check_tools
from ...errors import ChatTemplateError, InvalidArgumentError, about
from ..errors import APIError, RouteInputs, answer
from ..response_store import ResponseStore
from .base import Between, Limits, ProtocolModel, bad
from .refused_fields import NoOp
from .requests import AnswerOptions, Generation, Harmless, MaxTokens
from .responses_items import Item, chat_messages, input_items

BUILTIN = "this server serves function tools only (no hosted web search, file search, computer use, code " \
          "interpreter, image generation or MCP)"


def _none_or(*wanted: Any) -> NoOp:
    return lambda value: value is None or any(value == w and type(value) is type(w) for w in wanted)


# field -> (its no-op values, why anything else is refused); see refused_fields.py
RESPONSES_FIELDS: dict[str, tuple[NoOp, str]] = {
    "background": (_none_or(False), "background responses are not supported: send the request and wait, or stream"),
    "include": (_none_or([]), "nothing this server can add to a response: no reasoning, logprobs, search or "
                              "image outputs"),
    "truncation": (_none_or("disabled"), "only truncation 'disabled' is served: a conversation longer than a slot "
                                         "is a 400, never silently cut"),
    "top_logprobs": (_none_or(0), "logprobs are not served on /v1/responses: use /v1/chat/completions"),
    "max_tool_calls": (_none_or(), "a limit on tool calls is not supported: use parallel_tool_calls false"),
    "prompt": (_none_or(), "stored prompt templates are not served: send input and instructions"),
    "conversation": (_none_or(), "the Conversations API is not served: use previous_response_id"),
    "context_management": (_none_or(), "context management (compaction) is not served"),
}
NO_SUMMARY = "reasoning summaries are not served (no summarizer here): the reasoning item's content has the " \
             "whole reasoning text"


# what a prompt too long for a slot, or a template's or tokenizer's refusal, names
RESPONSES_INPUTS = RouteInputs("input", "input")


@contextmanager
def in_input() -> Iterator[None]:
    """What the chat path refuses in the messages it renders (their checks, the template, the tokenizer: it names
    them `messages`), answered naming this API's fields: the conversation is `input` and `instructions`."""
    try:
        yield
    except InvalidArgumentError as e:
        if not (isinstance(e, ChatTemplateError) or e.param is None or e.param.startswith("messages")):
            raise
        error = answer(e, RESPONSES_INPUTS)
        error.param, error.message = "input", f"{error.message} (in the conversation of 'input' and 'instructions')"
        raise error from e


class FunctionTool(ProtocolModel):
    """A function tool in the Responses form (its fields at the top, not under "function")."""
    type: Literal["function"]
    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = None
    parameters: dict[str, Any] | None = Field(None, description="a JSON schema of type object")
    strict: bool | None = Field(None, description="calls always match the schema here (constrained decoding)")

    def chat_tool(self) -> dict[str, Any]:
        function = {"name": self.name, **({"description": self.description} if self.description else {}),
                    **({"parameters": self.parameters} if self.parameters is not None else {})}
        return {"type": "function", "function": function}


class ReasoningOptions(ProtocolModel):
    """`reasoning`: effort (see the module's doc); summaries are refused."""
    refused = {"summary": (_none_or(), NO_SUMMARY), "generate_summary": (_none_or(), NO_SUMMARY)}  # noqa: RUF012
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = None

    def template_kwargs(self, model: Any, offered: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
        """The template variables of this effort for `model`'s template (None: the server's defaults)."""
        template = getattr(model, "chat_template", None)
        if self.effort is None or template is None:  # (llama.cpp's built-in template never thinks)
            return None
        if self.effort == "none":
            return {"enable_thinking": False}
        if "reasoning_effort" not in compile_template(template.source_for(offered)):
            raise APIError(400, f"'reasoning.effort': this model's chat template has no effort levels (it reads no "
                                f"'reasoning_effort'): only 'none' (thinking off) is served, or leave effort out, "
                                f"got {self.effort!r}", param="reasoning.effort")
        return {"enable_thinking": True, "reasoning_effort": self.effort}


class NamedFunction(ProtocolModel):
    type: Literal["function"]
    name: str


class TextOptions(ProtocolModel):
    """`text`: the output's format (text, json_object, json_schema with name, schema, strict, description)."""
    refused = {"verbosity": (_none_or("medium"), "verbosity is not supported by this model")}  # noqa: RUF012
    format: dict[str, Any] | None = None

    def response_format(self) -> dict[str, Any] | None:
        """The chat's response_format of this format (None: free text), which constraint_from checks."""
        fmt = self.format
        if fmt is None or fmt.get("type") == "text":
            return None
        if fmt.get("type") != "json_schema":
            return fmt
        inner = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        extra = sorted(set(fmt) - {"type", *inner})
        if extra:
            raise APIError(400, f"'text.format': unknown field(s) {', '.join(map(repr, extra))} for type "
                                "'json_schema'", param=f"text.format.{extra[0]}"[:200])
        return {"type": "json_schema", "json_schema": inner}


@dataclass(frozen=True)
class ResponsesTurn:
    """A checked /v1/responses request: its generation, the conversation it continues and adds (Responses
    items: what a follow-up's previous_response_id will put first), whether it is kept, and the request's fields
    the response object repeats."""
    generation: Generation
    items: tuple[Item, ...]
    store: bool
    echo: dict[str, Any]


class ResponsesRequest(Harmless):
    """POST /v1/responses."""
    refused = RESPONSES_FIELDS
    model: str | None = Field(None, description="any name: the one loaded model answers")
    input: Annotated[str | list[dict[str, Any]], SkipValidation] = Field(
        description="text (a user message), or items: messages (role user, system, developer or assistant; content "
                    "text or input_text/output_text parts), function_call and function_call_output")
    instructions: str | None = Field(None, description="a system message before the conversation (not carried to "
                                                       "a follow-up)")
    tools: list[FunctionTool] | None = None
    tool_choice: Annotated[Literal["none", "auto", "required"] | NamedFunction | None, SkipValidation] = Field(
        None, description="auto (the default with tools), none, required, or {type: function, name}")
    parallel_tool_calls: bool | None = None
    text: TextOptions | None = None
    max_output_tokens: MaxTokens | None = None
    temperature: Annotated[float, Between(0.0, 2.0)] = 1.0
    top_p: Annotated[float, Between(0.0, 1.0)] = 1.0
    stream: bool = False
    store: bool = Field(True, description="keep the response for previous_response_id and GET (--responses-store)")
    previous_response_id: str | None = Field(None, description="continue a stored response's conversation")
    reasoning: ReasoningOptions | None = None
    timings_per_token: bool = Field(False, description="llama-server's: every stream event has the timings so far")
    return_progress: bool = Field(False, description="llama-server's: a stream reports the prompt's evaluation "
                                  "(a response.in_progress event with prompt_progress) before the first token")
    _item_keys: list[str] = PrivateAttr(default_factory=list)  # input items' unknown keys, found by convert

    @property
    def unknown(self) -> list[str]:
        return [*super().unknown, *self._item_keys]

    @model_validator(mode="before")
    @classmethod
    def _builtin_tools(cls, body: Any) -> Any:
        """A hosted tool (or a choice of one) is named before the function tools' own checks would say less."""
        if not isinstance(body, dict):
            return body
        tools = body.get("tools")
        for i, tool in enumerate(tools if isinstance(tools, list) else ()):
            kind = tool.get("type") if isinstance(tool, dict) else None
            if isinstance(kind, str) and kind != "function":
                raise bad(f"'tools[{i}]': the built-in tool '{kind[:40]}' is not served: {BUILTIN}", "tools", i, "type")
        choice = body.get("tool_choice")
        kind = choice.get("type") if isinstance(choice, dict) else None
        if isinstance(kind, str) and kind != "function":
            raise bad(f"'tool_choice': '{kind[:40]}' is not served: {BUILTIN}; choose auto, none, required or "
                      "{type: function, name}", "tool_choice", "type")
        return body

    def convert(self, limits: Limits, store: ResponseStore | None = None, model: Any = None) -> ResponsesTurn:
        """The turn: run in a request thread (a schema compiles here), with the server's store and model (None:
        the document's default request, which names no previous response)."""
        previous: tuple[Item, ...] = ()
        if self.previous_response_id is not None:
            stored = store.get(self.previous_response_id) if store is not None else None
            if stored is None:
                raise APIError(400, f"Previous response with id '{self.previous_response_id[:80]}' not found (this "
                                    f"server keeps the last {store.limit if store else 0} stored responses in memory, "
                                    "--responses-store; a restart forgets them)",
                               param="previous_response_id", code="previous_response_not_found")
            previous = stored.items
        new = input_items(self.input, self._item_keys)
        conversation = (*previous, *new)
        system = [{"role": "system", "content": self.instructions}] if self.instructions else []
        with in_input():
            messages = normalize_messages([*system, *chat_messages(conversation)])
        tools = check_tools([t.chat_tool() for t in self.tools or ()]) or None
        choice = check_tool_choice(self._chat_tool_choice(tools is not None), tools or [])
        response_format = self.text.response_format() if self.text is not None else None
        with about("text.format"):
            constraint = constraint_from(response_format=response_format) if response_format is not None else None
        max_tokens = self.max_output_tokens or min(limits.max_tokens_default, limits.max_tokens_limit)
        request = GenerationRequest(max_tokens, sampling=SamplingParams(temperature=self.temperature, top_p=self.top_p),
                                    constraint=constraint)
        offered = tools if tools is not None and choice.mode != "none" else []
        thinking = self.reasoning.template_kwargs(model, offered) if self.reasoning is not None else None
        generation = Generation(request, self.stream, messages=messages, tools=tools, tool_choice=choice,
                                parallel_tool_calls=self.parallel_tool_calls, template_kwargs=thinking,
                                answer=AnswerOptions(self.timings_per_token, self.return_progress))
        return ResponsesTurn(generation, conversation, self.store, self._echo())

    def _chat_tool_choice(self, tools: bool) -> Any:
        """tool_choice in the chat's form, which check_tool_choice checks against the tools."""
        given = self.tool_choice
        if not tools and given not in (None, "none"):
            raise APIError(400, "'tool_choice' needs a non-empty 'tools' list (only 'none' is allowed without)",
                           param="tool_choice")
        if not isinstance(given, dict):
            return given
        if set(given) != {"type", "name"} or not isinstance(given["name"], str):
            raise APIError(400, "'tool_choice' must be 'none', 'auto', 'required' or {type: 'function', name: ...}",
                           param="tool_choice")
        return {"type": "function", "function": {"name": given["name"]}}

    def _echo(self) -> dict[str, Any]:
        """The request's settings as the response object repeats them (OpenAI's defaults where not given)."""
        return {"instructions": self.instructions, "max_output_tokens": self.max_output_tokens,
                "metadata": self.metadata or {}, "parallel_tool_calls": self.parallel_tool_calls is not False,
                "previous_response_id": self.previous_response_id, "store": self.store,
                "temperature": self.temperature, "top_p": self.top_p,
                "text": {"format": (self.text.format if self.text and self.text.format else {"type": "text"})},
                "tool_choice": self.tool_choice or "auto",
                "tools": [t.model_dump(exclude_none=True) for t in self.tools or ()], "user": self.user,
                "truncation": "disabled", "background": False,
                "reasoning": {"effort": self.reasoning.effort if self.reasoning else None, "summary": None}}
