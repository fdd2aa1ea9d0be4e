"""A chat request made ready to generate, and its output read back.

`prepare_chat(model, messages, tools=..., tool_choice=..., constraint=...)` renders the messages (and tools)
with the model's Jinja chat template (template.py: the GGUF's `tokenizer.chat_template`, or the
`Model(chat_template=...)` override), or with llama.cpp's built-in ChatML when the file has no template, as
llama-server does; tokenizes the prompt; and turns tools and tool_choice into the constraint that guarantees
a well-formed call ("required", a named function) or enforces one from its first marker on ("auto").
`PreparedChat.output` (core.ToolCallOutput) then reads the generated text for the calls, after
`PreparedChat.reasoning` (reasoning.py) has read the thinking block out of it; `PreparedChat.thinking` is the
block's control for the generation (the budget, the constraint waiting for its end).
Model.chat, BatchEngine.chat_prompt and the server's /v1/chat/completions all go through here, with the messages
in their typed form (messages.py: normalized where they entered) and tool_choice as given or as a ToolChoice.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ...errors import InvalidArgumentError, about, flag
from ...native import ModelHandle
from ..constrained import Constraint
from ..constrained import tool_calls as tool_call_constraint
from ..generation.thinking import Thinking
from ..toolcalls import GENERIC, check_tool_choice, check_tools
from .messages import Messages
from .reasoning import ReasoningOutput, closed_when_off, get_defaults, plan_reasoning
from .template import ChatTemplate, check_template_variables, text_only_history
from .tool_output import ToolCallOutput, finish_reason

__all__ = ["FALLBACK_TEMPLATE", "ChatModel", "PreparedChat", "finish_reason", "prepare_chat", "render_chat"]


class ChatModel(Protocol):
    """What a chat needs of a model (Model has it): its chat template, tokenizer and loaded weights."""

    path: Path

    @property
    def chat_template(self) -> ChatTemplate | None: ...

    @property
    def handle(self) -> ModelHandle: ...

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = False) -> list[int]: ...


# llama.cpp's built-in template for a model file that carries none (llama-server's default too)
FALLBACK_TEMPLATE = "chatml"


@dataclass(frozen=True)
class PreparedChat:
    """A chat request ready to generate: its prompt tokens, the constraint on its output (tool calls or a
    response format), and the reader of its output for the tools it offered (None: the output is all content)."""

    tokens: list[int]
    constraint: Constraint | None
    output: ToolCallOutput | None = None
    thinking: Thinking | None = None
    reasoning: ReasoningOutput | None = None


def builtin_prompt(handle: ModelHandle, messages: Messages, tools: Sequence[dict[str, Any]]) -> str:
    """The prompt of llama.cpp's built-in template (FALLBACK_TEMPLATE) over the text of `messages`, for a model
    file without a Jinja template; UnsupportedChatTemplateError if llama.cpp refuses it."""
    return handle.builtin_chat_template(text_only_history(messages, tools), FALLBACK_TEMPLATE)


def render_chat(model: ChatModel, messages: Messages, tools: Sequence[dict[str, Any]] = (),
                add_generation_prompt: bool = True, template_kwargs: Mapping[str, Any] | None = None,
                continue_final_message: bool = False) -> str:
    """The prompt text of `messages` (and `tools`): the model's Jinja template, or llama.cpp's built-in
    FALLBACK_TEMPLATE for a file without one (which takes no template variables and always ends ready for the
    assistant's turn). continue_final_message (vLLM's, transformers'): the last message, the assistant's, is
    continued: the prompt ends with its content, no new turn opened. With thinking off (enable_thinking false)
    the assistant's thinking block is closed (reasoning.closed_when_off), as llama-server closes it."""
    template = model.chat_template
    flag("continue_final_message", continue_final_message)
    if continue_final_message and add_generation_prompt:
        raise InvalidArgumentError("continue_final_message cannot be combined with add_generation_prompt=True "
                                   "(the final message is continued: no new turn is opened)",
                                   param="continue_final_message")
    if template is not None:
        variables = dict(template_kwargs or {})
        text = template.render(messages, tools=list(tools) or None, add_generation_prompt=add_generation_prompt,
                               **variables)
        if continue_final_message:
            return _continued(text, messages)
        if not add_generation_prompt:
            return text
        thinking = variables.get("enable_thinking", get_defaults().enable_thinking)
        return closed_when_off(text, template.source_for(tools), thinking)
    if template_kwargs or not add_generation_prompt:
        raise InvalidArgumentError(f"{model.path.name} has no Jinja chat template: llama.cpp's built-in "
                                   f"{FALLBACK_TEMPLATE} takes no template variables (chat_template_kwargs) and no "
                                   f"add_generation_prompt=False", param="chat_template_kwargs")
    return builtin_prompt(model.handle, messages, tools)


def _continued(text: str, messages: Messages) -> str:
    """`text`, rendered without a generation prompt, cut after the final assistant message's content (as
    transformers cuts it): the generation continues that message."""
    last = messages[-1]
    content = last.content.strip()
    if last.role != "assistant" or last.tool_calls or not content:
        raise InvalidArgumentError("continue_final_message needs a last message from the assistant with text "
                                   "content and no tool calls", param="continue_final_message")
    at = text.rfind(content)
    if at < 0:
        raise InvalidArgumentError("continue_final_message: the chat template does not write the final message's "
                                   "content as it is", param="continue_final_message")
    return text[:at + len(content)]


def prepare_chat(model: ChatModel, messages: Messages, *,
                 tools: Sequence[dict[str, Any]] | None = None, tool_choice: object = None,
                 parallel_tool_calls: bool | None = None, constraint: Constraint | None = None,
                 template_kwargs: Mapping[str, Any] | None = None, add_generation_prompt: bool | None = None,
                 continue_final_message: bool = False, reasoning_format: str | None = None,
                 reasoning_budget: int | None = None, reasoning_budget_message: str | None = None) -> PreparedChat:
    """Render, tokenize and constrain a chat request (see the module's doc). Raises InvalidArgumentError (or
    its ChatTemplateError, ConstraintError) naming what is wrong. parallel_tool_calls None: what the template
    can write back (ChatTemplate.supports_parallel_tool_calls; no for llama.cpp's built-in template), as
    llama-server's default; without parallel calls a call ends the generation. add_generation_prompt and
    continue_final_message: render_chat's (add_generation_prompt None: not continue_final_message).
    reasoning_format ("none", "deepseek", "auto"), reasoning_budget (tokens, 0: none) and its message:
    reasoning.py's (None: its defaults)."""
    checked_tools = check_tools(tools)
    choice = check_tool_choice(tool_choice, checked_tools)
    if parallel_tool_calls is not None and not isinstance(parallel_tool_calls, bool):
        raise InvalidArgumentError(f"parallel_tool_calls must be True, False or None, got {parallel_tool_calls!r}",
                                   param="parallel_tool_calls")
    if template_kwargs is not None and not isinstance(template_kwargs, Mapping):
        raise InvalidArgumentError(f"chat_template_kwargs must be a dict, got {type(template_kwargs).__name__}",
                                   param="chat_template_kwargs")
    check_template_variables(template_kwargs or {})
    # tool_choice "none": the model is not shown the tools, so it does not write calls nobody reads
    offered = checked_tools if choice.mode != "none" else []
    # a forced call ("required", a named function) writes no message text, the only thing a response format
    # shapes (OpenAI's semantics; instructor's RESPONSES_TOOLS mode sends both): the call's grammar is the
    # constraint. Under "auto" the model may answer in text, which would have to match both grammars: refused.
    if offered and constraint is not None and choice.mode == "auto":
        raise InvalidArgumentError("a response format (response_format, json_schema, grammar, regex) cannot be "
                                   "combined with tools unless tool_choice is 'none', 'required' or a function",
                                   param="tools")
    template = model.chat_template
    # what the rendering and the tokenizer refuse (a NUL for llama.cpp's template, text that is no UTF-8) is in
    # the messages
    with about("messages"):
        if add_generation_prompt is None:
            add_generation_prompt = not continue_final_message
        text = render_chat(model, messages, offered, add_generation_prompt, template_kwargs, continue_final_message)
        tokens = model.tokenize(text, add_special=template is None or not template.has_bos(text), parse_special=True)
    fmt = GENERIC if template is None else template.tool_call_format
    if offered:
        if parallel_tool_calls is None:
            parallel_tool_calls = template is not None and template.supports_parallel_tool_calls
        with about("tools"):  # the tools' schemas become the call grammar
            calls = fmt.constraint(offered, choice, parallel_tool_calls)
            assert calls is not None  # (None only for tool_choice "none")
            constraint = tool_call_constraint(calls.patterns, trigger=calls.trigger, parallel=calls.parallel,
                                              separator=calls.separator)
    thinking, reasoning = plan_reasoning(None if template is None else template.source_for(offered), text,
                                         reasoning_format, reasoning_budget, reasoning_budget_message)
    return PreparedChat(tokens, constraint, ToolCallOutput(fmt, offered) if offered else None, thinking, reasoning)
