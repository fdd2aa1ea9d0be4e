"""Chat templates rendered with Jinja, in a sandbox, the way Hugging Face transformers renders them.

A GGUF carries its model's Jinja template in `tokenizer.chat_template` (and sometimes a tool-use variant in
`tokenizer.chat_template.tool_use`). `ChatTemplate.for_model(model)` reads it (or takes an override), and
`render(messages, tools=..., add_generation_prompt=True, **kwargs)` gives the prompt text.

The template compiles and renders in a worker process with a time, memory and output-size limit
(render.py, which also describes the environment: jinja2's ImmutableSandboxedEnvironment). A template
is a file's data: reaching for Python internals (attributes starting with "_", the
sandbox's unsafe attributes) fails at once, and so do mutating methods (list.append, dict.update).

Messages are checked and copied before the template sees them (the caller's are never changed): content may
be a string, None, or a list of text parts (joined); an assistant message's `tool_calls[*].function.arguments`
is given to the template as a dict (most templates write it with `tojson`) whose `.json` attribute is the JSON
text as sent; `tool` messages keep tool_call_id, name and content.
"""
from __future__ import annotations

import functools
import json
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ...errors import ChatTemplateError, InvalidArgumentError, about, fs_path, utf8
from ..toolcalls import GENERIC, ToolCallFormat, check_tools, detect_format, get_format, tools_system_prompt
from . import render

if TYPE_CHECKING:  # pragma: no cover
    from ...native import ModelHandle

__all__ = [
    "TEMPLATE_KEY",
    "TOOL_USE_TEMPLATE_KEY",
    "ChatTemplate",
    "Messages",
    "TemplateModel",
    "ToolArguments",
    "check_template_variables",
    "normalize_messages",
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
    clash = _RESERVED.intersection(variables)
    if clash:
        raise InvalidArgumentError(f"template variable(s) {sorted(clash)} are set by render(); "
                                   "pass them as its arguments", param="chat_template_kwargs")


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


# -- messages --------------------------------------------------------------------------------------------

class ToolArguments(dict[str, Any]):
    """A tool call's arguments as the template sees them: the dict (so `tojson` writes the object, not a
    quoted string), with the JSON text as sent in `.json`."""

    json: str


def _arguments(value: object, where: str) -> object:
    if isinstance(value, dict):
        args = ToolArguments(value)
        args.json = json.dumps(value, ensure_ascii=False)
        return args
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return value  # not JSON (a model's malformed call in the history): the template gets the text
        if isinstance(parsed, dict):
            args = ToolArguments(parsed)
            args.json = value
            return args
        return value
    raise InvalidArgumentError(f"{where} must be a JSON string or an object, got {type(value).__name__}", param=where)


def _content(value: object, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        texts = []
        for j, part in enumerate(value):
            if isinstance(part, str):
                texts.append(part)
                continue
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise InvalidArgumentError(f"{where}[{j}] must be a text part {{'type': 'text', 'text': ...}} "
                                           f"(only text is supported), got {kind!r}"[:200], param=f"{where}[{j}]")
            texts.append(part["text"])
        return "\n".join(texts)
    raise InvalidArgumentError(f"{where} must be a string, a list of text parts or null, "
                               f"got {type(value).__name__}", param=where)


class Messages(tuple[dict[str, Any], ...]):
    """Chat messages checked and copied by normalize_messages, which returns a Messages as it is: a request's
    messages are checked once where they enter and every layer below takes them as they are."""


def normalize_messages(messages: object, *, first: int = 0) -> Messages:
    """Checked copies of OpenAI-style messages, as templates want them (see the module's doc). An error's `param`
    is the path of the bad field ("messages[1].content"); `first` is the index of messages[0] in the caller's
    list, for a caller that checks one message at a time."""
    if isinstance(messages, Messages):
        return messages
    if not isinstance(messages, (list, tuple)) or not messages:
        raise InvalidArgumentError("messages must be a non-empty list of {'role': ..., 'content': ...}",
                                   param="messages")
    out = []
    for i, m in enumerate(messages, first):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise InvalidArgumentError(f"{where} must be an object, got {type(m).__name__}", param=where)
        role = m.get("role")
        if not isinstance(role, str) or not role:
            raise InvalidArgumentError(f"{where}.role must be a non-empty string, got {role!r}"[:200],
                                       param=f"{where}.role")
        with about(f"{where}.role"):
            utf8(f"{where}.role", role)  # (a lone surrogate would fail only at tokenization, naming no message)
        msg = dict(m)
        msg["content"] = _content(m.get("content"), f"{where}.content")
        if msg["content"] is not None:
            with about(f"{where}.content"):
                utf8(f"{where}.content", msg["content"])
        calls = m.get("tool_calls")
        if calls is not None:
            if role != "assistant":
                raise InvalidArgumentError(f"{where}.tool_calls is only for assistant messages (role is {role!r})",
                                           param=f"{where}.tool_calls")
            if not isinstance(calls, (list, tuple)):
                raise InvalidArgumentError(f"{where}.tool_calls must be a list, got {type(calls).__name__}",
                                           param=f"{where}.tool_calls")
            new_calls = []
            for j, call in enumerate(calls):
                cw = f"{where}.tool_calls[{j}]"
                fn = call.get("function") if isinstance(call, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    raise InvalidArgumentError(f"{cw} must be {{'id': ..., 'type': 'function', 'function': "
                                               f"{{'name': ..., 'arguments': ...}}}}", param=cw)
                if "id" in call and call["id"] is not None and not isinstance(call["id"], str):
                    raise InvalidArgumentError(f"{cw}.id must be a string", param=f"{cw}.id")
                new_fn = dict(fn)
                new_fn["arguments"] = _arguments(fn.get("arguments", {}), f"{cw}.function.arguments")
                new_calls.append({**call, "type": call.get("type", "function"), "function": new_fn})
            msg["tool_calls"] = new_calls
            if msg["content"] is None:
                msg["content"] = ""  # most templates concatenate content; None would fail there
        elif msg["content"] is None:
            raise InvalidArgumentError(f"{where}.content is missing (only an assistant message with tool_calls "
                                       "may leave it out)", param=f"{where}.content")
        if role == "tool":
            for key in ("tool_call_id", "name"):
                if key in m and m[key] is not None and not isinstance(m[key], str):
                    raise InvalidArgumentError(f"{where}.{key} must be a string", param=f"{where}.{key}")
        out.append(msg)
    return Messages(out)


def _as_text_history(messages: Sequence[dict[str, Any]], fmt: ToolCallFormat,
                     tool_role: bool) -> list[dict[str, Any]]:
    """For a template that does not render tool_calls (or tool messages): the calls written into the
    assistant's content in `fmt`'s syntax, and tool results as user messages in <tool_response> tags (or kept
    as tool messages when the template knows that role). Consecutive tool results share one message."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.get("tool_calls"):
            calls = fmt.call_text([(c["function"]["name"], getattr(c["function"]["arguments"], "json",
                                                                    c["function"]["arguments"]))
                                   for c in m["tool_calls"]])
            text = (m["content"] + "\n" if m["content"] else "") + calls
            out.append({k: v for k, v in m.items() if k != "tool_calls"} | {"content": text})
        elif m["role"] == "tool" and not tool_role:
            block = f"<tool_response>\n{m['content']}\n</tool_response>"
            if out and out[-1].get("_tool_results"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block, "_tool_results": True})
        else:
            out.append(m)
    for m in out:
        m.pop("_tool_results", None)
    return out


def _with_system_text(messages: Sequence[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    if messages and messages[0]["role"] == "system":
        first = dict(messages[0])
        first["content"] = (first["content"] + "\n\n" if first["content"] else "") + text
        return [first, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]



def text_only_history(messages: Sequence[dict[str, Any]],
                      tools: Sequence[dict[str, Any]] = ()) -> list[dict[str, Any]]:
    """Normalized `messages` as plain {"role", "content": str} pairs, for a template that knows nothing of
    tools (llama.cpp's built-in ones): earlier calls and results as text in the generic (Hermes) syntax, and
    `tools`, if any, described in a system message."""
    msgs = _as_text_history(messages, GENERIC, tool_role=False)
    if tools:
        msgs = _with_system_text(msgs, tools_system_prompt(tools, GENERIC))
    return [{"role": m["role"], "content": m["content"] or ""} for m in msgs]

# -- the template ----------------------------------------------------------------------------------------

# llama.cpp's check of a template's parallel tool calls (its caps.cpp), which llama-server takes the default of
# parallel_tool_calls from: an assistant message with two calls, rendered; the second call's arguments must show
_SECOND_CALL = "second-call-value"
_PARALLEL_PROBE: list[dict[str, Any]] = [
    {"role": "user", "content": "User message"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": f"call0000{i}", "type": "function", "function": {"name": "tool1", "arguments": {"arg": value}}}
        for i, value in enumerate(("first-call-value", _SECOND_CALL), 1)]},
    {"role": "tool", "content": "Tool response", "tool_call_id": "call00001"},
    {"role": "assistant", "content": "The tool response was 'tool response'"},
    {"role": "user", "content": "User message"},
]
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

    def _source_for(self, tools: Sequence[dict[str, Any]]) -> str:
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
        if not self.renders_tool_calls(self._source_for(_PROBE_TOOLS)):
            return False
        try:
            text = self.render(_PARALLEL_PROBE, tools=_PROBE_TOOLS, add_generation_prompt=False)
        except ChatTemplateError:
            return False
        return _SECOND_CALL in text

    def render(self, messages: Sequence[dict[str, Any]], /, *, tools: Sequence[dict[str, Any]] | None = None,
               add_generation_prompt: bool = True, **kwargs: Any) -> str:
        """The prompt text for `messages` (OpenAI shape) and `tools` (OpenAI tool list, given to the template
        as is). `kwargs` become template variables too (e.g. enable_thinking, date_string).

        Tools and tool history reach the template natively when it renders them in a syntax we parse; else
        (the generic format) the tools are described in a system message with the Hermes call syntax, and
        earlier calls and results are written into the messages as text."""
        msgs: Sequence[dict[str, Any]] = normalize_messages(messages)
        tools = check_tools(tools)
        if not isinstance(add_generation_prompt, bool):
            raise InvalidArgumentError(f"add_generation_prompt must be True or False, got {add_generation_prompt!r}")
        check_template_variables(kwargs)
        source = self._source_for(tools)
        fmt = self.tool_call_format
        native_tools = bool(tools) and self.renders_tools()
        if not self.renders_tool_calls(source):
            tool_role = bool(re.search(r"""['"]tool['"]""", source)) and not fmt.system_prompt
            msgs = _as_text_history(msgs, fmt if not fmt.system_prompt else GENERIC, tool_role)
        if tools and not native_tools:
            msgs = _with_system_text(msgs, tools_system_prompt(tools, GENERIC if fmt.system_prompt else fmt))
        variables = dict(kwargs, messages=list(msgs), add_generation_prompt=add_generation_prompt,
                         bos_token=self.bos_token, eos_token=self.eos_token)
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
