"""The Responses API's answer (POST /v1/responses), from the engine's Chunks: the whole `response` object, or
its stream of typed events (each `event: <type>` with a `data` object carrying `type` and `sequence_number`):

    response.created, response.in_progress (again with llama-server's prompt_progress: return_progress)
    per output item: response.output_item.added, then for a reasoning item response.content_part.added,
        response.reasoning_text.delta..., response.reasoning_text.done, response.content_part.done; for a message
        the same with response.output_text.*; for a function call response.function_call_arguments.delta...,
        response.function_call_arguments.done; then response.output_item.done
    response.completed (or response.incomplete, cut by max_output_tokens), or an `error` event

The output is a `reasoning` item (a thinking chat's block, read by core.chat.reasoning as the chat's
reasoning_content is: one `reasoning_text` part, no summary), a `message` item with one `output_text` part, and a
`function_call` item per call (its call_id, name and JSON arguments), read from the text by the chat's
ToolCallOutput as /v1/chat/completions reads it. usage: input_tokens_details.cached_tokens are the prompt tokens
the prompt cache gave; output_tokens_details.reasoning_tokens the tokens of the chunks before the answer's first
content, when it thought. A stored response (`store`) is kept with its conversation's items for
previous_response_id.
"""
from __future__ import annotations

import uuid
from typing import Any

from ...core.chat.reasoning import ReasoningOutput, ReasoningSplitter
from ...core.chat.tool_output import ToolCallOutput
from ...core.engine.engine import Chunk
from ..protocol.openai_responses import ResponsesTurn
from ..protocol.responses_items import Item, input_items
from ..response_store import ResponseStore, StoredResponse
from .openai import Shape


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _thought(text: str) -> dict[str, Any]:
    return {"type": "reasoning_text", "text": text}


def reasoning_item(ident: str, text: str | None, status: str) -> Item:
    """A reasoning output item: its one reasoning_text part once the text is known (None: just opened)."""
    return {"id": ident, "type": "reasoning", "status": status, "summary": [],
            "content": [] if text is None else [_thought(text)]}


def message_item(ident: str, text: str | None, status: str) -> Item:
    """A message output item: its one output_text part once the text is known (None: just opened)."""
    return {"id": ident, "type": "message", "status": status, "role": "assistant",
            "content": [] if text is None else [_part(text)]}


def call_item(ident: str, call_id: str, name: str, arguments: str, status: str) -> Item:
    return {"id": ident, "type": "function_call", "status": status, "call_id": call_id, "name": name,
            "arguments": arguments}


class ResponseShape(Shape):
    """One generation (the Responses API has no n) answered as a `response` object or its events."""
    done_marker = False  # (OpenAI's Responses stream ends with its last event, no [DONE])
    named_events = True

    def __init__(self, ident: str, model: str, turn: ResponsesTurn, *, store: ResponseStore,
                 output: ToolCallOutput | None = None, reasoning: ReasoningOutput | None = None,
                 **settings: Any) -> None:
        super().__init__(ident, model, 1, **settings)
        self.turn, self.store, self.output = turn, store, output
        self._parser = output.stream() if output is not None else None
        self._thoughts: ReasoningSplitter | None = reasoning.splitter() if reasoning is not None else None
        self._reasoning_tokens = 0  # tokens of the chunks before the first content (once it thought)
        self._tokens_before = 0  # tokens of the chunks so far, until the first content
        self._thought_seen = self._content_seen = False
        self._sequence = 0
        self._items: list[Item] = []  # a stream's finished output items
        self._open: Item | None = None  # the item being streamed
        self._open_text = ""  # its text (a reasoning's or a message's) or arguments (a call's)

    def _split(self, chunk: Chunk) -> tuple[str, str]:
        """A chunk's (reasoning, content) text, counting the reasoning tokens (see the module's doc)."""
        if self._thoughts is None:
            return "", chunk.text
        reasoning, text = self._thoughts.feed(chunk.text, chunk.finish_reason is not None)
        self._thought_seen = self._thought_seen or bool(reasoning)
        if not self._content_seen:
            before, self._content_seen = self._tokens_before, bool(text)
            self._tokens_before += len(chunk.tokens)
            if self._thought_seen:
                self._reasoning_tokens = before if self._content_seen else self._tokens_before
        return reasoning, text

    def response(self, status: str, output: list[Item], reason: str | None = None) -> dict[str, Any]:
        """The response object, with its usage once the generation finished (`reason`: its finish_reason)."""
        counts = self.usage() if reason is not None else None
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {"id": self.ident, "object": "response", "created_at": self.created, "status": status,
                "error": None, "incomplete_details": incomplete,
                "model": self.model, "output": output, **self.turn.echo,
                "usage": None if counts is None else {
                    "input_tokens": counts["prompt_tokens"],
                    "input_tokens_details": {"cached_tokens": counts["prompt_tokens_details"]["cached_tokens"]},
                    "output_tokens": counts["completion_tokens"],
                    "output_tokens_details": {"reasoning_tokens": self._reasoning_tokens},
                    "total_tokens": counts["total_tokens"]}}

    def _finished(self, output: list[Item], reason: str) -> dict[str, Any]:
        """The finished response, kept in the store with its conversation when the request asked so."""
        response = self.response("incomplete" if reason == "length" else "completed", output, reason)
        if self.turn.store:
            conversation = (*self.turn.items, *input_items(output))
            self.store.put(self.ident, StoredResponse(response, conversation))
        return response

    def whole(self) -> dict[str, Any]:
        parts = self.parts[0]
        split = [self._split(chunk) for chunk in parts]
        thought, text = "".join(r for r, _ in split), "".join(t for _, t in split)
        reason = parts[-1].finish_reason or "stop"
        calls: list[Any] = []
        if self.output is not None:
            parsed, reason = self.output.whole(text, reason)  # (a call cut off by max_output_tokens: its text)
            text, calls = parsed.content, parsed.tool_calls
        status = "incomplete" if reason == "length" else "completed"
        output = [reasoning_item(_id("rs"), thought, status)] if thought else []
        output += [message_item(_id("msg"), text, status)] if text or not calls else []
        output += [call_item(_id("fc"), c.id, c.name, c.arguments, "completed") for c in calls]
        return self._finished(output, reason)

    # the stream

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        self._sequence += 1
        return {"type": kind, "sequence_number": self._sequence - 1, **fields}

    def opening(self) -> list[dict[str, Any]]:
        snapshot = self.response("in_progress", [])
        return [self._event("response.created", response=snapshot),
                self._event("response.in_progress", response=snapshot)]

    def error_events(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        error = body["error"]
        return [self._event("error", code=error.get("code"), message=error["message"], param=error.get("param"))]

    def _where(self) -> dict[str, Any]:
        assert self._open is not None
        return {"item_id": self._open["id"], "output_index": len(self._items)}

    def _close(self, status: str = "completed") -> list[dict[str, Any]]:
        """The events that finish the open item (none when no item is open)."""
        item, text = self._open, self._open_text
        if item is None:
            return []
        where = self._where()
        if item["type"] == "function_call":
            done = call_item(item["id"], item["call_id"], item["name"], text, status)
            events = [self._event("response.function_call_arguments.done", **where, name=item["name"],
                                  arguments=text)]
        elif item["type"] == "message":
            done = message_item(item["id"], text, status)
            events = [self._event("response.output_text.done", **where, content_index=0, text=text, logprobs=[]),
                      self._event("response.content_part.done", **where, content_index=0, part=_part(text))]
        else:
            done = reasoning_item(item["id"], text, status)
            events = [self._event("response.reasoning_text.done", **where, content_index=0, text=text),
                      self._event("response.content_part.done", **where, content_index=0, part=_thought(text))]
        events.append(self._event("response.output_item.done", output_index=where["output_index"], item=done))
        self._items.append(done)
        self._open, self._open_text = None, ""
        return events

    def _opened(self, item: Item) -> list[dict[str, Any]]:
        events = self._close()
        self._open, self._open_text = item, ""
        events.append(self._event("response.output_item.added", output_index=len(self._items), item=item))
        if item["type"] != "function_call":
            part = _part("") if item["type"] == "message" else _thought("")
            events.append(self._event("response.content_part.added", **self._where(), content_index=0, part=part))
        return events

    def _text(self, text: str, kind: str = "message") -> list[dict[str, Any]]:
        """More of a message's text, or (kind "reasoning") of the reasoning's."""
        opened = self._open is not None and self._open["type"] == kind
        events = [] if opened else self._opened(
            message_item(_id("msg"), None, "in_progress") if kind == "message"
            else reasoning_item(_id("rs"), None, "in_progress"))
        self._open_text += text
        if kind == "message":
            return [*events, self._event("response.output_text.delta", **self._where(), content_index=0, delta=text,
                                         logprobs=[])]
        return [*events, self._event("response.reasoning_text.delta", **self._where(), content_index=0, delta=text)]

    def _call(self, delta: dict[str, Any]) -> list[dict[str, Any]]:
        """One of the chat's tool-call deltas: a new call (its id and name), or more of its arguments."""
        function = delta.get("function", {})
        events = []
        if "id" in delta:
            events += self._opened(call_item(_id("fc"), delta["id"], function.get("name", ""), "", "in_progress"))
        arguments = function.get("arguments", "")
        if arguments:
            self._open_text += arguments
            events.append(self._event("response.function_call_arguments.delta", **self._where(), delta=arguments))
        return events

    def events(self, choice: int, chunk: Chunk) -> list[dict[str, Any]]:
        if chunk.progress is not None:  # (return_progress: the engine reports each batch of the prompt)
            return [self._event("response.in_progress", response=self.response("in_progress", []), **report)
                    for report in self._progress_reports(choice, chunk)]
        self._seen(choice, chunk)
        timings = self._timings_if_finished() if self.timings_per_token else {}  # (llama-server's extension)
        last = chunk.finish_reason is not None
        thought, text = self._split(chunk)
        deltas: list[dict[str, Any]] = (([{"content": text}] if text else []) if self._parser is None
                  else self._parser.feed(text, last))
        events = self._text(thought, "reasoning") if thought else []
        for delta in deltas:
            if delta.get("content"):
                events += self._text(delta["content"])
            for call in delta.get("tool_calls", ()):
                events += self._call(call)
        if chunk.finish_reason is None:
            return [{**e, **timings} for e in events]
        reason = (chunk.finish_reason if self._parser is None
                  else self._parser.finish_reason(chunk.finish_reason))
        said = any(i["type"] != "reasoning" for i in self._items) or (
            self._open is not None and self._open["type"] != "reasoning")
        if not said:  # no message and no call: an empty message, as the whole answer has
            events += self._opened(message_item(_id("msg"), None, "in_progress"))
        events += self._close("incomplete" if reason == "length" else "completed")
        response = self._finished(self._items, reason)
        kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        return [*({**e, **timings} for e in events), self._event(kind, response=response, timings=self.timings())]
