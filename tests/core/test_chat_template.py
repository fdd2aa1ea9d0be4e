"""Jinja chat templates (pyllama90a.core.chat.template) on the default model's own template and on small templates
written for these tests in the style of the tool-calling families (tests/support/tool_templates.py)."""
from __future__ import annotations

import copy
import json

import pytest

import pyllama90a as pl
from pyllama90a.core.chat.messages import ChatMessage, Messages, ToolArguments, normalize_messages
from pyllama90a.core.chat.template import TEMPLATE_KEY, ChatTemplate, compile_template, special_tokens
from pyllama90a.core.toolcalls import get_format
from pyllama90a.errors import ChatTemplateError, InvalidArgumentError
from support.tool_templates import HERMES_STYLE, LLAMA3_STYLE, MISTRAL_STYLE, PLAIN_STYLE, TOOLS, WEATHER

WITH_SYSTEM = [
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"}],
    [{"role": "system", "content": "Réponds en français."}, {"role": "user", "content": "Bonjour, ça va ?"},
     {"role": "assistant", "content": "Oui, merci."}, {"role": "user", "content": "Et toi ?\n\nDis-moi."}],
]
X, HI = (normalize_messages([{"role": "user", "content": text}]) for text in ("x", "hi"))
CALL_HISTORY = [
    {"role": "user", "content": "Weather in Paris and the time in CET?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "a1B2c3D4e", "type": "function",
         "function": {"name": "get_weather", "arguments": '{"city": "Paris",  "unit": "c"}'}},
        {"id": "f5G6h7I8j", "type": "function", "function": {"name": "get_time", "arguments": '{"zone": "CET"}'}}]},
    {"role": "tool", "tool_call_id": "a1B2c3D4e", "name": "get_weather", "content": "18 °C, sunny"},
    {"role": "tool", "tool_call_id": "f5G6h7I8j", "name": "get_time", "content": "14:05"},
]


@pytest.fixture(scope="module")
def template(model) -> ChatTemplate:
    t = ChatTemplate.for_model(model)
    assert t is not None
    return t


# -- the default model's template -----------------------------------------------------------------------

@pytest.mark.parametrize("messages", WITH_SYSTEM, ids=["one-turn", "multi-turn"])
def test_jinja_rendering_equals_llama_cpp_with_a_system_message(model, template, messages) -> None:
    assert template.source == model.metadata(TEMPLATE_KEY)
    # llama.cpp's matcher
    assert template.render(normalize_messages(messages)) == model.handle.builtin_chat_template(messages)


def test_without_a_system_message_the_models_own_default_system_prompt_is_rendered(model, template) -> None:
    # llama.cpp's matcher recognises SmolLM2's template as plain ChatML and renders no system turn; the
    # template itself adds SmolLM's default system prompt when the conversation has none. The Jinja rendering
    # is what the model was trained on: it is llama.cpp's text with that system turn in front.
    messages = [{"role": "user", "content": "What is 2 + 2?"}]
    ours, theirs = template.render(normalize_messages(messages)), model.handle.builtin_chat_template(messages)
    assert ours != theirs
    assert ours.endswith(theirs)
    head = ours[: len(ours) - len(theirs)]
    assert head.startswith("<|im_start|>system\n") and "SmolLM" in head and head.endswith("<|im_end|>\n")


def test_generation_prompt_is_optional(template) -> None:
    messages = WITH_SYSTEM[0]
    with_prompt = template.render(normalize_messages(messages))
    without = template.render(normalize_messages(messages), add_generation_prompt=False)
    assert with_prompt == without + "<|im_start|>assistant\n"


def test_special_tokens_come_from_the_vocabulary(model, template) -> None:
    bos, eos = special_tokens(model)
    assert (template.bos_token, template.eos_token) == (bos, eos)
    bos_id = int(model.metadata("tokenizer.ggml.bos_token_id"))
    eos_id = int(model.metadata("tokenizer.ggml.eos_token_id"))
    assert model.tokenize(bos, add_special=False, parse_special=True) == [bos_id]
    assert model.tokenize(eos, add_special=False, parse_special=True) == [eos_id]


def test_bos_already_in_the_text_is_not_added_twice(model, template) -> None:
    text = template.render(normalize_messages(WITH_SYSTEM[0]))
    # SmolLM2's BOS is <|im_start|>, which its template writes itself
    assert template.has_bos(text)
    tokens = model.tokenize(text, add_special=not template.has_bos(text), parse_special=True)
    assert tokens == model.tokenize(model.apply_chat_template(WITH_SYSTEM[0]), add_special=True,
                                    parse_special=True)
    bos_id = int(model.metadata("tokenizer.ggml.bos_token_id"))
    assert tokens[0] == bos_id and tokens[1] != bos_id

    llama = ChatTemplate(LLAMA3_STYLE, bos_token="<|begin_of_text|>")
    assert llama.has_bos(llama.render(X))
    assert not ChatTemplate(PLAIN_STYLE, bos_token="<s>").has_bos(
        ChatTemplate(PLAIN_STYLE, bos_token="<s>").render(X))
    assert not ChatTemplate(PLAIN_STYLE).has_bos("anything")  # no BOS token at all


def test_override_replaces_the_gguf_template(model) -> None:
    t = ChatTemplate.for_model(model, override=PLAIN_STYLE)
    assert t.source == PLAIN_STYLE
    assert t.render(HI) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_default_template_gets_tools_through_the_generic_format(template) -> None:
    # SmolLM2's template knows nothing of tools: they are described in a system message with the Hermes
    # syntax, and earlier calls and results are written into the conversation as text
    assert template.tool_call_format.name == "generic"
    text = template.render(normalize_messages(CALL_HISTORY), tools=TOOLS)
    assert text.startswith("<|im_start|>system\n")
    assert json.dumps(WEATHER, ensure_ascii=False) in text
    assert "<tool_call>" in text and "SmolLM" not in text
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris",  "unit": "c"}}\n</tool_call>' in text
    assert "<|im_start|>user\n<tool_response>\n18 °C, sunny\n</tool_response>\n<tool_response>\n14:05\n" in text
    parsed = get_format("hermes").parse(text.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0])
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [
        ("get_weather", {"city": "Paris", "unit": "c"}), ("get_time", {"zone": "CET"})]


# -- templates of the tool-calling families -------------------------------------------------------------

def test_hermes_style_template_renders_tools_calls_and_results() -> None:
    t = ChatTemplate(HERMES_STYLE)
    assert t.tool_call_format.name == "hermes" and t.renders_tools()
    text = t.render(normalize_messages([{"role": "system", "content": "Be brief."}, *CALL_HISTORY]), tools=TOOLS)
    # the tool dicts are given as is, and tojson keeps non-ASCII text
    assert json.dumps(WEATHER, ensure_ascii=False) in text and "température in °C" in text
    # arguments sent as a JSON string reach the template as an object: written once, not as a quoted string
    assert '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}' in text
    assert "\\\"city\\\"" not in text
    assert "<tool_response>\n18 °C, sunny\n</tool_response>\n<tool_response>\n14:05\n</tool_response>" in text
    assert text.startswith("<|im_start|>system\nBe brief.\n\nYou may call functions.")
    assert text.endswith("<|im_start|>assistant\n")
    # without tools the template writes no tools block
    plain = t.render(HI)
    assert "<tools>" not in plain and plain == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_llama3_style_template_indents_tojson_and_writes_bos() -> None:
    t = ChatTemplate(LLAMA3_STYLE, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>")
    assert t.tool_call_format.name == "llama3_json"
    text = t.render(normalize_messages(CALL_HISTORY), tools=TOOLS)
    assert text.startswith("<|begin_of_text|><|start_header_id|>system")
    assert json.dumps(WEATHER["function"], ensure_ascii=False, indent=2) in text
    assert '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "unit": "c"}}' in text
    assert "<|start_header_id|>ipython<|end_header_id|>\n\n14:05<|eot_id|>" in text


def test_mistral_style_template_and_its_raise_exception() -> None:
    t = ChatTemplate(MISTRAL_STYLE, bos_token="<s>", eos_token="</s>")
    assert t.tool_call_format.name == "mistral"
    text = t.render(normalize_messages(CALL_HISTORY), tools=TOOLS)
    assert text.startswith("<s>[AVAILABLE_TOOLS][")
    assert ('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}, "id": "a1B2c3D4e"}, '
            '{"name": "get_time", "arguments": {"zone": "CET"}, "id": "f5G6h7I8j"}]</s>') in text
    assert '[TOOL_RESULTS]{"call_id": "f5G6h7I8j", "content": "14:05"}[/TOOL_RESULTS]' in text
    with pytest.raises(ChatTemplateError, match=r"After a user message comes an assistant .*line \d+"):
        t.render(normalize_messages([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]))
    bad_id = copy.deepcopy(CALL_HISTORY)
    bad_id[1]["tool_calls"][0]["id"] = "call_x"
    with pytest.raises(ChatTemplateError, match="9 letters or digits"):
        t.render(normalize_messages(bad_id), tools=TOOLS)


def test_plain_template_is_generic_and_gets_the_history_as_text() -> None:
    t = ChatTemplate(PLAIN_STYLE)
    assert t.tool_call_format.name == "generic" and not t.renders_tools()
    text = t.render(normalize_messages(CALL_HISTORY), tools=[WEATHER])
    assert text.startswith("<|im_start|>system\nYou may call the functions below")
    assert "<|im_start|>tool" not in text  # tool results became a user turn
    assert "<|im_start|>user\n<tool_response>\n18 °C, sunny\n</tool_response>" in text


def test_tool_use_variant_is_used_only_with_tools() -> None:
    t = ChatTemplate(PLAIN_STYLE, tool_use_source=HERMES_STYLE)
    assert t.tool_call_format.name == "hermes"
    assert "<tools>" in t.render(X, tools=[WEATHER])
    assert t.render(X) == "<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n"


# -- messages -------------------------------------------------------------------------------------------

def test_the_callers_messages_are_not_changed() -> None:
    messages = copy.deepcopy(CALL_HISTORY)
    ChatTemplate(HERMES_STYLE).render(normalize_messages(messages), tools=TOOLS)
    ChatTemplate(PLAIN_STYLE).render(normalize_messages(messages), tools=TOOLS)
    assert messages == CALL_HISTORY


def test_messages_have_one_typed_form_which_render_takes_as_it_is() -> None:
    history = [*CALL_HISTORY, {"role": "assistant", "content": "done", "reasoning_content": "why", "name": None}]
    norm = normalize_messages(history)
    assert isinstance(norm, Messages) and normalize_messages(norm) is norm  # (checked once, where it entered)
    assert [type(m) for m in norm] == [ChatMessage] * 5
    call = norm[1].tool_calls[0]
    assert (norm[1].content, call.id, call.type, call.name, call.arguments_text) == (
        "", "a1B2c3D4e", "function", "get_weather", '{"city": "Paris",  "unit": "c"}')
    assert (norm[2].tool_call_id, norm[2].name, norm[2].content) == ("a1B2c3D4e", "get_weather", "18 °C, sunny")
    # other keys go to the template as they are; a null one is as if absent
    assert (norm[4].extra, norm[4].name) == ({"reasoning_content": "why"}, None)
    t = ChatTemplate("{% for m in messages %}{{ m.role }}:{{ m.reasoning_content }}:{{ m.name is defined }};"
                     "{% endfor %}", tool_call_format="hermes")
    assert t.render(Messages(norm[4:])) == "assistant:why:False;"
    with pytest.raises(InvalidArgumentError, match=r"render\(\) takes the Messages of normalize_messages"):
        t.render(history)  # (a Python caller's dicts are converted at the entry: Model.chat, apply_chat_template)


def test_arguments_are_a_dict_with_the_json_text_kept() -> None:
    norm = normalize_messages(CALL_HISTORY)
    args = norm[1].tool_calls[0].arguments
    assert isinstance(args, ToolArguments) and args == {"city": "Paris", "unit": "c"}
    assert args.json == '{"city": "Paris",  "unit": "c"}'
    t = ChatTemplate("{% for m in messages %}{% for c in m.tool_calls or [] %}[{{ c.function.arguments.json }}]"
                     "{{ c.function.arguments is mapping }}{% endfor %}{% endfor %}", tool_call_format="hermes")
    assert t.render(normalize_messages(CALL_HISTORY)) == '[{"city": "Paris",  "unit": "c"}]True[{"zone": "CET"}]True'
    # arguments given as a dict (not a string) work too; arguments that are not JSON stay text
    odd = [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "x", "function": {"name": "f", "arguments": {"k": [1, "é"]}}},
        {"id": "y", "function": {"name": "g", "arguments": "{not json"}}]}]
    t2 = ChatTemplate("{% for c in messages[0].tool_calls %}{{ c.function.arguments | tojson }};{% endfor %}",
                      tool_call_format="hermes")
    assert t2.render(normalize_messages(odd)) == '{"k": [1, "é"]};"{not json";'


def test_content_as_text_parts_is_joined() -> None:
    t = ChatTemplate(PLAIN_STYLE)
    parts = [{"role": "user", "content": [{"type": "text", "text": "first"}, {"type": "text", "text": "second"}]}]
    text = t.render(normalize_messages(parts), add_generation_prompt=False)
    assert text == "<|im_start|>user\nfirst\nsecond<|im_end|>\n"
    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]
    with pytest.raises(InvalidArgumentError, match=r"messages\[0\]\.content\[0\].*image_url"):
        t.render(normalize_messages(image))


@pytest.mark.parametrize("messages, field", [
    ([], "non-empty list"),
    ("hi", "non-empty list"),
    ([{"content": "x"}], r"messages\[0\]\.role"),
    ([{"role": "user", "content": None}], r"messages\[0\]\.content is missing"),
    ([{"role": "user", "content": 5}], r"messages\[0\]\.content must be"),
    ([{"role": "user", "content": "x", "tool_calls": []}], r"messages\[0\]\.tool_calls is only for assistant"),
    ([{"role": "assistant", "content": None, "tool_calls": [{"function": {"arguments": "{}"}}]}],
     r"messages\[0\]\.tool_calls\[0\]"),
    ([{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": 3}}]}],
     r"messages\[0\]\.tool_calls\[0\]\.function\.arguments"),
    ([{"role": "tool", "content": "x", "tool_call_id": 7}], r"messages\[0\]\.tool_call_id"),
])
def test_bad_messages_are_invalid_arguments(messages, field) -> None:
    with pytest.raises(InvalidArgumentError, match=field):
        ChatTemplate(PLAIN_STYLE).render(normalize_messages(messages))


def test_bad_tools_and_arguments_are_invalid_arguments() -> None:
    t = ChatTemplate(HERMES_STYLE)
    with pytest.raises(InvalidArgumentError, match=r"tools\[0\]\.function\.name"):
        t.render(X, tools=[{"type": "function", "function": {}}])
    with pytest.raises(InvalidArgumentError, match="add_generation_prompt"):
        t.render(X, add_generation_prompt="yes")
    with pytest.raises(InvalidArgumentError, match="bos_token"):
        t.render(X, bos_token="<s>")


# -- the environment ------------------------------------------------------------------------------------

def test_extra_variables_globals_filters_and_blocks() -> None:
    t = ChatTemplate("{{ greeting }}|{{ strftime_now('%Y') | length }}|"
                     "{{ {'b': 1, 'a': 'é'} | tojson(sort_keys=true, separators=[',', ':']) }}|"
                     "{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}|"
                     "{% generation %}kept{% endgeneration %}")
    assert t.render(X, greeting="hello") == 'hello|4|{"a":"é","b":1}|012|kept'


def test_syntax_error_names_the_line() -> None:
    with pytest.raises(ChatTemplateError, match=r"syntax error at line 3"):
        ChatTemplate("{% for m in messages %}\n{{ m.content }}\n{% if %}\n{% endfor %}")
    with pytest.raises(ChatTemplateError, match="non-empty"):
        ChatTemplate("  ")


def test_raise_exception_carries_the_templates_message_and_line() -> None:
    t = ChatTemplate("{% for m in messages %}\n{% if m.role == 'user' %}\n"
                     "{{ raise_exception('Only system turns here, got ' + m.role) }}\n{% endif %}\n{% endfor %}")
    with pytest.raises(ChatTemplateError,
                       match=r"raised an error: Only system turns here, got user \(template line 3\)"):
        t.render(X)


@pytest.mark.parametrize("source", [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{{ ''.__class__ }}",
    "{{ messages.__init__.__globals__ }}",
    "{{ raise_exception.__globals__['__builtins__'] }}",
    "{% set x = messages.append({'role': 'system', 'content': 'x'}) %}",
    "{{ messages[0].update({'role': 'x'}) }}",
    "{{ cycler.__init__.__globals__.os }}",
])
def test_the_sandbox_refuses_python_internals(source) -> None:
    with pytest.raises(ChatTemplateError, match="unsafe"):
        ChatTemplate(source).render(X)


def test_runtime_failures_are_chat_template_errors() -> None:
    with pytest.raises(ChatTemplateError, match=r"'nothing' is undefined \(template line 2\)"):
        ChatTemplate("ok\n{{ nothing.there }}").render(X)
    with pytest.raises(ChatTemplateError, match="TypeError"):
        ChatTemplate("{{ 1 + messages[0].content }}").render(X)


def test_template_files(tmp_path) -> None:
    path = tmp_path / "t.jinja"
    path.write_text(PLAIN_STYLE, encoding="utf-8")
    assert ChatTemplate.from_file(path).source == PLAIN_STYLE
    with pytest.raises(ChatTemplateError, match=r"missing\.jinja"):
        ChatTemplate.from_file(tmp_path / "missing.jinja")
    bad = tmp_path / "latin1.jinja"
    bad.write_bytes("{{ 'café' }}".encode("latin-1"))
    with pytest.raises(ChatTemplateError, match="not UTF-8"):
        ChatTemplate.from_file(bad)
    broken = tmp_path / "broken.jinja"
    broken.write_text("{% for %}", encoding="utf-8")
    with pytest.raises(ChatTemplateError, match="syntax error at line 1"):
        ChatTemplate.from_file(broken)


def test_templates_compile_once() -> None:
    source = PLAIN_STYLE + "{# cache test #}"
    assert compile_template(source) is compile_template(source)
    assert compile_template(source) is not compile_template(source + " ")


def test_chat_template_error_is_an_invalid_argument_error() -> None:
    assert issubclass(ChatTemplateError, InvalidArgumentError) and issubclass(ChatTemplateError, pl.LlamaError)
