"""The Responses API's answer (POST /v1/responses), from the engine's Chunks: the whole `response` object, or
its stream of typed events (each `event: <type>` with a `data` object carrying `type` and `sequence_number`):

    response.created, response.in_progress
    per output item: response.output_item.added, then for a message response.content_part.added,
        response.output_text.delta..., response.output_text.done, response.content_part.done; for a function call
        response.function_call_arguments.delta..., response.function_call_arguments.done; then
        response.output_item.done
    response.completed (or response.incomplete, cut by max_output_tokens), or an `error` event

The output is a `message` item with one `output_text` part, and a `function_call` item per call (its call_id,
name and JSON arguments), read from the text by the chat's ToolCallOutput as /v1/chat/completions reads it. A
stored response (`store`) is kept with its conversation's items for previous_response_id.
"""
from __future__ import annotations

import uuid
from typing import Any

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
                 output: ToolCallOutput | None = None, **settings: Any) -> None:
        super().__init__(ident, model, 1, **settings)
        self.turn, self.store, self.output = turn, store, output
        self._parser = output.stream() if output is not None else None
        self._sequence = 0
        self._items: list[Item] = []  # a stream's finished output items
        self._open: Item | None = None  # the item being streamed
        self._open_text = ""  # its text (a message's) or arguments (a call's)

    def response(self, status: str, output: list[Item], reason: str | None = None) -> dict[str, Any]:
        """The response object, with its usage once the generation finished (`reason`: its finish_reason)."""
        counts = self.usage() if reason is not None else None
        incomplete = {"reason": "max_output_tokens"} if status == "incomplete" else None
        return {"id": self.ident, "object": "response", "created_at": self.created, "status": status,
                "error": None, "incomplete_details": incomplete,
                "model": self.model, "output": output, **self.turn.echo,
                "usage": None if counts is None else {
                    "input_tokens": counts["prompt_tokens"], "output_tokens": counts["completion_tokens"],
                    "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": counts["total_tokens"]}}

    def _finished(self, output: list[Item], reason: str) -> dict[str, Any]:
        """The finished response, kept in the store with its conversation when the request asked so."""
        response = self.response("incomplete" if reason == "length" else "completed", output, reason)
        if self.turn.store:
            conversation = (*self.turn.items, *input_items(output))
            self.store.put(self.ident, StoredResponse(response, conversation))
        return response

    def whole(self) -> dict[str, Any]:
        parts = self.parts[0]
        text, reason = "".join(c.text for c in parts), parts[-1].finish_reason or "stop"
        calls: list[Any] = []
        if self.output is not None:
            parsed, reason = self.output.whole(text, reason)
            text, calls = parsed.content, parsed.tool_calls
        status = "incomplete" if reason == "length" else "completed"
        output = [message_item(_id("msg"), text, status)] if text or not calls else []
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
        if item["type"] == "message":
            done = message_item(item["id"], text, status)
            events = [self._event("response.output_text.done", **where, content_index=0, text=text, logprobs=[]),
                      self._event("response.content_part.done", **where, content_index=0, part=_part(text))]
        else:
            done = call_item(item["id"], item["call_id"], item["name"], text, status)
            events = [self._event("response.function_call_arguments.done", **where, name=item["name"],
                                  arguments=text)]
        events.append(self._event("response.output_item.done", output_index=where["output_index"], item=done))
        self._items.append(done)
        self._open, self._open_text = None, ""
        return events

    def _opened(self, item: Item) -> list[dict[str, Any]]:
        events = self._close()
        self._open, self._open_text = item, ""
        events.append(self._event("response.output_item.added", output_index=len(self._items), item=item))
        if item["type"] == "message":
            events.append(self._event("response.content_part.added", **self._where(), content_index=0,
                                      part=_part("")))
        return events

    def _text(self, text: str) -> list[dict[str, Any]]:
        events = [] if self._open is not None and self._open["type"] == "message" else self._opened(
            message_item(_id("msg"), None, "in_progress"))
        self._open_text += text
        return [*events, self._event("response.output_text.delta", **self._where(), content_index=0, delta=text,
                                     logprobs=[])]

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
        self._seen(choice, chunk)
        last = chunk.finish_reason is not None
        deltas: list[dict[str, Any]] = (([{"content": chunk.text}] if chunk.text else []) if self._parser is None
                  else self._parser.feed(chunk.text, last))
        events = []
        for delta in deltas:
            if delta.get("content"):
                events += self._text(delta["content"])
            for call in delta.get("tool_calls", ()):
                events += self._call(call)
        if chunk.finish_reason is None:
            return events
        reason = (chunk.finish_reason if self._parser is None
                  else self._parser.finish_reason(chunk.finish_reason))
        if not self._items and self._open is None:  # nothing was said: an empty message, as the whole answer has
            events += self._opened(message_item(_id("msg"), None, "in_progress"))
        events += self._close("incomplete" if reason == "length" else "completed")
        response = self._finished(self._items, reason)
        kind = "response.incomplete" if response["status"] == "incomplete" else "response.completed"
        return [*events, self._event(kind, response=response, timings=self.timings())]
