"""Tool calls: the syntax a model family writes them in, the JSON schema a constrained decoder needs, and
parsers of generated text into OpenAI-style `tool_calls` (whole text and streaming).

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

Everything a constrained decoder needs is plain data (`ToolCallConstraint`: patterns of literal prefix +
JSON schema dict + literal suffix, an optional trigger string, whether more calls may follow and their
separator); nothing here depends on how it is enforced.

Parsing never raises on model output: text that is not a well-formed call of a listed function is content.
"""
from __future__ import annotations

import json
import re
import secrets
import string
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from .errors import InvalidArgumentError, about

__all__ = [
    "ToolCallFormat", "ToolCallConstraint", "ToolCallPattern", "ParsedToolCall", "ParseResult", "ToolCallStream", "FORMATS",
    "get_format", "detect_format", "check_tools", "check_tool_choice", "ToolChoice", "tool_names",
    "tools_system_prompt", "new_call_id", "reassemble",
]

_NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_ID_ALPHABET = string.ascii_letters + string.digits


def new_call_id(length: int = 24, prefix: str = "call_") -> str:
    """A random tool-call id: "call_" and 24 letters/digits, as OpenAI's look."""
    return prefix + "".join(secrets.choice(_ID_ALPHABET) for _ in range(length))


# -- checking tools and tool_choice -----------------------------------------------------------------------

def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def check_tools(tools: object, field: str = "tools") -> list[dict]:
    """`tools` as a list of OpenAI tool dicts ({"type": "function", "function": {"name", "description"?,
    "parameters"?}}), checked; None gives []. Bad shapes raise InvalidArgumentError naming the field (its
    message the path in it, its `param` the field)."""
    with about(field):
        return _check_tools(tools, field)


def _check_tools(tools: object, field: str) -> list[dict]:
    if tools is None:
        return []
    if not isinstance(tools, (list, tuple)):
        raise InvalidArgumentError(f"{field} must be a list of {{'type': 'function', 'function': {{...}}}}, "
                                   f"got {_type_name(tools)}")
    seen: set[str] = set()
    out = []
    for i, tool in enumerate(tools):
        where = f"{field}[{i}]"
        if not isinstance(tool, dict):
            raise InvalidArgumentError(f"{where} must be an object, got {_type_name(tool)}")
        if tool.get("type") != "function":
            raise InvalidArgumentError(f"{where}.type must be 'function', got {tool.get('type')!r}"[:200])
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise InvalidArgumentError(f"{where}.function must be an object, got {_type_name(fn)}")
        name = fn.get("name")
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise InvalidArgumentError(f"{where}.function.name must be 1 to 64 letters, digits, '_', '-' or '.', "
                                       f"got {name!r}"[:200])
        if name in seen:
            raise InvalidArgumentError(f"{where}.function.name {name!r} is listed twice")
        seen.add(name)
        if "description" in fn and fn["description"] is not None and not isinstance(fn["description"], str):
            raise InvalidArgumentError(f"{where}.function.description must be a string")
        params = fn.get("parameters")
        if params is not None:
            if not isinstance(params, dict):
                raise InvalidArgumentError(f"{where}.function.parameters must be a JSON schema object, "
                                           f"got {_type_name(params)}")
            if "type" in params and params["type"] != "object":
                raise InvalidArgumentError(f"{where}.function.parameters must describe an object "
                                           f"(type 'object'), got type {params['type']!r}"[:200])
            try:
                json.dumps(params, allow_nan=False)
            except (TypeError, ValueError) as e:
                raise InvalidArgumentError(f"{where}.function.parameters is not JSON: {e}") from None
        out.append(tool)
    return out


def tool_names(tools: Sequence[dict]) -> list[str]:
    return [t["function"]["name"] for t in tools]


@dataclass(frozen=True)
class ToolChoice:
    """A checked tool_choice: mode is "none", "auto" or "required"; name is set for a named function (the
    mode is then "required": a call of that function only)."""

    mode: str
    name: str | None = None


def check_tool_choice(tool_choice: object, tools: Sequence[dict], field: str = "tool_choice") -> ToolChoice:
    """Check `tool_choice` against the checked `tools`. None means "auto" with tools and "none" without."""
    with about(field):
        return _check_tool_choice(tool_choice, tools, field)


def _check_tool_choice(tool_choice: object, tools: Sequence[dict], field: str) -> ToolChoice:
    names = tool_names(tools)
    if tool_choice is None:
        return ToolChoice("auto" if names else "none")
    if isinstance(tool_choice, str):
        if tool_choice not in ("none", "auto", "required"):
            raise InvalidArgumentError(f"{field} must be 'none', 'auto', 'required' or "
                                       f"{{'type': 'function', 'function': {{'name': ...}}}}, got {tool_choice!r}"[:200])
        if tool_choice == "required" and not names:
            raise InvalidArgumentError(f"{field} 'required' needs a non-empty tools list")
        if tool_choice == "auto" and not names:
            return ToolChoice("none")
        return ToolChoice(tool_choice)
    if isinstance(tool_choice, dict):
        fn = tool_choice.get("function")
        if tool_choice.get("type") != "function" or not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise InvalidArgumentError(f"{field} must be {{'type': 'function', 'function': {{'name': ...}}}}, "
                                       f"got {tool_choice!r}"[:200])
        if fn["name"] not in names:
            raise InvalidArgumentError(f"{field}.function.name {fn['name']!r} is not a function in tools "
                                       f"(tools has {names})"[:300])
        return ToolChoice("required", fn["name"])
    raise InvalidArgumentError(f"{field} must be a string or an object, got {_type_name(tool_choice)}")


# -- formats ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ToolCallPattern:
    """One way the constrained text may go: literal prefix, then JSON valid under schema, then literal suffix."""

    prefix: str
    schema: dict
    suffix: str


@dataclass(frozen=True)
class ToolCallConstraint:
    """What a constrained decoder enforces for a request's tool calls: a call is one of `patterns`.

    trigger None: from the first generated token (tool_choice "required" or a named function). trigger set
    (tool_choice "auto"): free text until the model writes `trigger`; the constrained text starts where the
    trigger starts (every pattern's prefix starts with the trigger). parallel: more calls may follow the
    first, each after `separator` (and optional whitespace).

    The patterns put the function's name in the literal prefix and constrain its arguments with its own
    `parameters` schema (one pattern per allowed function), e.g. Hermes: prefix
    '<tool_call>\n{"name": "get_weather", "arguments": ', schema = get_weather's parameters, suffix
    '}\n</tool_call>'. So the trigger is a literal prefix of every pattern whatever the JSON layer's
    whitespace, and the JSON layer compiles the functions' schemas, not a union of them. (Mistral with
    parallel calls is the one exception: prefix '[TOOL_CALLS]', a schema of the array of calls.)
    With constrained.spec: tool_calls([ToolCallFormat(p.prefix, p.schema, p.suffix) for p in c.patterns],
    trigger=c.trigger, parallel=c.parallel, separator=c.separator)."""

    patterns: tuple[ToolCallPattern, ...]
    trigger: str | None
    parallel: bool
    separator: str


@dataclass(frozen=True)
class ParsedToolCall:
    id: str
    name: str
    arguments: str  # the JSON object as the model wrote it

    def to_openai(self) -> dict:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass(frozen=True)
class ParseResult:
    content: str
    tool_calls: list[ParsedToolCall]

    def message(self) -> dict:
        """An OpenAI assistant message: content None when there are calls and no text, as OpenAI does."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content if self.content or not self.tool_calls
                               else None}
        if self.tool_calls:
            msg["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        return msg


@dataclass(frozen=True)
class ToolCallFormat:
    """One model family's tool-call syntax.

    name: the format's name. trigger: the literal text a call starts with. prefix/suffix: the literal text
    around the JSON of a constrained span (around one call, or around the array of calls for "mistral").
    args_key: the key holding the arguments ("arguments", or "parameters" for Llama 3).
    array: the JSON is an array of calls (Mistral). id_length/id_prefix: the ids the parser gives calls
    (Mistral's templates want 9 letters/digits). system_prompt: the tools are described in a system message
    by us (generic format), not by the template."""

    name: str
    trigger: str
    prefix: str
    suffix: str
    args_key: str = "arguments"
    array: bool = False
    id_length: int = 24
    id_prefix: str = "call_"
    system_prompt: bool = False

    # -- schema ------------------------------------------------------------------------------------------

    def call_schema(self, tools: Sequence[dict], tool_choice: ToolChoice | str | dict | None = "required") -> dict:
        """The JSON schema of ONE call object: {"name": <a listed function (or only the named one)>,
        <args_key>: <that function's parameters schema>}. `tools` and `tool_choice` as the API takes them."""
        tools = check_tools(tools)
        choice = tool_choice if isinstance(tool_choice, ToolChoice) else check_tool_choice(tool_choice, tools)
        if choice.mode == "none":
            raise InvalidArgumentError("tool_choice 'none' allows no call: there is no call schema",
                                       param="tool_choice")
        alternatives = []
        for tool in tools:
            fn = tool["function"]
            if choice.name is not None and fn["name"] != choice.name:
                continue
            params = _parameters(fn)
            alternatives.append({
                "type": "object",
                "properties": {"name": {"type": "string", "const": fn["name"]}, self.args_key: params},
                "required": ["name", self.args_key],
                "additionalProperties": False,
            })
        return alternatives[0] if len(alternatives) == 1 else {"anyOf": alternatives}

    def schema(self, tools: Sequence[dict], tool_choice: ToolChoice | str | dict | None = "required",
               parallel_tool_calls: bool = True) -> dict:
        """The schema of what goes between prefix and suffix: one call, or for array formats a list of calls
        (at most one unless parallel_tool_calls)."""
        one = self.call_schema(tools, tool_choice)
        if not self.array:
            return one
        schema: dict[str, Any] = {"type": "array", "items": one, "minItems": 1}
        if not parallel_tool_calls:
            schema["maxItems"] = 1
        return schema

    def constraint(self, tools: Sequence[dict], tool_choice: object = None,
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
            pattern = ToolCallPattern(self.prefix, self.schema(tools, choice, True), self.suffix)
            return ToolCallConstraint((pattern,), trigger, parallel=False, separator="")
        open_, close = ("[", "]") if self.array else ("", "")
        patterns = []
        for tool in tools:
            fn = tool["function"]
            if choice.name is not None and fn["name"] != choice.name:
                continue
            head = f'{{"name": {json.dumps(fn["name"], ensure_ascii=False)}, "{self.args_key}": '
            patterns.append(ToolCallPattern(self.prefix + open_ + head, _parameters(fn), "}" + close + self.suffix))
        separator = "; " if _is_llama(self) else "\n"
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

    # -- parsing -----------------------------------------------------------------------------------------

    def new_id(self) -> str:
        return new_call_id(self.id_length, self.id_prefix)

    def parse(self, text: str, tools: Sequence[dict] | None = None) -> ParseResult:
        """Split generated `text` into content and tool calls. A call must be complete, well-formed JSON of
        a listed function (when `tools` is given) with an object of arguments; anything else, from where it
        went wrong, is content."""
        names = set(tool_names(check_tools(tools))) if tools is not None else None
        content: list[str] = []
        calls: list[ParsedToolCall] = []
        pos = 0
        while True:
            start = _find_start(self, text, pos)
            if start is None:
                content.append(text[pos:])
                break
            content.append(text[pos:start])
            got = _parse_block(self, text, start, names)
            if got is None:  # malformed: the rest is content
                content.append(text[start:])
                break
            block_calls, end = got
            calls.extend(ParsedToolCall(self.new_id(), n, a) for n, a in block_calls)
            pos = end
        return ParseResult(_join_content(content), calls)

    def stream(self, tools: Sequence[dict] | None = None) -> ToolCallStream:
        """A streaming parser of this format (see ToolCallStream)."""
        return ToolCallStream(self, tools)


def _parameters(fn: dict) -> dict:
    """A function's arguments schema: its parameters (an object schema, as given), or for a function without
    parameters the empty object (no properties at all: JSON schema would otherwise allow any)."""
    params = fn.get("parameters") or {"type": "object", "properties": {}, "additionalProperties": False}
    return params if "type" in params else {"type": "object", **params}


def _join_content(parts: list[str]) -> str:
    """The text around calls, joined; whitespace at its start and end is dropped."""
    return "".join(parts).strip(_WS)


HERMES = ToolCallFormat("hermes", trigger="<tool_call>", prefix="<tool_call>\n", suffix="\n</tool_call>")
LLAMA3_JSON = ToolCallFormat("llama3_json", trigger='{"name"', prefix="", suffix="", args_key="parameters")
MISTRAL = ToolCallFormat("mistral", trigger="[TOOL_CALLS]", prefix="[TOOL_CALLS]", suffix="", array=True,
                         id_length=9, id_prefix="")
GENERIC = ToolCallFormat("generic", trigger="<tool_call>", prefix="<tool_call>\n", suffix="\n</tool_call>",
                         system_prompt=True)
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
    if "[TOOL_CALLS]" in src:
        return MISTRAL
    if "<tool_call>" in src:
        return HERMES
    if "<|python_tag|>" in src or ("<|start_header_id|>" in src and '"parameters"' in src):
        return LLAMA3_JSON
    return GENERIC


def tools_system_prompt(tools: Sequence[dict], fmt: ToolCallFormat = GENERIC) -> str:
    """The description of `tools` and of the call syntax that the generic format puts in a system message."""
    listed = "\n".join(json.dumps(t, ensure_ascii=False) for t in tools)
    example = fmt.call_text([("<function-name>", '{"<argument>": <value>}')])
    return ("You may call the functions below to help with the user's request. Each is described in JSON:\n"
            f"{listed}\n"
            "To call a function, answer with exactly this, once per call, and nothing after it:\n"
            f"{example}\n"
            "The arguments must be a JSON object that follows the function's parameters. "
            "When no function is needed, answer in plain text.")


# -- scanning --------------------------------------------------------------------------------------------

_WS = " \t\r\n"
_PYTHON_TAG = "<|python_tag|>"
_ARG_KEYS = ("arguments", "parameters")
_LLAMA_START = re.compile(r'<\|python_tag\|>|\{\s*"(?:name|type)"')
_LLAMA_PARTIALS = ('"name"', '"type"')


def _is_llama(fmt: ToolCallFormat) -> bool:
    return fmt.name == "llama3_json"


def _find_start(fmt: ToolCallFormat, text: str, pos: int) -> int | None:
    """Where the next call starts in text[pos:], or None."""
    if _is_llama(fmt):
        m = _LLAMA_START.search(text, pos)
        return m.start() if m else None
    i = text.find(fmt.trigger, pos)
    return None if i < 0 else i


def _partial_start(fmt: ToolCallFormat, text: str, pos: int) -> int | None:
    """The start of a tail of text[pos:] that could become a call start with more text (to hold back while
    streaming), or None."""
    if _is_llama(fmt):
        best = None
        tag = _PYTHON_TAG
        for k in range(min(len(tag) - 1, len(text) - pos), 0, -1):
            if tag.startswith(text[len(text) - k:]):
                best = len(text) - k
                break
        j = text.rfind("{", pos)
        if j >= 0:
            rest = text[j + 1:].lstrip(_WS)
            if len(text) - j < 64 and any(p.startswith(rest) for p in _LLAMA_PARTIALS):
                best = j if best is None else min(best, j)
        return best
    trig = fmt.trigger
    for k in range(min(len(trig) - 1, len(text) - pos), 0, -1):
        if trig.startswith(text[len(text) - k:]):
            return len(text) - k
    return None


class _ObjectScanner:
    """An incremental scanner of one JSON object (a call): it follows strings and nesting, and records the
    top-level members' keys and value spans, so that a stream can tell the name and where the arguments start
    and end before the object is complete. Full validity is checked with json.loads once it is complete."""

    def __init__(self) -> None:
        self.buf = ""
        self.i = 0
        self.depth = 0
        self.stack: list[str] = []
        self.in_str = False
        self.esc = False
        self.phase = "start"  # start, key, colon, value, prim, nested, string, comma, done, invalid
        self.key_start = 0
        self.key: str | None = None
        self.value_start = 0
        self.members: dict[str, tuple[int, int | None]] = {}  # key -> (value start, value end or None)
        self.order: list[str] = []
        self.n_members = 0
        self.end = 0

    @property
    def done(self) -> bool:
        return self.phase == "done"

    @property
    def invalid(self) -> bool:
        return self.phase == "invalid"

    def feed(self, text: str) -> None:
        self.buf += text
        buf = self.buf
        n = len(buf)
        while self.i < n and self.phase not in ("done", "invalid"):
            c = buf[self.i]
            if self.in_str:
                if self.esc:
                    self.esc = False
                elif c == "\\":
                    self.esc = True
                elif c == '"':
                    self.in_str = False
                    if self.depth == 1:
                        self._string_ended()
                self.i += 1
                continue
            self._char(c)
            self.i += 1

    def _string_ended(self) -> None:
        if self.phase == "key":
            try:
                self.key = json.loads(self.buf[self.key_start:self.i + 1])
            except ValueError:
                self.phase = "invalid"
                return
            self.phase = "colon"
        elif self.phase == "string":
            self._end_member(self.i + 1)

    def _begin_member(self, start: int) -> None:
        assert self.key is not None
        if self.key in self.members:  # a repeated key: ambiguous, not a call we accept
            self.phase = "invalid"
            return
        self.members[self.key] = (start, None)
        self.order.append(self.key)

    def _end_member(self, end: int) -> None:
        assert self.key is not None
        self.members[self.key] = (self.members[self.key][0], end)
        self.n_members += 1
        self.phase = "comma"

    def _char(self, c: str) -> None:
        phase = self.phase
        if phase == "start":
            if c in _WS:
                return
            if c != "{":
                self.phase = "invalid"
                return
            self.depth, self.stack, self.phase = 1, ["{"], "key"
            return
        if self.depth >= 2:  # inside a member's value
            if c == '"':
                self.in_str = True
            elif c in "{[":
                self.stack.append(c)
                self.depth += 1
            elif c in "}]":
                if self.stack[-1] != ("{" if c == "}" else "["):
                    self.phase = "invalid"
                    return
                self.stack.pop()
                self.depth -= 1
                if self.depth == 1:
                    self._end_member(self.i + 1)
            return
        # depth 1: between the call object's members
        if phase == "prim":
            if c in _WS or c in ",}":
                self._end_member(self.i)
                phase = self.phase
                if c in _WS:
                    return
            else:
                return
        if c in _WS:
            return
        if phase == "key":
            if c == '"':
                self.in_str, self.key_start = True, self.i
            elif c == "}" and self.n_members == 0 and not self.members:
                self._close()
            else:
                self.phase = "invalid"
        elif phase == "colon":
            self.phase = "value" if c == ":" else "invalid"
        elif phase == "value":
            self._begin_member(self.i)
            if self.phase == "invalid":
                return
            if c == '"':
                self.in_str, self.phase = True, "string"
            elif c in "{[":
                self.stack.append(c)
                self.depth += 1
                self.phase = "nested"
            elif c in ",}]:":
                self.phase = "invalid"
            else:
                self.phase = "prim"
        elif phase == "comma":
            if c == ",":
                self.phase = "key"
            elif c == "}":
                self._close()
            else:
                self.phase = "invalid"
        else:
            self.phase = "invalid"

    def _close(self) -> None:
        self.stack.pop()
        self.depth = 0
        self.phase = "done"
        self.end = self.i + 1

    def value(self, key: str) -> str | None:
        span = self.members.get(key)
        if span is None or span[1] is None:
            return None
        return self.buf[span[0]:span[1]]


def _object_call(fmt: ToolCallFormat, text: str, pos: int,
                 names: set[str] | None) -> tuple[tuple[str, str], int] | None:
    """The call object that starts at `pos` and where it ends, or None if none complete and valid is there."""
    sc = _scan_object(text, pos)
    if not sc.done:
        return None
    call = _call_from_object(fmt, sc, names)
    return None if call is None else (call, pos + sc.end)


def _call_from_object(fmt: ToolCallFormat, scanner: _ObjectScanner,
                      names: set[str] | None) -> tuple[str, str] | None:
    """(name, arguments JSON text) of a complete scanned call object, or None if it is not a valid call."""
    try:
        obj = json.loads(scanner.buf[:scanner.end])
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    if not isinstance(name, str) or (names is not None and name not in names):
        return None
    if set(obj) - {"name", "type", "id", *_ARG_KEYS}:
        return None
    keys = [k for k in _ARG_KEYS if k in obj]
    if not keys:
        return name, "{}"
    if len(keys) > 1 or not isinstance(obj[keys[0]], dict):
        return None
    return name, scanner.value(keys[0]) or "{}"


def _skip_ws(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WS:
        pos += 1
    return pos


def _scan_object(text: str, pos: int) -> _ObjectScanner:
    sc = _ObjectScanner()
    sc.feed(text[pos:])
    return sc


def _parse_block(fmt: ToolCallFormat, text: str, start: int,
                 names: set[str] | None) -> tuple[list[tuple[str, str]], int] | None:
    """Parse one call block starting at `start` (where _find_start found it): its calls and where it ends;
    None when it is malformed or incomplete."""
    pos = start
    if fmt.array:
        pos = _skip_ws(text, pos + len(fmt.trigger))
        if not text.startswith("[", pos):
            return None
        pos += 1
        calls = []
        while True:
            pos = _skip_ws(text, pos)
            found = _object_call(fmt, text, pos, names)
            if found is None:
                return None
            calls.append(found[0])
            pos = _skip_ws(text, found[1])
            if text.startswith(",", pos):
                pos += 1
                continue
            if text.startswith("]", pos):
                return calls, pos + 1 + (len(fmt.suffix) if fmt.suffix and text.startswith(fmt.suffix, pos + 1) else 0)
            return None
    if _is_llama(fmt):
        if text.startswith(_PYTHON_TAG, pos):
            pos = _skip_ws(text, pos + len(_PYTHON_TAG))
        found = _object_call(fmt, text, pos, names)
        if found is None:
            return None
        call, end = found
        after = _skip_ws(text, end)
        if text.startswith(";", after):  # calls separated by ';'
            end = after + 1
        return [call], end
    # hermes / generic: trigger, JSON, closing tag (optional when the text ends or the next call starts)
    found = _object_call(fmt, text, _skip_ws(text, pos + len(fmt.trigger)), names)
    if found is None:
        return None
    call, end = found
    closing = fmt.suffix.strip()
    after = _skip_ws(text, end)
    if closing and text.startswith(closing, after):
        end = after + len(closing)
    return [call], end


# -- streaming -------------------------------------------------------------------------------------------

class ToolCallStream:
    """Feed generated text chunks, get OpenAI-style deltas (`choices[i].delta` without the role):
    {"content": "..."} for text, and for each call first
    {"tool_calls": [{"index": i, "id": ..., "type": "function", "function": {"name": ..., "arguments": ""}}]}
    then {"tool_calls": [{"index": i, "function": {"arguments": "<fragment>"}}]} as the arguments arrive.

    Text that may be the start of a call is held back until it is known, and so is whitespace at the end of
    the content (the content is stripped, as `parse` strips it). A call's header is sent once its name is
    known (and is a listed function) and its arguments object has begun; the arguments then stream. For
    well-formed output the deltas reassemble to exactly what `ToolCallFormat.parse` returns (ids aside).
    A stream cannot take back what it has sent: when a call's arguments turn out malformed after its header
    went out (or the text ends inside them, e.g. at max_tokens), that call keeps the arguments sent so far,
    the rest of the text is content, and `malformed` is True; `parse` of the same text returns it all as
    content. After a malformed block the rest of the stream is content, as in `parse`.
    """

    def __init__(self, fmt: ToolCallFormat | str, tools: Sequence[dict] | None = None) -> None:
        self.fmt = get_format(fmt)
        self.names = set(tool_names(check_tools(tools))) if tools is not None else None
        self.buf = ""  # text not yet decided
        self.calls: list[dict] = []  # {"id", "name", "arguments"} sent so far
        self.malformed = False
        self._state = "text"  # text, block, content_only
        self._block: _BlockState | None = None
        self._sent_content: list[str] = []
        self._pending_ws = ""
        self._finished = False

    @property
    def has_tool_calls(self) -> bool:
        return bool(self.calls)

    def result(self) -> ParseResult:
        """What has been streamed so far, as a ParseResult (complete after finish())."""
        return ParseResult("".join(self._sent_content),
                           [ParsedToolCall(c["id"], c["name"], c["arguments"]) for c in self.calls])

    def feed(self, chunk: str) -> list[dict]:
        """The deltas that `chunk` (the next piece of generated text) makes known."""
        if self._finished:
            raise InvalidArgumentError("feed() after finish()")
        if not isinstance(chunk, str):
            raise InvalidArgumentError(f"chunk must be a str, got {_type_name(chunk)}")
        self.buf += chunk
        out: list[dict] = []
        self._run(out, final=False)
        return _merge(out)

    def finish(self) -> list[dict]:
        """The deltas for what was held back; call once, after the last chunk."""
        out: list[dict] = []
        if not self._finished:
            self._run(out, final=True)
            self._finished = True
        return _merge(out)

    def _content(self, out: list[dict], text: str) -> None:
        text = self._pending_ws + text
        if not self._sent_content:
            text = text.lstrip(_WS)
        kept = text.rstrip(_WS)
        self._pending_ws = text[len(kept):]
        if kept:
            self._sent_content.append(kept)
            out.append({"content": kept})

    def _run(self, out: list[dict], final: bool) -> None:
        while True:
            if self._state == "content_only":
                self._content(out, self.buf)
                self.buf = ""
                return
            if self._state == "text":
                start = _find_start(self.fmt, self.buf, 0)
                if start is None:
                    hold = None if final else _partial_start(self.fmt, self.buf, 0)
                    cut = len(self.buf) if hold is None else hold
                    self._content(out, self.buf[:cut])
                    self.buf = self.buf[cut:]
                    return
                self._content(out, self.buf[:start])
                self.buf = self.buf[start:]
                self._block = _BlockState(self)
                self._state = "block"
            assert self._block is not None
            status = self._block.step(out, final)
            if status == "wait":
                return
            if status == "malformed":
                self.malformed = True
                self.buf = self._block.unsent_text()
                self._block = None
                self._state = "content_only"
                continue
            self.buf = self._block.rest()
            self._block = None
            self._state = "text"


class _BlockState:
    """One call block being streamed: stream.buf starts with its trigger."""

    def __init__(self, stream: ToolCallStream) -> None:
        self.s = stream
        self.fmt = stream.fmt
        self.pos = 0
        self.phase = "head"  # head, array_item, obj, after_obj
        self.scanner = _ObjectScanner()
        self.obj_start = 0
        self.current: int | None = None  # index in stream.calls of the call whose header was sent
        self.args_key = "arguments"  # the key of the current call's arguments ("parameters" for Llama 3)
        self.args_sent = 0
        self.sent_any = False
        self.sent_upto = 0  # in stream.buf: the end of what was sent as calls
        self.end = 0

    def rest(self) -> str:
        return self.s.buf[self.end:]

    def unsent_text(self) -> str:
        return self.s.buf[self.sent_upto:] if self.sent_any else self.s.buf

    def step(self, out: list[dict], final: bool) -> str:
        buf = self.s.buf
        fmt = self.fmt
        more = "malformed" if final else "wait"
        while True:
            if self.phase == "head":
                if fmt.array:
                    p = _skip_ws(buf, len(fmt.trigger))
                    if p >= len(buf):
                        return more
                    if buf[p] != "[":
                        return "malformed"
                    self.pos = p + 1
                    self.phase = "array_item"
                    continue
                if _is_llama(fmt):
                    p = 0
                    if buf.startswith(_PYTHON_TAG):
                        p = _skip_ws(buf, len(_PYTHON_TAG))
                else:
                    p = _skip_ws(buf, len(fmt.trigger))
                if p >= len(buf):
                    return more
                self._begin_object(p)
                continue
            if self.phase == "array_item":
                p = _skip_ws(buf, self.pos)
                if p >= len(buf):
                    return more
                self._begin_object(p)
                continue
            if self.phase == "obj":
                sc = self.scanner
                new = buf[self.obj_start + len(sc.buf):]
                if new:
                    sc.feed(new)
                if sc.invalid:
                    return "malformed"
                self._stream_call(out, sc)
                if not sc.done:
                    return more
                call = _call_from_object(fmt, sc, self.s.names)
                if call is None:
                    return "malformed"
                self._complete_call(out, call)
                self.pos = self.sent_upto = self.obj_start + sc.end
                self.phase = "after_obj"
                continue
            # after_obj
            p = _skip_ws(buf, self.pos)
            if fmt.array:
                if p >= len(buf):
                    return more
                if buf[p] == ",":
                    self.pos = p + 1
                    self.phase = "array_item"
                    continue
                if buf[p] == "]":
                    self.end = self.sent_upto = p + 1
                    return "done"
                return "malformed"
            closing = ";" if _is_llama(fmt) else fmt.suffix.strip()
            rest = buf[p:]
            if closing and rest.startswith(closing):
                self.end = self.sent_upto = p + len(closing)
                return "done"
            if not final and closing.startswith(rest):
                return "wait"  # only whitespace so far, or the start of the closing text
            self.end = self.pos
            return "done"

    def _begin_object(self, p: int) -> None:
        self.obj_start = p
        self.scanner = _ObjectScanner()
        self.current = None
        self.args_sent = 0
        self.phase = "obj"

    def _stream_call(self, out: list[dict], sc: _ObjectScanner) -> None:
        """Send the header once the name is known and the arguments object has begun (the name first), then
        the arguments as they arrive."""
        if self.current is None:
            keys = [k for k in sc.order if k not in ("type", "id")]
            if len(keys) < 2 or keys[0] != "name" or keys[1] not in _ARG_KEYS:
                return
            name_start, name_end = sc.members["name"]
            args_start = sc.members[keys[1]][0]
            if name_end is None or sc.buf[args_start] != "{":
                return
            try:
                name = json.loads(sc.buf[name_start:name_end])
            except ValueError:
                return
            if not isinstance(name, str) or (self.s.names is not None and name not in self.s.names):
                return
            self.current = self._header(out, name)
            self.args_key = keys[1]
        start, end = sc.members[self.args_key]
        upto = end if end is not None else sc.i
        if upto > start + self.args_sent:
            self._send_args(out, sc.buf[start + self.args_sent:upto])
        self.sent_upto = self.obj_start + upto

    def _header(self, out: list[dict], name: str) -> int:
        index = len(self.s.calls)
        call = {"id": self.fmt.new_id(), "name": name, "arguments": ""}
        self.s.calls.append(call)
        self.sent_any = True
        out.append({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                    "function": {"name": name, "arguments": ""}}]})
        return index

    def _send_args(self, out: list[dict], frag: str) -> None:
        assert self.current is not None
        self.s.calls[self.current]["arguments"] += frag
        self.args_sent += len(frag)
        out.append({"tool_calls": [{"index": self.current, "function": {"arguments": frag}}]})

    def _complete_call(self, out: list[dict], call: tuple[str, str]) -> None:
        name, args = call
        if self.current is None:  # the arguments came before the name, or there were none: all now
            self.current = self._header(out, name)
            self._send_args(out, args)
        self.current = None


def _merge(deltas: list[dict]) -> list[dict]:
    """Adjacent content deltas joined; adjacent argument fragments of the same call joined."""
    merged: list[dict] = []
    for d in deltas:
        if merged:
            last = merged[-1]
            if "content" in d and "content" in last:
                last["content"] += d["content"]
                continue
            if ("tool_calls" in d and "tool_calls" in last and "id" not in d["tool_calls"][0]
                    and "id" not in last["tool_calls"][0]
                    and d["tool_calls"][0]["index"] == last["tool_calls"][0]["index"]):
                last["tool_calls"][0]["function"]["arguments"] += d["tool_calls"][0]["function"]["arguments"]
                continue
        merged.append(d)
    return merged


def reassemble(deltas: Iterable[dict]) -> ParseResult:
    """Deltas put back together the way an OpenAI client does (for tests and for non-streaming callers)."""
    content = ""
    calls: dict[int, dict] = {}
    for d in deltas:
        if "content" in d:
            content += d["content"]
        for tc in d.get("tool_calls", ()):
            entry = calls.setdefault(tc["index"], {"id": "", "name": "", "arguments": ""})
            if "id" in tc:
                entry["id"] = tc["id"]
            fn = tc.get("function", {})
            entry["name"] += fn.get("name", "")
            entry["arguments"] += fn.get("arguments", "")
    return ParseResult(content.strip(), [ParsedToolCall(c["id"], c["name"], c["arguments"])
                                         for _, c in sorted(calls.items())])
