"""Anthropic's Messages API answers, from the engine's Chunks: a whole `message` (content blocks: thinking, text,
and tool_use for the calls core.ToolCallOutput reads from the text, with ids `toolu_...`) or its server-sent events
(message_start, ping, content_block_start / content_block_delta (thinking_delta and signature_delta, text_delta,
input_json_delta) / content_block_stop per block, message_delta with the stop_reason and usage, message_stop),
each sent as `event: <type>` and `data:` lines, as Anthropic sends them.

A thinking chat's block (core.chat.reasoning, read out before the tool calls) is a `thinking` block first, its
`signature` empty (as llama-server's: nothing here verifies it; a client sends it back as it came); with the
request's thinking.display "omitted" the block is there with its text left out.

stop_reason: end_turn, max_tokens, tool_use, or stop_sequence (with the sequence: the first of the request's
stop strings in the generated tokens' text, which the engine cut from the answer). usage: the prompt tokens whose
cells came from the prompt cache are `cache_read_input_tokens`, the rest `input_tokens` (Anthropic's counting,
llama-server's too: their sum is the prompt); `cache_creation_input_tokens` is 0, as no cache_control breakpoint
writes anything (every prompt stays in its slot anyway). A stream's message_start, sent before the prompt is
evaluated, counts the whole prompt as input; its message_delta has the final usage.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ...core.chat.reasoning import ReasoningOutput, ReasoningSplitter
from ...core.chat.tool_output import ToolCallDeltas, ToolCallOutput
from ...core.engine.engine import Chunk
from ...core.toolcalls import ParsedToolCall
from .openai import Shape

TOOL_USE_ID_PREFIX = "toolu_"


def _tool_use_id(call_id: str) -> str:
    """Anthropic's id of a call the parser named with its format's (OpenAI's "call_..." or a template's own)."""
    return TOOL_USE_ID_PREFIX + call_id.removeprefix("call_")


def _input(call: ParsedToolCall) -> dict[str, Any]:
    """A call's arguments as tool_use's input object (the parser only reads calls whose arguments are one)."""
    value = json.loads(call.arguments or "{}")
    return value if isinstance(value, dict) else {}


class MessageShape(Shape):
    """One message (Anthropic has no n); `stops`: the request's stop_sequences, `detokenize`: the model's, for the
    stop_sequence that ended a generation; `show_thinking`: the thinking block's text is sent (thinking.display)."""
    done_marker = False
    named_events = True

    def __init__(self, ident: str, model: str, *, stops: tuple[str, ...],
                 detokenize: Callable[[list[int]], str], output: ToolCallOutput | None = None,
                 reasoning: ReasoningOutput | None = None, show_thinking: bool = True, **common: Any) -> None:
        super().__init__(ident, model, 1, **common)
        self.stops, self.detokenize = stops, detokenize  # (prompt_tokens: the base's, from the common settings)
        self.output, self.reasoning, self.show_thinking = output, reasoning, show_thinking
        self.ends_in_model = bool(stops)  # (a stop sequence is found in the generated tokens' text)
        self._generated: list[int] = []
        self._parser: ToolCallDeltas | None = output.stream() if output is not None else None
        self._thoughts: ReasoningSplitter | None = reasoning.splitter() if reasoning is not None else None
        self._blocks = 0                          # content blocks started
        self._open: str | None = None             # the type of the open block, if one is
        self._calls: dict[int, int] = {}          # the parser's call index -> its block's index

    def _usage(self) -> dict[str, int]:
        """The finished message's usage (see the module's doc)."""
        counts = self.usage()
        cached = counts["prompt_tokens_details"]["cached_tokens"]
        return {"input_tokens": counts["prompt_tokens"] - cached, "output_tokens": counts["completion_tokens"],
                "cache_creation_input_tokens": 0, "cache_read_input_tokens": cached}

    def _stop(self, reason: str, made_calls: bool) -> tuple[str, str | None]:
        """stop_reason and stop_sequence of a finish_reason."""
        if reason == "length":
            return "max_tokens", None
        if made_calls:
            return "tool_use", None
        if self.stops:
            raw = self.detokenize(self._generated)
            found = sorted((raw.find(s), s) for s in self.stops if s in raw)
            if found:
                return "stop_sequence", found[0][1]
        return "end_turn", None

    def _message(self, content: list[dict[str, Any]], stop: tuple[str | None, str | None],
                 usage: dict[str, int]) -> dict[str, Any]:
        return {"id": self.ident, "type": "message", "role": "assistant", "model": self.model, "content": content,
                "stop_reason": stop[0], "stop_sequence": stop[1], "usage": usage}

    def add(self, choice: int, chunk: Chunk) -> None:
        super().add(choice, chunk)
        self._generated += chunk.tokens

    def _thinking_block(self, thinking: str) -> dict[str, Any]:
        return {"type": "thinking", "thinking": thinking if self.show_thinking else "", "signature": ""}

    def whole(self) -> dict[str, Any]:
        parts = self.parts[0]
        text = "".join(c.text for c in parts)
        thinking = ""
        if self.reasoning is not None:
            thinking, text = self.reasoning.whole(text)
        calls: list[ParsedToolCall] = []
        if self.output is not None:
            # (a call cut off by max_tokens: its text, as a text block; a stream sent it as input_json_delta)
            parsed, _ = self.output.whole(text, parts[-1].finish_reason or "stop")
            text, calls = parsed.content, parsed.tool_calls
        content = [self._thinking_block(thinking)] if thinking else []
        content += [{"type": "text", "text": text}] if text else []
        content += [{"type": "tool_use", "id": _tool_use_id(c.id), "name": c.name, "input": _input(c)} for c in calls]
        stop = self._stop(parts[-1].finish_reason or "stop", bool(calls))
        return self._message(content, stop, self._usage())

    def opening(self) -> list[dict[str, Any]]:
        start = {"input_tokens": self.prompt_tokens, "output_tokens": 0, "cache_creation_input_tokens": 0,
                 "cache_read_input_tokens": 0}  # (what the cache gives is known at the end: message_delta)
        return [{"type": "message_start", "message": self._message([], (None, None), start)}, {"type": "ping"}]

    def _start(self, block: dict[str, Any]) -> list[dict[str, Any]]:
        """Close the open block, start `block`."""
        events = self._close()
        self._open = block["type"]
        events.append({"type": "content_block_start", "index": self._blocks, "content_block": block})
        self._blocks += 1
        return events

    def _close(self) -> list[dict[str, Any]]:
        if self._open is None:
            return []
        # (a thinking block's signature comes last, as Anthropic sends it: empty here, see the module's doc)
        signed = [{"type": "content_block_delta", "index": self._blocks - 1,
                   "delta": {"type": "signature_delta", "signature": ""}}] if self._open == "thinking" else []
        self._open = None
        return [*signed, {"type": "content_block_stop", "index": self._blocks - 1}]

    def _thinking(self, thinking: str) -> list[dict[str, Any]]:
        if not thinking:
            return []
        events = self._start(self._thinking_block("")) if self._open != "thinking" else []
        if self.show_thinking:
            events.append({"type": "content_block_delta", "index": self._blocks - 1,
                           "delta": {"type": "thinking_delta", "thinking": thinking}})
        return events

    def _text(self, text: str) -> list[dict[str, Any]]:
        if not text:
            return []
        events = self._start({"type": "text", "text": ""}) if self._open != "text" else []
        return [*events, {"type": "content_block_delta", "index": self._blocks - 1,
                          "delta": {"type": "text_delta", "text": text}}]

    def _call(self, delta: dict[str, Any]) -> list[dict[str, Any]]:
        """An OpenAI tool-call delta: a new call starts a tool_use block, its arguments are input_json_deltas."""
        events = []
        if "id" in delta:
            events += self._start({"type": "tool_use", "id": _tool_use_id(delta["id"]),
                                   "name": delta["function"]["name"], "input": {}})
            self._calls[delta["index"]] = self._blocks - 1
        fragment = delta.get("function", {}).get("arguments", "")
        if fragment:
            events.append({"type": "content_block_delta", "index": self._calls[delta["index"]],
                           "delta": {"type": "input_json_delta", "partial_json": fragment}})
        return events

    def events(self, choice: int, chunk: Chunk) -> list[dict[str, Any]]:
        self._seen(choice, chunk)
        self._generated += chunk.tokens
        last = chunk.finish_reason is not None
        thinking, text = self._thoughts.feed(chunk.text, last) if self._thoughts is not None else ("", chunk.text)
        deltas: list[dict[str, Any]] = ([{"content": text}] if self._parser is None
                                         else self._parser.feed(text, last))
        events = self._thinking(thinking)
        for delta in deltas:
            events += self._text(delta.get("content", ""))
            for call in delta.get("tool_calls", ()):
                events += self._call(call)
        if last:
            made_calls = self._parser is not None and self._parser.finish_reason("stop") == "tool_calls"
            stop = self._stop(chunk.finish_reason or "stop", made_calls)
            events += [*self._close(),
                       {"type": "message_delta", "delta": {"stop_reason": stop[0], "stop_sequence": stop[1]},
                        "usage": self._usage()},
                       {"type": "message_stop"}]
        return events
