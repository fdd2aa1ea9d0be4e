"""Chat templates rendered with Jinja, in a sandbox, the way Hugging Face transformers renders them.

A GGUF carries its model's Jinja template in `tokenizer.chat_template` (and sometimes a tool-use variant in
`tokenizer.chat_template.tool_use`). `ChatTemplate.for_model(model)` reads it (or takes an override), and
`render(messages, tools=..., add_generation_prompt=True, **kwargs)` gives the prompt text.

The template compiles and renders in a worker process with a time, memory and output-size limit
(render.py, which also describes the environment: jinja2's ImmutableSandboxedEnvironment). A template
is a file's data: reaching for Python internals (attributes starting with "_", the
sandbox's unsafe attributes) fails at once, and so do mutating methods (list.append, dict.update).

Every render gets llama-server's variables (default_variables: enable_thinking, date_string, datetime) unless the
caller sets them.

`render` takes the messages in their typed form, checked where they entered (messages.py: normalize_messages):
the template sees them as OpenAI-shaped dicts (messages.template_messages), each tool call's arguments a dict
whose `.json` attribute is the JSON text as sent.
"""
from __future__ import annotations

import functools
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from ...errors import ChatTemplateError, InvalidArgumentError, fs_path
from ..toolcalls import GENERIC, ToolCallFormat, check_tools, detect_format, get_format, tools_system_prompt
from . import reasoning, render
from .messages import ChatMessage, Messages, normalize_messages, template_messages

if TYPE_CHECKING:  # pragma: no cover
    from ...native import ModelHandle

__all__ = [
    "TEMPLATE_KEY",
    "TOOL_USE_TEMPLATE_KEY",
    "ChatTemplate",
    "TemplateModel",
    "check_template_variables",
    "default_variables",
    "special_tokens",
    "text_only_history",
]

TEMPLATE_KEY = "tokenizer.chat_template"
TOOL_USE_TEMPLATE_KEY = "tokenizer.chat_template.tool_use"
_RESERVED = frozenset({"messages", "tools", "add_generation_prompt", "bos_token", "eos_token"})


def check_template_variables(variables: Mapping[str, Any]) -> None:
    """Refuse extra template variables (Model.chat's and the server's chat_template_kwargs) that render() sets
    itself. Checked before render(**variables) too: there "messages", "tools" or "add_generation_prompt" would
    bind to render's own parameters (a TypeError, or a prompt silently rendered without the assistant's turn)."""
    if not all(isinstance(k, str) for k in variables):
        raise InvalidArgumentError("template variable names must be strings", param="chat_template_kwargs")
    if "self" in variables:  # jinja2's own name in every template (the template's blocks): a value is never seen
        raise InvalidArgumentError("template variable 'self' is reserved by Jinja (it names the template itself)",
                                   param="chat_template_kwargs")
    if "enable_thinking" in variables and not isinstance(variables["enable_thinking"], bool):
        raise InvalidArgumentError(f"enable_thinking must be true or false, got {variables['enable_thinking']!r}"[:200],
                                   param="chat_template_kwargs")
    clash = _RESERVED.intersection(variables)
    if clash:
        raise InvalidArgumentError(f"template variable(s) {sorted(clash)} are set by render(); "
                                   "pass them as its arguments", param="chat_template_kwargs")


def default_variables() -> dict[str, Any]:
    """The variables llama-server gives every template (a request's chat_template_kwargs win): enable_thinking
    (reasoning.py's default: the server's --reasoning), and today's date as date_string ("05 Dec 2026") and
    datetime ("Dec 05 2026"). strftime_now(format) and `now` (a datetime) are the render's (render.py)."""
    today = datetime.now()
    return {"enable_thinking": reasoning.get_defaults().enable_thinking,
            "date_string": today.strftime("%d %b %Y"), "datetime": today.strftime("%b %d %Y")}


def compile_template(source: str) -> frozenset[str]:
    """Compile `source` in the render worker (render.check): ChatTemplateError if it does not
    compile; the names of the variables it reads. Checked once per template text here."""
    if not isinstance(source, str):
        raise InvalidArgumentError(f"chat_template must be a str, got {type(source).__name__}")
    with _cache_lock:
        hit = _cache.get(source)
        if hit is not None:
            _cache.move_to_end(source)
            return hit
    names = render.check(source)
    with _cache_lock:
        _cache[source] = names
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return names


_cache: OrderedDict[str, frozenset[str]] = OrderedDict()
_cache_lock = threading.Lock()
_CACHE_SIZE = 64


# -- the history as text -------------------------------------------------------------------------------

def _as_text_history(messages: Sequence[ChatMessage], fmt: ToolCallFormat, tool_role: bool) -> list[ChatMessage]:
    """For a template that does not render tool_calls (or tool messages): the calls written into the
    assistant's content in `fmt`'s syntax, and tool results as user messages in <tool_response> tags (or kept
    as tool messages when the template knows that role). Consecutive tool results share one message."""
    out: list[ChatMessage] = []
    results = False  # out[-1] is a user message of tool results
    for m in messages:
        if m.role == "tool" and not tool_role:
            block = f"<tool_response>\n{m.content}\n</tool_response>"
            if results:
                out[-1] = replace(out[-1], content=out[-1].content + "\n" + block)
            else:
                out.append(ChatMessage("user", block))
            results = True
            continue
        results = False
        if m.tool_calls:
            calls = fmt.call_text([(c.name, c.arguments_text) for c in m.tool_calls])
            m = replace(m, content=(m.content + "\n" if m.content else "") + calls, tool_calls=())
        out.append(m)
    return out


def _with_system_text(messages: Sequence[ChatMessage], text: str) -> list[ChatMessage]:
    if messages and messages[0].role == "system":
        first = messages[0]
        return [replace(first, content=(first.content + "\n\n" if first.content else "") + text), *messages[1:]]
    return [ChatMessage("system", text), *messages]


def text_only_history(messages: Messages, tools: Sequence[dict[str, Any]] = ()) -> list[dict[str, str]]:
    """`messages` as plain {"role", "content": str} pairs, for a template that knows nothing of tools (llama.cpp's
    built-in ones): earlier calls and results as text in the generic (Hermes) syntax, and `tools`, if any,
    described in a system message."""
    msgs = _as_text_history(messages, GENERIC, tool_role=False)
    if tools:
        msgs = _with_system_text(msgs, tools_system_prompt(tools, GENERIC))
    return [{"role": m.role, "content": m.content} for m in msgs]


# -- the template ----------------------------------------------------------------------------------------

# llama.cpp's check of a template's parallel tool calls (its caps.cpp), which llama-server takes the default of
# parallel_tool_calls from: an assistant message with two calls, rendered; the second call's arguments must show
_SECOND_CALL = "second-call-value"
_PARALLEL_PROBE = normalize_messages([
    {"role": "user", "content": "User message"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"call0000{i}", "type": "function", "function": {"name": "tool1", "arguments": {"arg": value}}}
        for i, value in enumerate(("first-call-value", _SECOND_CALL), 1)]},
    {"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
    {"role": "assistant", "content": "The tool response was 'tool response'"},
    {"role": "user", "content": "User message"},
])
_PROBE_TOOLS = [{"type": "function", "function": {
    "name": "tool1", "description": "Tool description",
    "parameters": {"type": "object", "properties": {"arg": {"type": "string", "description": "Arg description"}},
                   "required": ["arg"]}}}]


class TemplateModel(Protocol):
    """What a template needs of a model (Model has it): its vocabulary's special tokens and its GGUF metadata."""

    @property
    def handle(self) -> ModelHandle: ...

    def metadata(self, key: str) -> str | None: ...


def special_tokens(model: TemplateModel) -> tuple[str, str]:
    """(bos_token, eos_token) of a Model, as text ("" where the vocabulary has none)."""
    vocab = model.handle
    bos, eos = ("" if t is None else vocab.detokenize([t], special=True) for t in (vocab.bos, vocab.eos))
    return bos, eos


class ChatTemplate:
    """A Jinja chat template and the special tokens it is given.

    source: the template text; tool_use_source: a variant used when tools are given (GGUFs of some models
    carry one); tool_call_format: the tool-call syntax ("hermes", "llama3_json", "mistral", "generic", or
    None to detect it from the template's text)."""

    def __init__(self, source: str, *, bos_token: str = "", eos_token: str = "", tool_use_source: str | None = None,
                 tool_call_format: str | ToolCallFormat | None = None) -> None:
        for name, value in (("bos_token", bos_token), ("eos_token", eos_token)):
            if not isinstance(value, str):
                raise InvalidArgumentError(f"{name} must be a str, got {type(value).__name__}")
        if not isinstance(source, str) or not source.strip():
            raise ChatTemplateError("chat_template must be a non-empty string of Jinja template text")
        if tool_use_source is not None and not isinstance(tool_use_source, str):
            raise InvalidArgumentError("tool_use_source must be a str")
        compile_template(source)  # a syntax error is reported now, not at the first chat
        if tool_use_source:
            compile_template(tool_use_source)
        self.source = source
        self.tool_use_source = tool_use_source or None
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.tool_call_format = (get_format(tool_call_format) if tool_call_format is not None
                                 else detect_format(self.tool_use_source or source))

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], **kwargs: Any) -> ChatTemplate:
        """A template read from a text file (UTF-8), e.g. the server's --chat-template-file."""
        raw = fs_path("chat_template_file", path)
        try:
            with open(raw, encoding="utf-8") as f:
                source = f.read()
        except OSError as e:
            raise ChatTemplateError(f"chat template file {os.fsdecode(raw)}: {e.strerror}") from None
        except UnicodeDecodeError as e:
            raise ChatTemplateError(f"chat template file {os.fsdecode(raw)} is not UTF-8 text: {e.reason} "
                                    f"at byte {e.start}") from None
        return cls(source, **kwargs)

    @classmethod
    def for_model(cls, model: TemplateModel, override: str | None = None,
                  tool_call_format: str | ToolCallFormat | None = None) -> ChatTemplate | None:
        """The template of `model`: `override` (template text) if given, else the GGUF's; None when there is
        neither (the caller then has llama.cpp's built-in matcher, or no chat). bos/eos come from the vocab."""
        bos, eos = special_tokens(model)
        if override is not None:
            return cls(override, bos_token=bos, eos_token=eos, tool_call_format=tool_call_format)
        source = model.metadata(TEMPLATE_KEY)
        if not source:
            return None
        return cls(source, bos_token=bos, eos_token=eos, tool_use_source=model.metadata(TOOL_USE_TEMPLATE_KEY),
                   tool_call_format=tool_call_format)

    # -- what the template does --------------------------------------------------------------------------

    def source_for(self, tools: Sequence[dict[str, Any]]) -> str:
        """The template text that renders a request offering `tools`."""
        return self.tool_use_source if tools and self.tool_use_source else self.source

    def renders_tools(self) -> bool:
        """Whether the template itself describes `tools` to the model (it reads the `tools` variable) in a
        syntax we parse (not the generic format)."""
        return not self.tool_call_format.system_prompt and "tools" in compile_template(self.tool_use_source
                                                                                       or self.source)

    def renders_tool_calls(self, source: str | None = None) -> bool:
        """Whether the template writes assistant tool_calls itself (in a syntax we parse)."""
        return "tool_calls" in (source or self.source) and not self.tool_call_format.system_prompt

    @functools.cached_property
    def supports_parallel_tool_calls(self) -> bool:
        """Whether the template writes back more than one call of an assistant message (llama.cpp's check):
        the default of parallel_tool_calls, as in llama-server. A template that does not render tool_calls
        itself (the generic format, SmolLM2's) does not; one that fails on the check's history does not."""
        if not self.renders_tool_calls(self.source_for(_PROBE_TOOLS)):
            return False
        try:
            text = self.render(_PARALLEL_PROBE, tools=_PROBE_TOOLS, add_generation_prompt=False)
        except ChatTemplateError:
            return False
        return _SECOND_CALL in text

    def render(self, messages: Messages, /, *, tools: Sequence[dict[str, Any]] | None = None,
               add_generation_prompt: bool = True, **kwargs: Any) -> str:
        """The prompt text for `messages` (checked by normalize_messages where they entered) and `tools` (OpenAI
        tool list, given to the template as is). `kwargs` become template variables too (e.g. enable_thinking,
        date_string).

        Tools and tool history reach the template natively when it renders them in a syntax we parse; else
        (the generic format) the tools are described in a system message with the Hermes call syntax, and
        earlier calls and results are written into the messages as text."""
        if not isinstance(messages, Messages):  # (a Python caller's dicts: the typed form is made at the entry)
            raise InvalidArgumentError(f"render() takes the Messages of normalize_messages(), got "
                                       f"{type(messages).__name__}", param="messages")
        msgs: Sequence[ChatMessage] = messages
        tools = check_tools(tools)
        if not isinstance(add_generation_prompt, bool):
            raise InvalidArgumentError(f"add_generation_prompt must be True or False, got {add_generation_prompt!r}")
        check_template_variables(kwargs)
        source = self.source_for(tools)
        fmt = self.tool_call_format
        native_tools = bool(tools) and self.renders_tools()
        if not self.renders_tool_calls(source):
            tool_role = bool(re.search(r"""['"]tool['"]""", source)) and not fmt.system_prompt
            msgs = _as_text_history(msgs, fmt if not fmt.system_prompt else GENERIC, tool_role)
        if tools and not native_tools:
            msgs = _with_system_text(msgs, tools_system_prompt(tools, GENERIC if fmt.system_prompt else fmt))
        variables = dict(default_variables(), **kwargs, messages=template_messages(msgs),
                         add_generation_prompt=add_generation_prompt, bos_token=self.bos_token,
                         eos_token=self.eos_token)
        if native_tools:
            variables["tools"] = list(tools)
        return self.render_raw(source, variables)

    @staticmethod
    def render_raw(source: str, variables: dict[str, Any]) -> str:
        """Render template text with exactly `variables` (in the render worker, within template_render's
        limits); a failure is a ChatTemplateError."""
        compile_template(source)
        return render.render(source, variables)

    def has_bos(self, text: str) -> bool:
        """Whether rendered `text` already begins with the BOS token: then tokenize it with
        add_special=False (or the model would get a second BOS)."""
        return bool(self.bos_token) and text.startswith(self.bos_token)

    def __repr__(self) -> str:
        return (f"ChatTemplate({len(self.source)} chars, tool_call_format={self.tool_call_format.name!r}, "
                f"bos_token={self.bos_token!r})")
