"""The response objects of the generation routes, from the engine's Chunks: text_completion and
chat.completion(.chunk), with n choices, logprobs, and (chat with tools) tool calls read from the text.

A request's n generations each have a `choice` (its index). A chat with tools reads each choice's text with
core.ToolCallOutput, as Model.chat does: whole answers parsed once (a malformed call stays content), streams
split as they arrive into OpenAI's content and tool-call deltas, which the openai SDK reassembles. A thinking chat's
block goes to `reasoning_content` (llama-server's field), in whole answers and deltas, read out first.
"""
from __future__ import annotations

import codecs
import time
from collections.abc import Callable
from typing import Any

from ...core.chat.reasoning import ReasoningOutput, ReasoningSplitter
from ...core.chat.tool_output import ToolCallDeltas, ToolCallOutput
from ...core.engine.engine import Chunk
from ...core.generation.sequence import TokenLogprob
from .timings import RequestTimer


def _text(piece: bytes) -> str:
    return piece.decode("utf-8", "replace")


def _legacy_token(piece: bytes) -> str:
    """A token in the legacy logprobs: its text, or OpenAI's "bytes:\\xNN..." for part of a character (decoded
    alone, every such part would be U+FFFD, one key for all of them)."""
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in piece)


class TextOffsets:
    """The legacy text_offset of each token: the characters of the text before its first byte (a token that
    starts inside a character is at that character)."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._chars = 0

    def add(self, piece: bytes) -> int:
        at = self._chars
        self._chars += len(self._decoder.decode(piece))
        return at


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


class Shape:
    """The response objects of one request (n choices): the fields all of them carry, the usage of all."""
    chunk_object = ""  # the "object" of streamed chunks
    done_marker = True  # a stream ends with `data: [DONE]` (OpenAI's; llama-server's /completion sends none)
    # its last event or whole answer calls the model (detokenize: under the model's lock): made in a worker thread
    ends_in_model = False
    named_events = False  # each stream event goes with an `event:` line naming its `type` (Responses, Anthropic)

    def __init__(self, ident: str, model: str, n: int, *, fingerprint: str = "",
                 timer: RequestTimer | None = None, prompt_tokens: int = 0, timings_per_token: bool = False,
                 verbose_prompt: Callable[[], str] | None = None,
                 response_fields: tuple[str, ...] = ()) -> None:
        """llama-server's request extensions: timings_per_token (every stream event has the timings so far),
        verbose (a whole answer has `__verbose`: the prompt's text, `verbose_prompt` makes it), response_fields
        (/completion). (return_progress: the engine sends progress chunks, which events() reports.)"""
        self.ident, self.model, self.created, self.n = ident, model, int(time.time()), n
        self.fingerprint = fingerprint  # system_fingerprint: the server's version and settings
        self.timer = timer or RequestTimer()
        self.prompt_tokens, self.timings_per_token = prompt_tokens, timings_per_token
        self.verbose_prompt, self.response_fields = verbose_prompt, response_fields
        if verbose_prompt is not None:
            self.ends_in_model = True  # (the prompt's text is detokenized under the model's lock)
        self._generated_n = 0  # tokens generated so far, over all choices
        self._progressed = [False] * n  # each choice's first prompt_progress report sent (return_progress)
        self.parts: list[list[Chunk]] = [[] for _ in range(n)]  # whole answers: each choice's chunks
        self.last: list[Chunk | None] = [None] * n               # each choice's last chunk, once it finished

    def _base(self, obj: str | None = None) -> dict[str, Any]:
        return {"id": self.ident, "object": obj or self.chunk_object, "created": self.created, "model": self.model,
                "system_fingerprint": self.fingerprint}

    def _seen(self, choice: int, chunk: Chunk) -> None:
        self.timer.saw(bool(chunk.tokens))
        self._generated_n += len(chunk.tokens)
        if chunk.finish_reason is not None:
            self.last[choice] = chunk

    def add(self, choice: int, chunk: Chunk) -> None:
        """A chunk of a whole (non-streamed) answer."""
        self._seen(choice, chunk)
        self.parts[choice].append(chunk)

    @property
    def finished(self) -> bool:
        return all(c is not None for c in self.last)

    def usage(self) -> dict[str, Any]:
        """The prompt once (every choice continues the same prompt; the cached part of the first choice's, as
        llama-server counts it), the completions of all choices."""
        done = [c.usage for c in self.last if c is not None and c.usage is not None]
        return usage(done[0].prompt_tokens if done else 0, sum(u.completion_tokens for u in done),
                     done[0].cached_tokens if done else 0)

    def timings(self) -> dict[str, Any]:
        """llama-server's timings of the whole request (server/timings.py)."""
        counts = self.usage()
        cached = counts["prompt_tokens_details"]["cached_tokens"]
        done = [c.usage for c in self.last if c is not None and c.usage is not None]
        drafts = (sum(u.draft_tokens for u in done), sum(u.draft_accepted for u in done))
        return self.timer.timings(counts["prompt_tokens"] - cached, counts["completion_tokens"], cached, drafts)

    def _timings_if_finished(self) -> dict[str, Any]:
        """{"timings": ...} for the stream event that finishes the request's last choice, else {} (with
        timings_per_token: those so far, on every event)."""
        if self.finished:
            return {"timings": self.timings()}
        if self.timings_per_token:
            return {"timings": self.timer.timings(self.prompt_tokens, self._generated_n)}
        return {}

    def _progress_reports(self, choice: int, chunk: Chunk) -> list[dict[str, Any]]:
        """The fields llama-server's prompt_progress events add, of a progress chunk (return_progress, a stream:
        the engine sends one after each batch of the prompt); the first also sends the report from before any
        batch (processed = cache), as llama-server's first one is. With timings_per_token each has the timings
        so far (the first all zero: nothing decoded yet)."""
        assert chunk.progress is not None
        cache, processed, total = chunk.progress
        ms = round((time.perf_counter() - self.timer.queued) * 1e3)
        first = not self._progressed[choice]
        self._progressed[choice] = True
        return [{"prompt_progress": {"total": total, "cache": cache, "processed": n, "time_ms": ms},
                 **({"timings": self.timer.prompt_so_far(n - cache, cache)} if self.timings_per_token else {})}
                for n in ((cache, processed) if first else (processed,))]

    def _verbose(self, content: str) -> dict[str, Any]:
        """llama-server's `__verbose` (verbose: true) of a whole answer: its native fields, the prompt's text."""
        if self.verbose_prompt is None:
            return {}
        return {"__verbose": {"prompt": self.verbose_prompt(), "content": content,
                              "tokens_evaluated": self.prompt_tokens, "tokens_predicted": self._generated_n,
                              "timings": self.timings()}}

    def usage_only(self) -> dict[str, Any]:
        # (the last event: llama-server's timings go on it)
        return {**self._base(), "choices": [], "usage": self.usage(), "timings": self.timings()}

    def opening(self) -> list[dict[str, Any]]:
        """The stream events before the first chunk."""
        raise NotImplementedError

    def events(self, choice: int, chunk: Chunk) -> list[dict[str, Any]]:
        """The stream events of one chunk of `choice`."""
        raise NotImplementedError

    def error_events(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        """The stream events of an error after the status was sent (`body`: its {"error": ...} answer)."""
        return [body]

    def whole(self) -> dict[str, Any]:
        """The whole answer, once every choice finished."""
        raise NotImplementedError


class CompletionShape(Shape):
    """text_completion objects; logprobs in the legacy shape (tokens, token_logprobs, top_logprobs)."""
    chunk_object = "text_completion"

    def __init__(self, ident: str, model: str, n: int, **settings: Any) -> None:
        super().__init__(ident, model, n, **settings)
        self._offsets = [TextOffsets() for _ in range(n)]

    @staticmethod
    def _logprobs(items: list[TokenLogprob], offsets: TextOffsets) -> dict[str, Any]:
        """The logprobs object of `items`, whose characters `offsets` counts on from."""
        return {"tokens": [_legacy_token(i.piece) for i in items], "token_logprobs": [i.logprob for i in items],
                "top_logprobs": [{_legacy_token(p): lp for _, p, lp in i.top} for i in items],
                "text_offset": [offsets.add(i.piece) for i in items]}

    def opening(self) -> list[dict[str, Any]]:
        return []

    def events(self, choice: int, chunk: Chunk) -> list[dict[str, Any]]:
        """The stream events of one chunk of `choice`."""
        if chunk.progress is not None:
            return [{**self._base(), "choices": [], **r} for r in self._progress_reports(choice, chunk)]
        self._seen(choice, chunk)
        if not (chunk.text or chunk.logprobs or chunk.finish_reason):
            return []
        logprobs = None
        if chunk.logprobs:
            logprobs = self._logprobs(list(chunk.logprobs), self._offsets[choice])
        return [{**self._base(), "choices": [{"index": choice, "text": chunk.text,
                                              "finish_reason": chunk.finish_reason, "logprobs": logprobs}],
                 **self._timings_if_finished()}]

    def whole(self) -> dict[str, Any]:
        choices = []
        for i, parts in enumerate(self.parts):
            items = [item for c in parts for item in c.logprobs]
            choices.append({"index": i, "text": "".join(c.text for c in parts),
                            "finish_reason": parts[-1].finish_reason,
                            "logprobs": self._logprobs(items, TextOffsets()) if items else None})
        return {**self._base(), "choices": choices, "usage": self.usage(), "timings": self.timings(),
                **self._verbose("".join(c.text for c in self.parts[0]))}


class ChatShape(Shape):
    """chat.completion(.chunk) objects; logprobs in the chat shape (content: [{token, logprob, bytes, ...}]);
    with tools, each choice's text read for calls."""
    chunk_object = "chat.completion.chunk"

    def __init__(self, ident: str, model: str, n: int, output: ToolCallOutput | None = None,
                 reasoning: ReasoningOutput | None = None, **settings: Any) -> None:
        super().__init__(ident, model, n, **settings)
        self.output, self.reasoning = output, reasoning
        self._parsers: list[ToolCallDeltas | None] = [output.stream() if output is not None else None
                                                      for _ in range(n)]
        # a thinking chat: each choice's text split into reasoning_content and content, before the tool calls
        self._thoughts: list[ReasoningSplitter | None] = [reasoning.splitter() if reasoning is not None else None
                                                          for _ in range(n)]

    @staticmethod
    def _logprobs(items: list[TokenLogprob]) -> dict[str, Any]:
        return {"content": [
            {"token": _text(i.piece), "logprob": i.logprob, "bytes": list(i.piece),
             "top_logprobs": [{"token": _text(p), "logprob": lp, "bytes": list(p)} for _, p, lp in i.top]}
            for i in items]}

    def _chunk(self, choice: int, delta: dict[str, Any], finish: str | None = None,
               logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
        return {**self._base(), "choices": [{"index": choice, "delta": delta, "finish_reason": finish,
                                             "logprobs": logprobs}]}

    def opening(self) -> list[dict[str, Any]]:
        # the role alone, its content null until text comes (as OpenAI and llama-server send it); the content
        # deltas after it are never empty
        return [self._chunk(i, {"role": "assistant", "content": None}) for i in range(self.n)]

    def events(self, choice: int, chunk: Chunk) -> list[dict[str, Any]]:
        """The stream events of one chunk of `choice`: its content or tool-call deltas, its logprobs, and
        with the last chunk the finish_reason ("tool_calls" when the choice made calls)."""
        if chunk.progress is not None:  # (llama-server's progress event: the role's delta again, and the report)
            return [{**self._chunk(choice, {"role": "assistant", "content": None}), **r}
                    for r in self._progress_reports(choice, chunk)]
        self._seen(choice, chunk)
        parser, thoughts = self._parsers[choice], self._thoughts[choice]
        last = chunk.finish_reason is not None
        reasoning, text = thoughts.feed(chunk.text, last) if thoughts is not None else ("", chunk.text)
        deltas: list[dict[str, Any]] = (([{"content": text}] if text else []) if parser is None
                                        else [d for d in parser.feed(text, last) if d.get("content") != ""
                                              or len(d) > 1])
        if parser is not None and last:  # (a call cut off by max_tokens: the text not sent yet, as content)
            deltas += parser.cut_off(chunk.finish_reason or "stop")
        if reasoning:
            deltas.insert(0, {"reasoning_content": reasoning})
        logprobs = self._logprobs(list(chunk.logprobs)) if chunk.logprobs else None
        if logprobs is not None and not deltas:
            deltas = [{}]  # the tokens' text is held back (it may start a call): their logprobs still go out
        token_timings = self._timings_if_finished() if self.timings_per_token else {}
        events = [{**self._chunk(choice, d, logprobs=logprobs if j == 0 else None), **token_timings}
                  for j, d in enumerate(deltas)]
        if chunk.finish_reason is not None:  # (last)
            reason = chunk.finish_reason if parser is None else parser.finish_reason(chunk.finish_reason)
            events.append({**self._chunk(choice, {}, reason), **self._timings_if_finished()})
        return events

    def whole(self) -> dict[str, Any]:
        choices = []
        for i, parts in enumerate(self.parts):
            items = [item for c in parts for item in c.logprobs]
            text = "".join(c.text for c in parts)
            reasoning = ""
            if self.reasoning is not None:
                reasoning, text = self.reasoning.whole(text)
            reason = parts[-1].finish_reason or "stop"
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if self.output is not None:
                parsed, reason = self.output.whole(text, reason)  # (a call cut off by max_tokens: its text)
                message = parsed.message()
            if reasoning:
                message["reasoning_content"] = reasoning
            choices.append({"index": i, "message": message, "finish_reason": reason,
                            "logprobs": self._logprobs(items) if items else None})
        return {**self._base("chat.completion"), "choices": choices, "usage": self.usage(), "timings": self.timings(),
                **self._verbose("".join(c.text for c in self.parts[0]))}
