"""Reasoning models (issue 36): a chat's thinking block read into `reasoning`, the prefill a template asks for, the
reasoning budget (the end marker forced, the answer going on), a constraint applied after the block, not inside
it, and llama-server's template variables.

Real thinking templates (tests/data: Qwen's QwQ-32B, whose generation prompt ends in `<think>\\n`, and Qwen3-0.6B,
which reads enable_thinking) over the default model's vocabulary. The 135M model never writes `</think>` by
itself: the prefill puts it inside the block, and the budget ends it."""
from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest

import pyllama90a as pl
from pyllama90a.core.chat import reasoning
from pyllama90a.core.chat.messages import normalize_messages
from pyllama90a.core.chat.prepare import prepare_chat
from pyllama90a.core.chat.reasoning import ReasoningSplitter, closed_when_off, markers_of, plan_reasoning
from pyllama90a.core.chat.template import ChatTemplate
from pyllama90a.errors import InvalidArgumentError
from support.weather_tools import WEATHER

DATA = Path(__file__).resolve().parents[1] / "data"
QWQ = (DATA / "qwq-32b.jinja").read_text()
QWEN3 = (DATA / "qwen3-0.6b.jinja").read_text()
ASK = [{"role": "user", "content": "What is 2+2?"}]
SCHEMA = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"],
          "additionalProperties": False}


# -- the splitter, on text (no model) ---------------------------------------------------------------------------

ANSWER = "<think>\n  Two and two.\n</think>\n\nIt is 4."


def _fed(text: str, cuts: list[int], inside: bool = False) -> tuple[str, str]:
    splitter = ReasoningSplitter("<think>", "</think>", inside)
    parts = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    out = [splitter.feed(p, last=i == len(parts) - 1) for i, p in enumerate(parts)]
    return "".join(r for r, _ in out), "".join(c for _, c in out)


def test_a_marker_cut_anywhere_never_leaks():
    whole = _fed(ANSWER, [])
    assert whole == ("Two and two.", "It is 4.")
    for cut in range(1, len(ANSWER)):  # every place one cut can fall, markers included
        assert _fed(ANSWER, [cut]) == whole, cut
    assert _fed(ANSWER, list(range(1, len(ANSWER)))) == whole  # one character at a time


def test_splitter_prefilled_and_plain_answers():
    inside = ANSWER.removeprefix("<think>")
    assert _fed(inside, [], inside=True) == ("Two and two.", "It is 4.")
    assert _fed(inside, list(range(1, len(inside))), inside=True) == ("Two and two.", "It is 4.")
    assert _fed("  Just 4.", [1]) == ("", "  Just 4.")  # no block: all content, as it is
    assert _fed("<thi", [], inside=False) == ("", "<thi")  # a start that never completed is content
    assert _fed("unfinished </thi", [3], inside=True) == ("unfinished </thi", "")


def test_the_templates_markers_and_prefill():
    assert markers_of(QWQ) == ("<think>", "</think>") == markers_of(QWEN3)
    assert markers_of("{{ messages }}") is None
    thinking, output = plan_reasoning(QWQ, "<|im_start|>assistant\n<think>\n", None, None, None)
    assert thinking is not None and thinking.inside and output is not None and output.inside
    thinking, output = plan_reasoning(QWEN3, "<|im_start|>assistant\n", None, None, None)
    assert thinking is None and output is not None and not output.inside  # (nothing to force: the answer may open)
    assert plan_reasoning(QWQ, "x<think>\n", "none", None, None)[1] is None
    with pytest.raises(InvalidArgumentError, match="thinking markers"):
        plan_reasoning("{{ messages }}", "x", None, 10, None)
    with pytest.raises(InvalidArgumentError, match="reasoning_format"):
        plan_reasoning(QWQ, "x", "deepseek-legacy", None, None)


# -- template variables (llama-server's) -------------------------------------------------------------------------

def test_llama_server_template_variables():
    messages = normalize_messages(ASK)
    today = datetime.date.today()
    text = ChatTemplate("{{ date_string }}|{{ datetime }}|{{ strftime_now('%Y') }}|{{ now.year }}|"
                        "{{ enable_thinking }}").render(messages)
    assert text == f"{today.strftime('%d %b %Y')}|{today.strftime('%b %d %Y')}|{today.year}|{today.year}|True"
    qwen3 = ChatTemplate(QWEN3)
    assert qwen3.render(messages).endswith("<|im_start|>assistant\n")
    assert qwen3.render(messages, enable_thinking=False).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    with pytest.raises(InvalidArgumentError, match="enable_thinking"):
        qwen3.render(messages, enable_thinking="false")  # (llama-server refuses the string too)
    before = reasoning.get_defaults()
    try:  # the server's --reasoning off
        reasoning.set_defaults(enable_thinking=False)
        assert qwen3.render(messages).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
        assert qwen3.render(messages, enable_thinking=True).endswith("<|im_start|>assistant\n")
    finally:
        reasoning.set_defaults(**before.__dict__)


def test_thinking_off_closes_the_block_as_llama_server_does():
    messages = normalize_messages(ASK)
    qwen3 = ChatTemplate(QWEN3).render(messages, enable_thinking=False)
    assert closed_when_off(qwen3, QWEN3, False) == qwen3  # (the template closed it itself)
    opened = ChatTemplate(QWQ).render(messages, enable_thinking=False)
    assert closed_when_off(opened, QWQ, False) == opened + "</think>"
    assert closed_when_off(opened, QWQ, True) == opened
    cohere = "{{ '<|START_THINKING|>' + '<|END_THINKING|>' if false }}<|CHATBOT_TOKEN|>"
    assert closed_when_off("<|CHATBOT_TOKEN|>", cohere, False) == "<|CHATBOT_TOKEN|><|START_THINKING|><|END_THINKING|>"
    assert closed_when_off("x", "{{ messages }}", False) == "x"  # no markers: nothing to close


# -- over the model ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def qwq(model_path):
    with pl.Model(model_path, n_ctx=1024, seed=1234, chat_template=QWQ) as m:
        yield m


def _streamed(m, **kwargs):
    pieces = list(m.chat(ASK, temperature=0, stream=True, **kwargs))
    return "".join(p.reasoning for p in pieces), "".join(p.text for p in pieces), pieces[-1].completion


def test_prefill_starts_inside_the_block(qwq):
    assert qwq.apply_chat_template(ASK).endswith("<|im_start|>assistant\n<think>\n")
    whole = qwq.chat(ASK, temperature=0, max_tokens=12)
    raw = qwq.chat(ASK, temperature=0, max_tokens=12, reasoning_format="none")
    assert raw.reasoning is None and raw.text.strip()
    assert whole.reasoning == raw.text.strip() and whole.text == ""  # all of it thinking: no </think> written
    reasoning, content, done = _streamed(qwq, max_tokens=12)
    assert (reasoning, content) == (whole.reasoning, whole.text) == (done.reasoning, done.text)


def test_thinking_off_answers_after_a_closed_block(qwq):
    off = {"enable_thinking": False}
    assert qwq.apply_chat_template(ASK, **off).endswith("<|im_start|>assistant\n<think>\n</think>")
    whole = qwq.chat(ASK, temperature=0, max_tokens=12, chat_template_kwargs=off)
    raw = qwq.chat(ASK, temperature=0, max_tokens=12, chat_template_kwargs=off, reasoning_format="none")
    assert whole.reasoning in (None, "") and whole.text == raw.text and raw.text.strip()


def test_budget_forces_the_end_marker_and_the_answer_goes_on(qwq):
    end = qwq.tokenize("</think>", add_special=False, parse_special=True)
    raw = qwq.chat(ASK, temperature=0, max_tokens=40, reasoning_budget=5, reasoning_format="none")
    assert raw.tokens[5:5 + len(end)] == end  # 5 tokens of thinking, then the marker
    whole = qwq.chat(ASK, temperature=0, max_tokens=40, reasoning_budget=5)
    assert whole.reasoning == qwq.detokenize(raw.tokens[:5]).strip()
    assert whole.text == raw.text.split("</think>", 1)[1].lstrip()
    assert _streamed(qwq, max_tokens=40, reasoning_budget=5)[:2] == (whole.reasoning, whole.text)
    zero = qwq.chat(ASK, temperature=0, max_tokens=10, reasoning_budget=0, reasoning_format="none")
    assert zero.tokens[:len(end)] == end  # 0: the block ends at once


def test_a_schema_applies_after_the_thinking_not_inside_it(qwq):
    whole = qwq.chat(ASK, temperature=0, max_tokens=60, reasoning_budget=8, json_schema=SCHEMA)
    assert whole.reasoning and not whole.reasoning.lstrip().startswith("{")  # free text, not the schema's
    assert set(json.loads(whole.text)) == {"answer"}
    assert _streamed(qwq, max_tokens=60, reasoning_budget=8, json_schema=SCHEMA)[:2] == (whole.reasoning, whole.text)
    # the model ends its thinking with an end of generation: the marker replaces it, so the answer is written
    short = qwq.chat(ASK, temperature=0, max_tokens=60, json_schema=SCHEMA)
    assert set(json.loads(short.text)) == {"answer"}


def test_a_forced_tool_call_comes_after_the_thinking(qwq):
    whole = qwq.chat(ASK, temperature=0, max_tokens=80, reasoning_budget=6, tools=[WEATHER], tool_choice="required")
    assert whole.reasoning and "<tool_call>" not in whole.reasoning and whole.finish_reason == "tool_calls"
    assert [c.name for c in whole.tool_calls] == ["get_weather"]
    pieces = list(qwq.chat(ASK, temperature=0, max_tokens=80, reasoning_budget=6, tools=[WEATHER],
                           tool_choice="required", stream=True))
    assert "".join(p.reasoning for p in pieces) == whole.reasoning
    calls = [(c.name, c.arguments) for c in pieces[-1].completion.tool_calls]
    assert calls == [(c.name, c.arguments) for c in whole.tool_calls]


def test_continue_final_message(qwq):
    messages = normalize_messages([*ASK, {"role": "assistant", "content": "<think>\nTwo and"}])
    prepared = prepare_chat(qwq, messages, add_generation_prompt=False, continue_final_message=True)
    expected = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\nTwo and"
    assert prepared.tokens == qwq.tokenize(expected, add_special=True, parse_special=True)
    assert prepared.reasoning is not None and prepared.reasoning.inside  # (the continued message opened the block)
    # (left out, add_generation_prompt follows continue_final_message; both asked for is a contradiction)
    assert prepare_chat(qwq, messages, continue_final_message=True).tokens == prepared.tokens
    with pytest.raises(InvalidArgumentError, match="add_generation_prompt"):
        prepare_chat(qwq, messages, add_generation_prompt=True, continue_final_message=True)
    with pytest.raises(InvalidArgumentError, match="last message from the assistant"):
        prepare_chat(qwq, normalize_messages(ASK), add_generation_prompt=False, continue_final_message=True)
