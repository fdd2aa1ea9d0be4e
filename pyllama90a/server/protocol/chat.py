"""The chat fields of a request (/v1/chat/completions, /apply-template): messages, tools, tool_choice.

Their types are declared here for /openapi.json (a message's content and tool calls, the tools, the forms of
tool_choice). Their values are checked and converted once, in `ChatFields.chat` (run by `parse`), by the library's
own checkers, the ones Model.chat goes through too: normalize_messages gives the messages their typed form
(core.chat.messages), check_tools and check_tool_choice give Tools and a ToolChoice, which the layers below take
as they are. So the fields holding them skip pydantic's validation (SkipValidation): one checker, one wording of
each error, whose `param` names the place (messages[1].tool_calls[0].function.arguments).
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, SkipValidation, model_validator

from ...core.chat.messages import Messages, normalize_messages
from ...core.toolcalls import NAME_PATTERN, ToolChoice, Tools, check_tool_choice, check_tools
from ..errors import APIError
from .base import ProtocolModel, bad
from .refused_fields import MESSAGE_FIELDS


class TextPart(ProtocolModel):
    """A part of a message's content: only text is supported."""
    type: Literal["text"]
    text: str


class FunctionCall(ProtocolModel):
    """The function of an earlier tool call."""
    keep_none = True  # (null arguments are refused, not the default)
    name: str
    arguments: str | dict[str, Any] = Field("{}", description="a JSON object, or its text")


class ToolCall(ProtocolModel):
    """An assistant's earlier tool call, as a response gave it."""
    id: str | None = None
    type: str = "function"
    function: FunctionCall


class Message(ProtocolModel):
    """One chat message; normalize_messages checks its content and tool calls."""
    refused = MESSAGE_FIELDS
    role: str = Field(min_length=1, description="system, user, assistant, tool, or another role of the template")
    content: Annotated[str | list[str | TextPart] | None, SkipValidation] = Field(
        None, description="text, or text parts (joined with newlines); only an assistant message with tool_calls "
                          "may leave it out")
    name: Annotated[str | None, SkipValidation] = Field(None, description="a tool result's function name")
    tool_call_id: Annotated[str | None, SkipValidation] = None
    tool_calls: Annotated[list[ToolCall] | None, SkipValidation] = Field(None, description="an assistant's only")
    refusal: Any = None      # (what an assistant message of a response carries when a client sends it back
    annotations: Any = None  # in the history: the openai SDK's model_dump() does; the answer is the same)

    @model_validator(mode="before")
    @classmethod
    def _role(cls, message: Any) -> Any:
        if isinstance(message, dict) and not (isinstance(message.get("role"), str) and message["role"]):
            raise bad("each message must be an object with a string 'role'")
        return message

    @model_validator(mode="after")
    def _name(self) -> Message:
        if self.name is not None and self.role != "tool":  # (a tool result's name is the function's)
            raise bad("'name' is supported on tool messages only (a chat template drops the names of other "
                      "messages)", "name")
        return self

    def given(self) -> dict[str, Any]:
        """The message as sent (its unknown fields too: the template may read them), less what null left out."""
        return {**{k: getattr(self, k) for k in self.model_fields_set}, **(self.model_extra or {})}


class Function(ProtocolModel):
    name: str = Field(pattern=NAME_PATTERN)
    description: str | None = None
    parameters: dict[str, Any] | None = Field(None, description="a JSON schema of type object")


class Tool(ProtocolModel):
    type: Literal["function"]
    function: Function


class NamedFunction(ProtocolModel):
    name: str


class NamedToolChoice(ProtocolModel):
    """A call of this function only."""
    type: Literal["function"]
    function: NamedFunction


class ChatFields(ProtocolModel):
    """A chat's messages, and the tools the template shows (/v1/chat/completions, /apply-template)."""
    messages: list[Message] = Field(min_length=1)
    tools: Annotated[list[Tool] | None, SkipValidation] = None
    tool_choice: Annotated[Literal["none", "auto", "required"] | NamedToolChoice | None, SkipValidation] = Field(
        None, description="auto (the default with tools), none, required, or one function")
    parallel_tool_calls: bool | None = None
    chat_template_kwargs: dict[str, Any] = Field({}, description="extra variables of the Jinja chat template")
    add_generation_prompt: bool = Field(True, description="open the assistant's turn after the messages")

    def chat(self) -> tuple[Messages, Tools | None, ToolChoice]:
        """The messages, tools and tool_choice, checked and converted by the library's checkers."""
        messages = normalize_messages([m.given() for m in self.messages])
        tools = check_tools(self.tools) or None
        if not tools and self.tool_choice not in (None, "none"):  # (OpenAI's answer too: nothing to choose from)
            raise APIError(400, "'tool_choice' needs a non-empty 'tools' list (only 'none' is allowed without)",
                           param="tool_choice")
        return messages, tools, check_tool_choice(self.tool_choice, tools or [])
