"""`ToolCallFormat`: one model family's tool-call syntax (how calls are written, read, and constrained).

Formats (`FORMATS`, picked by `detect_format(template_source)` or by name with `get_format`):

- ``hermes``: Hermes/Qwen style, one ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` block per
  call (several blocks for parallel calls).
- ``llama3_json``: Llama 3.1/3.2 custom-tool style, ``{"name": ..., "parameters": {...}}`` (optionally after
  ``<|python_tag|>``; several calls separated by ``;`` or newlines). ``"arguments"`` is read as well.
- ``mistral``: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`` (one JSON array of calls).
- ``generic``: for templates with no known tool syntax. The calls are written in the Hermes syntax, and the
  tools are described, with that syntax, in a system message that `chat_template.ChatTemplate.render` adds
  (the template's own rendering of `tools`, whose syntax we could not parse, is not used). Earlier assistant
  calls and tool results are written into the messages as ``<tool_call>``/``<tool_response>`` text when the
  template does not render them itself.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...errors import InvalidArgumentError
from .formats import hermes, llama3, mistral
from .json_scan import WS
from .parse import scan
from .pattern import CallPattern, ToolCallConstraint
from .results import ParsedToolCall, ParseResult
from .stream import ToolCallStream
from .tools import ToolChoice, check_tool_choice, check_tools, new_call_id, tool_names


def parameters_schema(fn: dict[str, Any]) -> dict[str, Any]:
    """A function's arguments schema: its parameters (an object schema, as given), or for a function without
    parameters the empty object (no properties at all: JSON schema would otherwise allow any)."""
    params = fn.get("parameters") or {"type": "object", "properties": {}, "additionalProperties": False}
    return params if "type" in params else {"type": "object", **params}


_DATA_KEYWORDS = frozenset({"const", "enum", "default", "examples"})  # their values are data, not schemas


def _relocated(schema: Any, at: str) -> Any:
    """`schema` moved to the JSON pointer `at` of a larger schema: its local $refs point there ("#/$defs/X" becomes
    at + "/$defs/X")."""
    if isinstance(schema, dict):
        return {k: (at + v[1:] if k == "$ref" and isinstance(v, str) and v.startswith("#")
                    else v if k in _DATA_KEYWORDS else _relocated(v, at)) for k, v in schema.items()}
    if isinstance(schema, list):
        return [_relocated(v, at) for v in schema]
    return schema


@dataclass(frozen=True)
class ToolCallFormat:
    """One model family's tool-call syntax.

    name: the format's name. family: the reader of its calls (formats/<family>.py). trigger: the literal text a
    call starts with. prefix/suffix: the literal text around the JSON of a constrained span (around one call,
    or around the array of calls for "mistral"). args_key: the key holding the arguments ("arguments", or
    "parameters" for Llama 3). array: the JSON is an array of calls (Mistral). id_length/id_prefix: the ids
    the parser gives calls (Mistral's templates want 9 letters/digits). system_prompt: the tools are described
    in a system message by us (generic format), not by the template."""

    name: str
    family: str
    trigger: str
    prefix: str
    suffix: str
    args_key: str = "arguments"
    array: bool = False
    id_length: int = 24
    id_prefix: str = "call_"
    system_prompt: bool = False

    # -- schema ------------------------------------------------------------------------------------------

    def call_schema(self, tools: Sequence[dict[str, Any]],
                    tool_choice: ToolChoice | str | dict[str, Any] | None = "required") -> dict[str, Any]:
        """The JSON schema of ONE call object: {"name": <a listed function (or only the named one)>,
        <args_key>: <that function's parameters schema>}. `tools` and `tool_choice` as the API takes them."""
        tools = check_tools(tools)
        choice = tool_choice if isinstance(tool_choice, ToolChoice) else check_tool_choice(tool_choice, tools)
        if choice.mode == "none":
            raise InvalidArgumentError("tool_choice 'none' allows no call: there is no call schema",
                                       param="tool_choice")
        alternatives, defs = [], {}
        for i, tool in enumerate(tools):
            fn = tool["function"]
            if choice.name is not None and fn["name"] != choice.name:
                continue
            params = parameters_schema(fn)
            moved = _relocated(params, f"#/$defs/tool_{i}")
            if moved != params:  # it refers into itself: nested here, its "#..." would point into the call
                defs[f"tool_{i}"] = moved
                params = {"$ref": f"#/$defs/tool_{i}"}
            alternatives.append({
                "type": "object",
                "properties": {"name": {"type": "string", "const": fn["name"]}, self.args_key: params},
                "required": ["name", self.args_key],
                "additionalProperties": False,
            })
        one = alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}
        return {**one, "$defs": defs} if defs else one

    def schema(self, tools: Sequence[dict[str, Any]],
               tool_choice: ToolChoice | str | dict[str, Any] | None = "required",
               parallel_tool_calls: bool = True) -> dict[str, Any]:
        """The schema of what goes between prefix and suffix: one call, or for array formats a list of calls
        (at most one unless parallel_tool_calls)."""
        one = self.call_schema(tools, tool_choice)
        if not self.array:
            return one
        defs = one.pop("$defs", None)  # (the parameters' schemas stay at the root, where their $refs point)
        schema: dict[str, Any] = {"type": "array", "items": one, "minItems": 1, **({"$defs": defs} if defs else {})}
        if not parallel_tool_calls:
            schema["maxItems"] = 1
        return schema

    def constraint(self, tools: Sequence[dict[str, Any]], tool_choice: object = None,
                   parallel_tool_calls: bool = True) -> ToolCallConstraint | None:
        """What to constrain for this request: None for tool_choice "none" (or no tools); a lazy constraint
        from the trigger for "auto"; a constraint from the first token for "required" and a named function.
        `tools` and `tool_choice` as the API takes them (checked here)."""
        tools = check_tools(tools)
        choice = tool_choice if isinstance(tool_choice, ToolChoice) else check_tool_choice(tool_choice, tools)
        if choice.mode == "none":
            return None
        trigger = self.trigger if choice.mode == "auto" else None
        if self.array and parallel_tool_calls:  # the calls are items of one array
            pattern = CallPattern(self.prefix, self.schema(tools, choice, True), self.suffix)
            return ToolCallConstraint((pattern,), trigger, parallel=False, separator="")
        open_, close = ("[", "]") if self.array else ("", "")
        patterns = []
        for tool in tools:
            fn = tool["function"]
            if choice.name is not None and fn["name"] != choice.name:
                continue
            head = f'{{"name": {json.dumps(fn["name"], ensure_ascii=False)}, "{self.args_key}": '
            patterns.append(CallPattern(self.prefix + open_ + head, parameters_schema(fn), "}" + close + self.suffix))
        separator = "; " if self.family == "llama3" else "\n"
        return ToolCallConstraint(tuple(patterns), trigger, parallel=parallel_tool_calls and not self.array,
                                  separator=separator)

    # -- writing calls (for templates that do not render tool_calls themselves) --------------------------

    def call_text(self, calls: Sequence[tuple[str, Any]]) -> str:
        """Text of calls [(name, arguments as dict or JSON string)] in this syntax, as the model writes it."""
        def obj(name: str, args: Any) -> str:
            if not isinstance(args, str):
                args = json.dumps(args, ensure_ascii=False)
            return f'{{"name": {json.dumps(name, ensure_ascii=False)}, "{self.args_key}": {args}}}'
        if self.array:
            return self.prefix + "[" + ", ".join(obj(n, a) for n, a in calls) + "]" + self.suffix
        return "\n".join(self.prefix + obj(n, a) + self.suffix for n, a in calls)

    # -- reading calls -----------------------------------------------------------------------------------

    def new_id(self) -> str:
        return new_call_id(self.id_length, self.id_prefix)

    def parse(self, text: str, tools: Sequence[dict[str, Any]] | None = None) -> ParseResult:
        """Split generated `text` into content and tool calls. A call must be complete, well-formed JSON of
        a listed function (when `tools` is given) with an object of arguments; anything else, from where it
        went wrong, is content."""
        found = scan(self.family, text, _names(tools), final=True)
        return ParseResult(found.content.strip(WS),
                           [ParsedToolCall(self.new_id(), c.name, c.arguments) for c in found.calls])

    def stream(self, tools: Sequence[dict[str, Any]] | None = None) -> ToolCallStream:
        """A streaming reader of this format (see ToolCallStream)."""
        return ToolCallStream(self.family, self.new_id, _names(tools))


def _names(tools: Sequence[dict[str, Any]] | None) -> set[str] | None:
    return set(tool_names(check_tools(tools))) if tools is not None else None


HERMES = ToolCallFormat("hermes", "hermes", trigger=hermes.TRIGGER, prefix=hermes.TRIGGER + "\n",
                        suffix="\n" + hermes.CLOSING)
LLAMA3_JSON = ToolCallFormat("llama3_json", "llama3", trigger='{"name"', prefix="", suffix="", args_key="parameters")
MISTRAL = ToolCallFormat("mistral", "mistral", trigger=mistral.TRIGGER, prefix=mistral.TRIGGER, suffix="",
                         array=True, id_length=9, id_prefix="")
GENERIC = ToolCallFormat("generic", "hermes", trigger=hermes.TRIGGER, prefix=hermes.TRIGGER + "\n",
                         suffix="\n" + hermes.CLOSING, system_prompt=True)
FORMATS: dict[str, ToolCallFormat] = {f.name: f for f in (HERMES, LLAMA3_JSON, MISTRAL, GENERIC)}


def get_format(name: str | ToolCallFormat) -> ToolCallFormat:
    """A format by name ("hermes", "llama3_json", "mistral", "generic"), or the format itself."""
    if isinstance(name, ToolCallFormat):
        return name
    if not isinstance(name, str) or name not in FORMATS:
        raise InvalidArgumentError(f"tool_call_format must be one of {sorted(FORMATS)}, got {name!r}"[:200])
    return FORMATS[name]


def detect_format(template_source: str | None) -> ToolCallFormat:
    """The tool-call format a chat template's text shows: its literal markers decide (Mistral's
    [TOOL_CALLS], Hermes/Qwen's <tool_call>, Llama 3's <|python_tag|> or its "parameters" call description
    in a header-id template); none of them: the generic format."""
    src = template_source or ""
    if mistral.TRIGGER in src:
        return MISTRAL
    if hermes.TRIGGER in src:
        return HERMES
    if llama3.PYTHON_TAG in src or ("<|start_header_id|>" in src and '"parameters"' in src):
        return LLAMA3_JSON
    return GENERIC


def tools_system_prompt(tools: Sequence[dict[str, Any]], fmt: ToolCallFormat = GENERIC) -> str:
    """The description of `tools` and of the call syntax that the generic format puts in a system message."""
    listed = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    example = fmt.call_text([("<function-name>", '{"<argument>": <value>}')])
    return ("You may call the functions below to help with the user's request. Each is described in JSON:\n"
            f"{listed}\n"
            "To call a function, answer with exactly this, once per call, and nothing after it:\n"
            f"{example}\n"
            "The arguments must be a JSON object that follows the function's parameters. "
            "When no function is needed, answer in plain text.")
