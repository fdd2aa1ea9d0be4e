"""The request bodies of Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) as strict
pydantic models, converted once into what the chat route takes: the same Generation, Messages, Tools and
ToolChoice as /v1/chat/completions (requests.py, chat.py), through the same checkers (normalize_messages,
check_tools, check_tool_choice).

Anthropic's blocks map onto OpenAI's chat: `system` is a system message; an assistant's text blocks are its
content, its tool_use blocks its tool_calls (input: the arguments object), its thinking blocks its
reasoning_content (which templates that think render); a user's tool_result blocks are tool messages (named by
the tool_use they answer; is_error: their content after "Error: ", as no template has a place for the flag),
then its text blocks one user message. Blocks that would need what this server does not have (images,
documents, redacted thinking, server tools) are refused with a 400 naming the field.

`thinking` is the chat's reasoning switch (core.chat.reasoning): enabled or adaptive set the template's
`enable_thinking` true, disabled false, and enabled's budget_tokens is the reasoning budget where the template has
thinking markers (a template without them never thinks: no budget to spend). `output_config.format` (a JSON schema)
is the same constraint as the chat's response_format; its `effort` is refused.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from ...core.chat.messages import normalize_messages
from ...core.chat.reasoning import markers_of
from ...core.constrained import constraint_from
from ...core.generation.request import GenerationRequest
from ...core.generation.sampling import SamplingParams
from ...core.toolcalls import NAME_PATTERN, check_tool_choice, check_tools
from ...errors import about
from ..errors import APIError
from .base import LIMIT, Between, Limits, ProtocolModel, bad
from .refused_fields import NoOp
from .requests import Generation

# block types a client may send that this server cannot read: refused, naming the block
REFUSED_BLOCKS = {
    "image": "this server reads text only",
    "document": "send the document's text in a text block",
    "search_result": "send the results' text in a text block",
    "redacted_thinking": "it is encrypted for Anthropic's models: this server cannot render it",
    "server_tool_use": "server tools are not served",
    "web_search_tool_result": "server tools are not served",
    "container_upload": "containers are not served",
}
# each block type's fields (the required ones first, then `required` of them) and who may send it
BLOCK_FIELDS: dict[str, tuple[tuple[str, ...], int]] = {
    "text": (("text", "citations"), 1), "tool_use": (("id", "name", "input", "caller"), 3),
    "tool_result": (("tool_use_id", "content", "is_error"), 1), "thinking": (("thinking", "signature"), 1)}
ROLE_BLOCKS = {"user": ("text", "tool_result"), "assistant": ("text", "tool_use", "thinking")}
MAX_STOP_SEQUENCES = 16  # (the OpenAI routes' bound on stop strings)


# request fields that would change the answer: their no-op values only
ANTHROPIC_FIELDS: dict[str, tuple[NoOp, str]] = {
    "mcp_servers": (lambda v: v is None or v == [], "MCP servers are not supported"),
    "container": (lambda v: v is None, "containers are not supported"),
    "context_management": (lambda v: v is None, "context management is not supported"),
}


def _blocks(value: Any, allowed: tuple[str, ...]) -> Any:
    """A content: a string is one text block; a list's block types are checked before pydantic reads the blocks
    (a refused one is named, with why)."""
    if isinstance(value, str):
        return [{"type": "text", "text": value}]
    if isinstance(value, list):
        for j, block in enumerate(value):
            kind = block.get("type") if isinstance(block, dict) else None
            if isinstance(kind, str) and kind in REFUSED_BLOCKS:  # (a type that is no string: the error below)
                raise bad(f"'{kind}' content blocks are not supported: {REFUSED_BLOCKS[kind]}", j, "type")
            if not isinstance(kind, str) or kind not in allowed:
                raise bad(f"a content block here has a 'type' of {' or '.join(allowed)}, got {kind!r}"[:200], j,
                          "type")
        return value
    raise bad("a content is a string or a list of content blocks")


def _or_string(schema: dict[str, Any]) -> None:
    """The document's schema of a content: a string, or the list of blocks."""
    blocks = dict(schema)
    schema.clear()
    schema["anyOf"] = [{"type": "string"}, blocks]


# a content's validation (a string, or the blocks of these types) and its schema in the document
TEXT_ONLY, ANY_BLOCKS = BeforeValidator(lambda v: _blocks(v, ("text",))), BeforeValidator(
    lambda v: _blocks(v, tuple(BLOCK_FIELDS)))
OR_STRING = Field(json_schema_extra=_or_string)


CITATIONS = Field(None, description="an earlier answer's citations (they are not rendered: only the text is)")
# history blocks' fields of what this server does not serve: refused unless null
BLOCK_REFUSED: dict[str, tuple[NoOp, str]] = {"toolset_name": (lambda v: v is None, "MCP toolsets are not served")}


class TextBlock(ProtocolModel):
    refused = BLOCK_REFUSED
    type: Literal["text"]
    text: str
    cache_control: dict[str, Any] | None = Field(None, description="a caching hint: the server caches itself")
    citations: list[dict[str, Any]] | None = CITATIONS


class Block(ProtocolModel):
    """A content block of a message: text, an assistant's earlier tool_use (input: the arguments) or thinking
    (given to the template as reasoning_content), a user's tool_result (by the tool_use's id)."""
    refused = BLOCK_REFUSED
    type: Literal["text", "tool_use", "tool_result", "thinking"]
    text: str | None = None
    citations: list[dict[str, Any]] | None = CITATIONS
    caller: dict[str, Any] | None = Field(None, description="a tool_use's caller: {type: direct} only (no code "
                                                            "execution callers)")
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    tool_use_id: str | None = None
    content: Annotated[list[TextBlock], TEXT_ONLY, OR_STRING] | None = None
    is_error: bool = False
    thinking: str | None = None
    signature: str | None = None
    cache_control: dict[str, Any] | None = Field(None, description="a caching hint: the server caches itself")

    @model_validator(mode="after")
    def _fields(self) -> Block:
        fields, required = BLOCK_FIELDS[self.type]
        for name in sorted(self.model_fields_set - {"type", "cache_control"} - set(fields)):
            raise bad(f"'{name}' is not a field of a {self.type} block", name)
        for name in fields[:required]:
            if name not in self.model_fields_set:
                raise bad(f"a {self.type} block needs '{name}'", name)
        if self.caller not in (None, {"type": "direct"}):
            raise bad("only direct tool calls are served (caller {type: 'direct'}), no code execution callers",
                      "caller")
        return self


class AnthropicMessage(ProtocolModel):
    role: Literal["user", "assistant"]
    content: Annotated[list[Block], ANY_BLOCKS, OR_STRING]

    @model_validator(mode="after")
    def _role_blocks(self) -> AnthropicMessage:
        for j, block in enumerate(self.content):
            if block.type not in ROLE_BLOCKS[self.role]:
                raise bad(f"a {self.role} message has no {block.type} blocks", "content", j, "type")
        return self


class AnthropicTool(ProtocolModel):
    """A client tool (Anthropic's server tools, whose type names a version, are not served)."""
    refused = {  # noqa: RUF012 (a ClassVar of ProtocolModel)
        "input_examples": (lambda v: v is None or v == [], "input examples are not served: describe the input in "
                                                           "'description' or the schema"),
        "defer_loading": (lambda v: v is None or v is False, "tool search (deferred tools) is not served"),
        "allowed_callers": (lambda v: v is None or v == ["direct"], "only direct calls are served (no code "
                                                                    "execution callers)"),
        "eager_input_streaming": (lambda v: v is None or v is True, "a tool's input is always streamed as it is "
                                                                    "generated here (input_json_delta)")}
    type: Literal["custom"] | None = None
    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = None
    input_schema: dict[str, Any] = Field(description="a JSON schema of type object")
    cache_control: dict[str, Any] | None = None
    strict: bool | None = Field(None, description="calls always match input_schema here (constrained decoding)")


class AnthropicToolChoice(ProtocolModel):
    """auto (the default with tools), any (some tool), tool (the one named), none."""
    type: Literal["auto", "any", "tool", "none"]
    name: str | None = Field(None, description="the tool of type 'tool'")
    disable_parallel_tool_use: bool | None = Field(None, description="at most one tool_use block")

    def choice(self) -> str | dict[str, Any]:
        """The OpenAI tool_choice of the same meaning."""
        if (self.type == "tool") != (self.name is not None):
            raise APIError(400, "'tool_choice.name' is given with type 'tool', and only then", param="tool_choice.name")
        if self.type == "tool":
            return {"type": "function", "function": {"name": self.name}}
        return {"auto": "auto", "any": "required", "none": "none"}[self.type]


class ThinkingConfig(ProtocolModel):
    """`thinking`: enabled (budget_tokens: at most that many tokens of thinking), adaptive (the template's own
    thinking, the server's budget) or disabled; display summarized (the thinking's text) or omitted (the block
    without its text)."""
    type: Literal["enabled", "adaptive", "disabled"]
    budget_tokens: Annotated[int, Between(0, 1 << 30)] | None = Field(None, description="type enabled: required")
    display: Literal["summarized", "omitted"] | None = None

    @model_validator(mode="after")
    def _budget(self) -> ThinkingConfig:
        if (self.type == "enabled") != (self.budget_tokens is not None):
            raise bad("'budget_tokens' is given with type 'enabled', and only then", "budget_tokens")
        return self


class OutputConfig(ProtocolModel):
    """`output_config`: format, the answer's JSON schema ({type: json_schema, schema}), as response_format's."""
    refused = {"effort": (lambda v: v is None, "effort levels are not served: use thinking (its budget_tokens) "  # noqa: RUF012
                                               "and max_tokens")}
    format: dict[str, Any] | None = None

    def response_format(self) -> dict[str, Any] | None:
        """The chat's response_format of this format (None: free text), which constraint_from checks."""
        fmt = self.format
        if fmt is None:
            return None
        if fmt.get("type") != "json_schema" or set(fmt) != {"type", "schema"}:
            raise APIError(400, "'output_config.format' must be {type: 'json_schema', schema: {...}}",
                           param="output_config.format")
        return {"type": "json_schema", "json_schema": {"schema": fmt["schema"]}}


@dataclass(frozen=True)
class MessagesTurn:
    """A checked /v1/messages request: its generation, and whether the thinking's text is shown."""
    generation: Generation
    show_thinking: bool = True


class AnthropicChat(ProtocolModel):
    """A Messages request's chat (what count_tokens reads): model, system, messages, tools, tool_choice; and the
    fields that change nothing in the answer here (bookkeeping, caching and routing hints)."""
    refused = ANTHROPIC_FIELDS
    metadata: dict[str, Any] | None = Field(None, description="a user_id for the client's own bookkeeping")
    service_tier: str | None = None
    cache_control: dict[str, Any] | None = Field(None, description="a caching hint: the server caches itself")
    diagnostics: dict[str, Any] | None = None
    inference_geo: str | None = None
    speed: str | None = None
    user_profile_id: str | None = None
    workspace_id: str | None = None
    model: str = Field(description="any name: the one loaded model answers")
    system: Annotated[list[TextBlock], TEXT_ONLY, OR_STRING] | None = None
    messages: list[AnthropicMessage] = Field(min_length=1)
    tools: list[AnthropicTool] | None = None
    tool_choice: AnthropicToolChoice | None = None
    thinking: ThinkingConfig | None = None
    output_config: OutputConfig | None = None

    def chat(self, request: GenerationRequest, model: Any = None, stream: bool = False) -> Generation:
        """The chat route's Generation of `request` (sampling, stops): the typed messages, tools, tool_choice and
        parallel_tool_calls, the thinking settings for `model`'s template, output_config's constraint."""
        tools = check_tools([{"type": "function", "function": {
            "name": t.name, "parameters": t.input_schema,
            **({"description": t.description} if t.description is not None else {})}} for t in self.tools or ()])
        if not tools and self.tool_choice is not None and self.tool_choice.type != "none":
            raise APIError(400, "'tool_choice' needs a non-empty 'tools' list (only type 'none' is allowed without)",
                           param="tool_choice")
        choice = check_tool_choice(self.tool_choice.choice() if self.tool_choice is not None else None, tools)
        no_parallel = self.tool_choice.disable_parallel_tool_use if self.tool_choice is not None else None
        response_format = self.output_config.response_format() if self.output_config is not None else None
        with about("output_config.format"):
            constraint = constraint_from(response_format=response_format) if response_format is not None else None
        return Generation(replace(request, constraint=constraint), stream,
                          messages=normalize_messages(self._openai_messages()), tools=tools or None,
                          tool_choice=choice, parallel_tool_calls=None if no_parallel is None else not no_parallel,
                          **self._thinking(model, tools if choice.mode != "none" else []))

    def _thinking(self, model: Any, offered: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """The Generation's template_kwargs and reasoning_budget of `thinking` (none given: the server's)."""
        template = getattr(model, "chat_template", None)
        if self.thinking is None or template is None:  # (llama.cpp's built-in template never thinks)
            return {}
        thinks = markers_of(template.source_for(offered)) is not None
        return {"template_kwargs": {"enable_thinking": self.thinking.type != "disabled"},
                "reasoning_budget": self.thinking.budget_tokens if thinks else None}

    def _openai_messages(self) -> list[dict[str, Any]]:
        """The messages in OpenAI's shape (see the module's doc), for normalize_messages."""
        out: list[dict[str, Any]] = []
        if self.system is not None:
            out.append({"role": "system", "content": _texts(self.system)})
        names: dict[str, str] = {}  # tool_use id -> the tool's name, for the tool messages that answer it
        for message in self.messages:
            blocks = message.content
            texts = [b for b in blocks if b.type == "text"]
            if message.role == "assistant":
                out.append(_assistant(blocks, names))
                continue
            for block in blocks:
                if block.type == "tool_result":
                    assert block.tool_use_id is not None  # (Block._fields)
                    result = _texts(block.content or [])
                    out.append({"role": "tool", "tool_call_id": block.tool_use_id,
                                "content": f"Error: {result}" if block.is_error else result,
                                **({"name": names[block.tool_use_id]} if block.tool_use_id in names else {})})
            if texts or not blocks:
                out.append({"role": "user", "content": _texts(texts)})
        return out


def _texts(blocks: list[TextBlock] | list[Block]) -> str:
    """The text of text blocks, joined with newlines, as normalize_messages joins text parts."""
    return "\n".join(b.text or "" for b in blocks)


def _assistant(blocks: list[Block], names: dict[str, str]) -> dict[str, Any]:
    texts = [b for b in blocks if b.type == "text"]
    calls = [b for b in blocks if b.type == "tool_use"]
    thinking = "".join(b.thinking or "" for b in blocks if b.type == "thinking")
    names.update((c.id, c.name) for c in calls if c.id is not None and c.name is not None)
    message: dict[str, Any] = {"role": "assistant", "content": _texts(texts) if texts or not calls else None}
    if calls:
        message["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.input}}
                                 for c in calls]
    if thinking:
        message["reasoning_content"] = thinking
    return message


class CountTokensRequest(AnthropicChat):
    """POST /v1/messages/count_tokens: the chat of a Messages request, without max_tokens."""

    def convert(self, limits: Limits, model: Any = None) -> Generation:
        return self.chat(GenerationRequest(1), model)  # (what is generated does not count: one token)


class MessagesRequest(AnthropicChat):
    """POST /v1/messages. Sampling as the chat route's defaults where the request sets none (Anthropic's
    temperature range: 0 to 1)."""
    max_tokens: Annotated[int, Between(1, LIMIT)]
    stop_sequences: list[str] = Field([], max_length=MAX_STOP_SEQUENCES)
    stream: bool = False
    temperature: Annotated[float, Between(0.0, 1.0)] = 1.0
    top_p: Annotated[float, Between(0.0, 1.0)] = 1.0
    top_k: Annotated[int, Between(0, 1 << 30)] = 40

    def convert(self, limits: Limits, model: Any = None) -> MessagesTurn:
        if any(not s for s in self.stop_sequences):
            raise APIError(400, "'stop_sequences' must not hold an empty string", param="stop_sequences")
        budget = self.thinking.budget_tokens if self.thinking is not None else None
        if budget is not None and budget >= self.max_tokens:  # (Anthropic's rule: thinking counts in max_tokens)
            raise APIError(400, f"'thinking.budget_tokens' ({budget}) must be less than 'max_tokens' "
                                f"({self.max_tokens})", param="thinking.budget_tokens")
        sampling = SamplingParams(temperature=self.temperature, top_p=self.top_p, top_k=self.top_k)
        request = GenerationRequest(self.max_tokens, tuple(self.stop_sequences), sampling)
        return MessagesTurn(self.chat(request, model, self.stream),
                            self.thinking is None or self.thinking.display != "omitted")
