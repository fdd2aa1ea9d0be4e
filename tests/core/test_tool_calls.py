"""Tool-call formats (pyllama90a.core.toolcalls): detection from templates, checking tools and tool_choice, the
schemas for constrained decoding, and parsing of generated text, whole and streamed."""
from __future__ import annotations

import json
import random
import re

import pytest

from pyllama90a.core.chat.messages import normalize_messages
from pyllama90a.core.chat.template import ChatTemplate
from pyllama90a.core.toolcalls import (
    FORMATS,
    ToolCallStream,
    check_tool_choice,
    check_tools,
    detect_format,
    get_format,
    reassemble,
)
from pyllama90a.errors import InvalidArgumentError
from support.tool_templates import HERMES_STYLE, LLAMA3_STYLE, MISTRAL_STYLE, NO_ARGS, PLAIN_STYLE, TIME, TOOLS, WEATHER

HERMES, LLAMA3, MISTRAL, GENERIC = (get_format(n) for n in ("hermes", "llama3_json", "mistral", "generic"))

# (format, generated text, expected content, expected [(name, arguments as parsed JSON)])
WELL_FORMED = [
    (HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
     "", [("get_weather", {"city": "Paris"})]),
    (HERMES, 'Let me look.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Zürich", "unit": "c"}}\n'
             '</tool_call>\n<tool_call>\n{"name": "get_time", "arguments": {"zone": "a}b\\"{["}}\n</tool_call>',
     "Let me look.", [("get_weather", {"city": "Zürich", "unit": "c"}), ("get_time", {"zone": 'a}b"{['})]),
    (HERMES, '<tool_call>{"name":"ping","arguments":{}}</tool_call>', "", [("ping", {})]),
    (HERMES, '<tool_call>\n{"name": "ping"}\n</tool_call>', "", [("ping", {})]),
    (HERMES, '<tool_call>\n{"arguments": {"zone": "UTC"}, "name": "get_time"}\n</tool_call>', "",
     [("get_time", {"zone": "UTC"})]),
    (HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}', "",  # no closing tag: EOS
     [("get_weather", {"city": "Rome"})]),
    (HERMES, 'a < b and <tool_ stuff', "a < b and <tool_ stuff", []),
    (LLAMA3, '{"name": "get_weather", "parameters": {"city": "Oslo", "unit": "f"}}', "",
     [("get_weather", {"city": "Oslo", "unit": "f"})]),
    (LLAMA3, '<|python_tag|>{"name": "get_time", "parameters": {"zone": "PST"}}; '
             '{"name": "get_weather", "parameters": {"city": "Lima"}}', "",
     [("get_time", {"zone": "PST"}), ("get_weather", {"city": "Lima"})]),
    (LLAMA3, '{"type": "function", "name": "get_time", "parameters": {"zone": "X"}}', "",
     [("get_time", {"zone": "X"})]),
    (LLAMA3, 'Use {braces} freely: {"x": 1}', 'Use {braces} freely: {"x": 1}', []),
    (MISTRAL, '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Nice"}}, '
              '{"name": "get_time", "arguments": {"zone": "CET"}}]', "",
     [("get_weather", {"city": "Nice"}), ("get_time", {"zone": "CET"})]),
    (MISTRAL, 'Sure [TOOL_CALLS] [ {"name": "ping", "arguments": {}, "id": "abcdefghi"} ]', "Sure", [("ping", {})]),
    (GENERIC, 'x\n\n<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>\nDone.', "x\n\n\nDone.",
     [("ping", {})]),
]

MALFORMED = [
    (HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {"city": Paris}}\n</tool_call>'),  # bad JSON
    (HERMES, '<tool_call>\n{"name": "delete_everything", "arguments": {}}\n</tool_call>'),  # not a listed function
    (HERMES, '<tool_call>\n{"name": "get_weather", "arguments": "city=Paris"}\n</tool_call>'),  # not an object
    (HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {}, "extra": 1}\n</tool_call>'),
    (HERMES, '<tool_call>\n{"name": "get_weather", "name": "get_time", "arguments": {}}\n</tool_call>'),
    (HERMES, '<tool_call>\n[1, 2]\n</tool_call>'),
    (HERMES, 'Hello <tool_call> {"name": 5, "arguments": {}} </tool_call>'),
    (LLAMA3, '<|python_tag|>brave_search.call(query="weather")'),
    (LLAMA3, '{"name": "get_weather", "parameters": {"city": "Oslo"}, "arguments": {}}'),
    (MISTRAL, '[TOOL_CALLS]{"name": "ping", "arguments": {}}'),  # not an array
    (MISTRAL, '[TOOL_CALLS][{"name": "ping", "arguments": {}} {"name": "ping", "arguments": {}}]'),
]

# text that ends inside a call (max_tokens, a stop string): (format, text, content, complete calls)
CUT_OFF = [
    (HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par', "", []),
    (HERMES, '<tool_call>', "", []),
    (HERMES, 'Sure.\n<tool_call>\n{"na', "Sure.", []),
    (HERMES, '<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>\n<tool_call>\n{"name": "get_weather", '
             '"arguments": {"ci', "", [("ping", {})]),
    (MISTRAL, '[TOOL_CALLS][{"name": "ping", "arguments": {}}', "", [("ping", {})]),  # array not closed
    (LLAMA3, 'Here: {"name": "get_time", "parameters": {"zone": "P', "Here:", []),
]


def _ids(cases: list) -> list[str]:
    return [f"{case[0].name}-{i}" for i, case in enumerate(cases)]


def _calls(result) -> list:
    return [(c.name, json.loads(c.arguments)) for c in result.tool_calls]


def _stream(fmt, text: str, chunks: list[int] | None, tools=TOOLS) -> tuple[list[dict], ToolCallStream]:
    st = fmt.stream(tools)
    deltas: list[dict] = []
    pos = 0
    for n in chunks or [len(text)]:
        deltas += st.feed(text[pos:pos + n])
        pos += n
    deltas += st.feed(text[pos:])
    deltas += st.finish()
    return deltas, st


def _chunkings(text: str) -> list[list[int]]:
    rng = random.Random(len(text))
    out = [[1] * len(text), [len(text)], [2] * (len(text) // 2)]
    for _ in range(8):
        sizes, left = [], len(text)
        while left > 0:
            sizes.append(rng.randint(1, 9))
            left -= sizes[-1]
        out.append(sizes)
    return out


# -- detection -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("source, name", [(HERMES_STYLE, "hermes"), (LLAMA3_STYLE, "llama3_json"),
                                          (MISTRAL_STYLE, "mistral"), (PLAIN_STYLE, "generic"), (None, "generic")],
                         ids=["hermes", "llama3", "mistral", "plain", "none"])
def test_format_is_detected_from_the_templates_markers(source, name) -> None:
    assert detect_format(source).name == name
    if source is not None:
        assert ChatTemplate(source).tool_call_format.name == name


def test_the_default_models_template_has_no_tool_syntax(model) -> None:
    assert detect_format(model.metadata("tokenizer.chat_template")) is GENERIC


def test_format_override() -> None:
    assert ChatTemplate(PLAIN_STYLE, tool_call_format="mistral").tool_call_format is MISTRAL
    assert get_format(HERMES) is HERMES
    with pytest.raises(InvalidArgumentError, match="tool_call_format must be one of"):
        get_format("functionary")
    with pytest.raises(InvalidArgumentError, match="tool_call_format"):
        ChatTemplate(PLAIN_STYLE, tool_call_format="nope")


# -- checking tools and tool_choice ----------------------------------------------------------------------

@pytest.mark.parametrize("tools, message", [
    ({"type": "function"}, r"tools must be a list"),
    (["get_weather"], r"tools\[0\] must be an object"),
    ([{"type": "retrieval", "function": {"name": "x"}}], r"tools\[0\]\.type must be 'function'"),
    ([{"type": "function"}], r"tools\[0\]\.function must be an object"),
    ([WEATHER, {"type": "function", "function": {"name": "bad name!"}}], r"tools\[1\]\.function\.name"),
    ([{"type": "function", "function": {"name": ""}}], r"tools\[0\]\.function\.name"),
    ([WEATHER, WEATHER], r"tools\[1\]\.function\.name 'get_weather' is listed twice"),
    ([{"type": "function", "function": {"name": "f", "parameters": "{}"}}], r"tools\[0\]\.function\.parameters"),
    ([{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}],
     r"tools\[0\]\.function\.parameters must describe an object"),
    ([{"type": "function", "function": {"name": "f", "description": 3}}], r"tools\[0\]\.function\.description"),
])
def test_bad_tools_name_the_field(tools, message) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        check_tools(tools)


def test_tool_choice_is_checked_against_the_tools() -> None:
    assert check_tool_choice(None, TOOLS).mode == "auto"
    assert check_tool_choice(None, []).mode == "none"
    assert check_tool_choice("auto", []).mode == "none"
    named = check_tool_choice({"type": "function", "function": {"name": "get_time"}}, TOOLS)
    assert (named.mode, named.name) == ("required", "get_time")
    with pytest.raises(InvalidArgumentError,
                       match=r"tool_choice\.function\.name 'get_date' is not a function in tools"):
        check_tool_choice({"type": "function", "function": {"name": "get_date"}}, TOOLS)
    with pytest.raises(InvalidArgumentError, match=r"tool_choice 'required' needs a non-empty tools list"):
        check_tool_choice("required", [])
    with pytest.raises(InvalidArgumentError, match=r"tool_choice must be 'none', 'auto', 'required'"):
        check_tool_choice("any", TOOLS)
    with pytest.raises(InvalidArgumentError, match=r"tool_choice must be \{'type': 'function'"):
        check_tool_choice({"type": "function", "name": "get_time"}, TOOLS)
    with pytest.raises(InvalidArgumentError, match="tool_choice must be a string or an object"):
        check_tool_choice(1, TOOLS)


# -- schemas for constrained decoding --------------------------------------------------------------------

def test_required_schema_allows_any_listed_function_with_valid_arguments() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = HERMES.call_schema(TOOLS, "required")
    assert [alt["properties"]["name"]["const"] for alt in schema["anyOf"]] == ["get_weather", "get_time", "ping"]
    assert list(schema["anyOf"][0]["properties"]) == ["name", "arguments"]  # name first: the trigger's order
    jsonschema.Draft202012Validator.check_schema(schema)
    ok = [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}},
          {"name": "get_time", "arguments": {"zone": "UTC"}}, {"name": "ping", "arguments": {}}]
    bad = [{"name": "get_weather", "arguments": {"unit": "c"}},  # required city missing
           {"name": "get_weather", "arguments": {"city": "Paris", "unit": "kelvin"}},  # not in the enum
           {"name": "get_date", "arguments": {}}, {"name": "ping"}, {"name": "ping", "arguments": {}, "x": 1},
           {"name": "ping", "arguments": {"x": 1}}]  # a function without parameters takes none
    for instance in ok:
        jsonschema.validate(instance, schema)
    for instance in bad:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(instance, schema)


def test_named_choice_schema_allows_only_that_function() -> None:
    jsonschema = pytest.importorskip("jsonschema")
    choice = {"type": "function", "function": {"name": "get_time"}}
    schema = LLAMA3.call_schema(TOOLS, choice)
    assert schema["properties"]["name"] == {"type": "string", "const": "get_time"}
    assert schema["properties"]["parameters"] == TIME["function"]["parameters"]
    jsonschema.validate({"name": "get_time", "parameters": {"zone": "UTC"}}, schema)
    for instance in ({"name": "get_weather", "parameters": {"city": "x"}}, {"name": "get_time", "arguments": {}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(instance, schema)
    # a function without parameters takes an (empty) object
    assert HERMES.call_schema([NO_ARGS], "required")["properties"]["arguments"]["type"] == "object"


RECURSIVE = {"type": "object", "required": ["name", "child"],
             "properties": {"name": {"type": "string"}, "child": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}}
WITH_DEFS = {"type": "object", "$defs": {"Unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"],
             "properties": {"city": {"type": "string"}, "unit": {"$ref": "#/$defs/Unit"}, "note": {"const": {
                 "$ref": "#/data"}}}}  # (a const's value is data: it stays as it is)


@pytest.mark.parametrize(("parameters", "good", "bad"), [
    (RECURSIVE, {"name": "a", "child": {"name": "b", "child": None}},
     {"name": "a", "child": [{"name": "w", "arguments": {"name": "b", "child": None}}]}),
    (WITH_DEFS, {"city": "Paris", "unit": "c"}, {"city": "Paris", "unit": "kelvin"}),
], ids=["ref-to-root", "defs"])
def test_array_calls_keep_the_parameters_own_refs(parameters, good, bad) -> None:
    # nested in the array of calls (parallel Mistral calls), "#" and "#/$defs/..." pointed into the array: the
    # constraint took calls as a tool's arguments, or failed ("Pointer '/$defs/Unit' does not exist")
    jsonschema = pytest.importorskip("jsonschema")
    tools = [{"type": "function", "function": {"name": "w", "parameters": parameters}}]
    schema = MISTRAL.schema(tools, "required", parallel_tool_calls=True)
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate([{"name": "w", "arguments": good}], schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate([{"name": "w", "arguments": bad}], schema)
    if "note" in parameters["properties"]:
        assert schema["$defs"]["tool_0"]["properties"]["note"] == {"const": {"$ref": "#/data"}}
    assert "$defs" not in HERMES.call_schema([TIME], "required")  # (parameters without refs stay inline)


def test_constraints_per_tool_choice() -> None:
    auto = HERMES.constraint(TOOLS, "auto")
    assert auto.trigger == "<tool_call>" and auto.parallel and auto.separator == "\n"
    assert [(p.prefix, p.suffix) for p in auto.patterns] == [
        ('<tool_call>\n{"name": "get_weather", "arguments": ', "}\n</tool_call>"),
        ('<tool_call>\n{"name": "get_time", "arguments": ', "}\n</tool_call>"),
        ('<tool_call>\n{"name": "ping", "arguments": ', "}\n</tool_call>")]
    assert auto.patterns[0].schema == WEATHER["function"]["parameters"]
    # no parameters: the empty object only
    assert auto.patterns[2].schema == {"type": "object", "properties": {}, "additionalProperties": False}
    assert HERMES.constraint(TOOLS, None).trigger == "<tool_call>"  # None with tools is "auto"
    required = HERMES.constraint(TOOLS, "required", parallel_tool_calls=False)
    assert required.trigger is None and len(required.patterns) == 3 and not required.parallel
    assert HERMES.constraint(TOOLS, "none") is None and HERMES.constraint([], None) is None
    named = LLAMA3.constraint(TOOLS, {"type": "function", "function": {"name": "get_time"}})
    assert [(p.prefix, p.schema, p.suffix) for p in named.patterns] == [
        ('{"name": "get_time", "parameters": ', TIME["function"]["parameters"], "}")]
    assert named.trigger is None and named.separator == "; "
    one = MISTRAL.constraint(TOOLS, {"type": "function", "function": {"name": "ping"}}, parallel_tool_calls=False)
    assert [(p.prefix, p.suffix) for p in one.patterns] == [('[TOOL_CALLS][{"name": "ping", "arguments": ', "}]")]
    many = MISTRAL.constraint(TOOLS, "auto")
    (pattern,) = many.patterns
    assert (pattern.prefix, pattern.suffix, many.trigger, many.parallel) == ("[TOOL_CALLS]", "", "[TOOL_CALLS]", False)
    assert pattern.schema["type"] == "array" and pattern.schema["minItems"] == 1 and "maxItems" not in pattern.schema
    assert MISTRAL.schema(TOOLS, "required", parallel_tool_calls=False)["maxItems"] == 1
    with pytest.raises(InvalidArgumentError, match="tool_choice"):
        HERMES.constraint(TOOLS, {"type": "function", "function": {"name": "nope"}})
    with pytest.raises(InvalidArgumentError, match=r"tools\[0\]"):
        HERMES.constraint([{"type": "function", "function": {"name": "f", "parameters": []}}], "auto")
    for c in (auto, required, named, one, many):  # plain data, independent of any decoding layer
        for p in c.patterns:
            json.dumps(p.schema)
            assert isinstance(p.prefix, str) and isinstance(p.suffix, str)


@pytest.mark.parametrize("fmt", list(FORMATS.values()), ids=list(FORMATS))
def test_text_that_follows_a_constraint_parses_back(fmt) -> None:
    # what a constrained decoder writes: a pattern's prefix, JSON under its schema, its suffix (and for
    # parallel calls the separator between them); every prefix starts with the trigger of "auto"
    arguments = {"get_weather": '{"city": "Paris", "unit": "c"}', "get_time": '{"zone": "UTC"}', "ping": "{}"}
    for parallel in (False, True):
        c = fmt.constraint(TOOLS, "auto", parallel_tool_calls=parallel)
        assert all(p.prefix.startswith(c.trigger) for p in c.patterns)
        if len(c.patterns) == 1 and c.patterns[0].schema["type"] == "array":
            text = c.patterns[0].prefix + json.dumps(
                [{"name": n, "arguments": json.loads(a)} for n, a in arguments.items()]) + c.patterns[0].suffix
        else:
            calls = [p.prefix + arguments[p.prefix.split('"name": "')[1].split('"')[0]] + p.suffix for p in c.patterns]
            text = "Sure.\n" + (c.separator.join(calls) if c.parallel else calls[0])
        parsed = fmt.parse(text, TOOLS)
        expected = [(n, json.loads(a)) for n, a in arguments.items()]
        assert _calls(parsed) == (expected if c.parallel or len(c.patterns) == 1 else expected[:1])
        assert parsed.content in ("", "Sure.")


@pytest.mark.parametrize("fmt", list(FORMATS.values()), ids=list(FORMATS))
def test_the_trigger_starts_what_the_format_writes_and_it_parses_back(fmt) -> None:
    calls = [("get_weather", {"city": "Paris"}), ("get_time", '{"zone": "UTC"}')]
    text = fmt.call_text(calls)
    assert text.startswith(fmt.trigger) and text.startswith(fmt.prefix)
    parsed = fmt.parse(text, TOOLS)
    assert _calls(parsed) == [("get_weather", {"city": "Paris"}), ("get_time", {"zone": "UTC"})]
    assert parsed.content == ""


# -- parsing ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt, text, content, calls", WELL_FORMED, ids=_ids(WELL_FORMED))
def test_well_formed_output_parses(fmt, text, content, calls) -> None:
    result = fmt.parse(text, TOOLS)
    assert result.content == content
    assert _calls(result) == calls
    ids = [c.id for c in result.tool_calls]
    assert len(set(ids)) == len(ids)
    pattern = r"[A-Za-z0-9]{9}" if fmt is MISTRAL else r"call_[A-Za-z0-9]{24}"
    assert all(re.fullmatch(pattern, i) for i in ids)
    message = result.message()
    assert message["role"] == "assistant"
    if calls:
        assert message["content"] == (content or None)
        assert [tc["function"]["name"] for tc in message["tool_calls"]] == [n for n, _ in calls]
        assert all(tc["type"] == "function" and isinstance(tc["function"]["arguments"], str)
                   for tc in message["tool_calls"])
    else:
        assert "tool_calls" not in message and message["content"] == content


@pytest.mark.parametrize("fmt, text", MALFORMED, ids=_ids(MALFORMED))
def test_malformed_output_is_content(fmt, text) -> None:
    result = fmt.parse(text, TOOLS)
    assert result.tool_calls == [] and result.content == text.strip()


@pytest.mark.parametrize("fmt, text, content, calls", CUT_OFF, ids=_ids(CUT_OFF))
def test_a_cut_off_call_is_neither_content_nor_a_call(fmt, text, content, calls) -> None:
    result = fmt.parse(text, TOOLS)
    assert result.content == content and _calls(result) == calls
    for chunks in _chunkings(text):
        deltas, _st = _stream(fmt, text, chunks)
        joined = reassemble(deltas)
        assert joined.content == content, chunks  # (a call's header already sent cannot be taken back)
        assert [(n, json.loads(a)) for n, a in ((c.name, c.arguments) for c in joined.tool_calls)
                if _parses(a)] == calls


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def test_calls_before_a_malformed_block_are_kept() -> None:
    text = ('<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>\n'
            '<tool_call>\n{"name": "get_weather", "arguments": {oops}}\n</tool_call>')
    result = HERMES.parse(text, TOOLS)
    assert _calls(result) == [("ping", {})]
    assert result.content.startswith('<tool_call>\n{"name": "get_weather"')


def test_without_tools_any_function_name_is_a_call() -> None:
    text = '<tool_call>\n{"name": "delete_everything", "arguments": {}}\n</tool_call>'
    assert _calls(HERMES.parse(text)) == [("delete_everything", {})]
    assert HERMES.parse(text, TOOLS).tool_calls == []


# -- streaming -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt, text, content, calls", WELL_FORMED, ids=_ids(WELL_FORMED))
def test_stream_deltas_reassemble_to_the_whole_text_parse(fmt, text, content, calls) -> None:
    whole = fmt.parse(text, TOOLS)
    for chunks in _chunkings(text):
        deltas, st = _stream(fmt, text, chunks)
        assert not st.malformed
        joined = reassemble(deltas)
        assert joined.content == whole.content == content, chunks
        assert [(c.name, c.arguments) for c in joined.tool_calls] == [(c.name, c.arguments) for c in whole.tool_calls]
        assert [(c.id, c.name, c.arguments) for c in st.result().tool_calls] == \
               [(c.id, c.name, c.arguments) for c in joined.tool_calls]
        _check_openai_delta_order(deltas)


def _check_openai_delta_order(deltas: list[dict]) -> None:
    """Each call: a first delta with index, id, type and name (arguments ""), then argument fragments only."""
    started: list[int] = []
    for d in deltas:
        assert set(d) in ({"content"}, {"tool_calls"})
        if "content" in d:
            assert d["content"]
            continue
        (tc,) = d["tool_calls"]
        if "id" in tc:
            assert tc["index"] == len(started) and tc["type"] == "function"
            assert tc["function"]["name"] and tc["function"]["arguments"] == ""
            started.append(tc["index"])
        else:
            assert set(tc) == {"index", "function"} and set(tc["function"]) == {"arguments"}
            assert tc["index"] == started[-1] and tc["function"]["arguments"]


def test_arguments_stream_before_the_call_is_complete() -> None:
    st = HERMES.stream(TOOLS)
    assert st.feed("Checking") == [{"content": "Checking"}]
    assert st.feed(" now <tool") == [{"content": " now"}]  # "<tool" may start a call: held
    assert st.feed('_call>\n{"name": "get_wea') == []  # the name is not complete yet
    header, first = st.feed('ther", "arguments": {"ci')
    assert header["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": ""}
    assert first == {"tool_calls": [{"index": 0, "function": {"arguments": '{"ci'}}]}
    rest = st.feed('ty": "Paris"}}\n</tool_call>') + st.finish()
    joined = reassemble([{"content": "Checking now"}, header, first, *rest])
    assert [(c.name, c.arguments) for c in joined.tool_calls] == [("get_weather", '{"city": "Paris"}')]
    assert joined.content == st.result().content == "Checking now"


def test_argument_fragments_arrive_as_the_text_does() -> None:
    st = HERMES.stream(TOOLS)
    st.feed('<tool_call>\n{"name": "get_weather", "arguments": {')
    assert st.feed('"city": ') == [{"tool_calls": [{"index": 0, "function": {"arguments": '"city": '}}]}]
    assert st.feed('"Lyon"') == [{"tool_calls": [{"index": 0, "function": {"arguments": '"Lyon"'}}]}]


def test_a_held_back_start_that_is_not_a_call_is_released_as_content() -> None:
    st = LLAMA3.stream(TOOLS)
    assert st.feed("Sets look like {") == [{"content": "Sets look like"}]
    assert st.feed("1, 2}") == [{"content": " {1, 2}"}]
    assert st.finish() == []
    st = MISTRAL.stream(TOOLS)
    assert st.feed("[TOOL") == []
    assert st.feed("S] are for tools") == [{"content": "[TOOLS] are for tools"}]


@pytest.mark.parametrize("fmt, text", MALFORMED, ids=_ids(MALFORMED))
def test_malformed_output_never_breaks_the_stream(fmt, text) -> None:
    for chunks in _chunkings(text):
        deltas, st = _stream(fmt, text, chunks)
        _check_openai_delta_order(deltas)
        joined = reassemble(deltas)
        if not joined.tool_calls:  # nothing went out as a call: all of it is content, as parse() says
            assert joined.content == text.strip()
        else:  # a call's header went out before the text broke: it cannot be taken back
            assert st.malformed
            assert all(c.name == "get_weather" or c.name == "ping" for c in joined.tool_calls)


def test_a_call_cut_off_in_its_arguments_keeps_what_was_streamed() -> None:
    text = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Par'
    deltas, st = _stream(HERMES, text, [5] * 20)
    joined = reassemble(deltas)
    assert st.malformed and [(c.name, c.arguments) for c in joined.tool_calls] == [("get_weather", '{"city": "Par')]
    assert joined.content == ""


def test_stream_input_is_checked() -> None:
    st = HERMES.stream()
    with pytest.raises(InvalidArgumentError, match="chunk must be a str"):
        st.feed(b"x")
    st.finish()
    with pytest.raises(InvalidArgumentError, match="after finish"):
        st.feed("x")


# -- round trips through templates and the real model ------------------------------------------------------

@pytest.mark.parametrize("source", [HERMES_STYLE, LLAMA3_STYLE, MISTRAL_STYLE, PLAIN_STYLE],
                         ids=["hermes", "llama3", "mistral", "plain"])
def test_parsed_calls_go_back_into_the_conversation(source) -> None:
    template = ChatTemplate(source, bos_token="<s>", eos_token="</s>")
    fmt = template.tool_call_format
    generated = "Let me check.\n" + fmt.call_text([("get_weather", {"city": "Paris"}), ("ping", {})])
    result = fmt.parse(generated, TOOLS)
    assert _calls(result) == [("get_weather", {"city": "Paris"}), ("ping", {})]
    history = [{"role": "user", "content": "Weather?"}, result.message(),
               *({"role": "tool", "tool_call_id": c.id, "content": "ok"} for c in result.tool_calls)]
    text = template.render(normalize_messages(history), tools=TOOLS)
    # the template writes the calls back in the syntax the parser reads
    start = text.index(fmt.trigger, text.index("Weather?"))
    again = fmt.parse(text[start:], TOOLS)
    assert _calls(again)[:2] == [("get_weather", {"city": "Paris"}), ("ping", {})]


def test_real_model_output_parses_the_same_streamed_and_whole(model) -> None:
    template = ChatTemplate.for_model(model)
    fmt = template.tool_call_format
    ask = normalize_messages([{"role": "user", "content": "What is the weather in Paris? Call a function."}])
    prompt = template.render(ask, tools=TOOLS)
    tokens = model.tokenize(prompt, add_special=not template.has_bos(prompt), parse_special=True)
    for seed in (1,):  # the model's own idea of a call (on this CPU about 0.1 s a token)
        pieces = [p.text for p in model.generate(tokens, max_tokens=40, temperature=0.7, seed=seed, stream=True)]
        text = "".join(pieces)
        whole = fmt.parse(text, TOOLS)
        st = fmt.stream(TOOLS)
        deltas = [d for piece in pieces for d in st.feed(piece)] + st.finish()
        joined = reassemble(deltas)
        if not st.malformed:
            assert joined.content == whole.content
            assert [(c.name, c.arguments) for c in joined.tool_calls] == \
                   [(c.name, c.arguments) for c in whole.tool_calls]
        _check_openai_delta_order(deltas)
