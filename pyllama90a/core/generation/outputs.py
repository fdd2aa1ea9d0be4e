"""What a generation gives back: its pieces as they stream, and the whole Completion with its usage and
timings (Model.generate and chat; BatchEngine reports Usage in its Chunks)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..toolcalls import ParsedToolCall
from .sequence import TokenLogprob

FinishReason = Literal["stop", "length", "tool_calls"]


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    # of prompt_tokens, those whose K and V came from a cache (a slot's cells, another slot's, the RAM prompt
    # cache) instead of being decoded: OpenAI's prompt_tokens_details.cached_tokens, llama-server's cache_n
    cached_tokens: int = 0
    draft_tokens: int = 0  # speculative decoding: tokens drafted and decoded for verification
    draft_accepted: int = 0  # of those, the ones kept (sampled as drafted)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


@dataclass(frozen=True)
class Timings:
    prompt_ms: float
    generate_ms: float
    prompt_tokens_evaluated: int  # prompt tokens actually decoded (a reused prefix is not)
    completion_tokens: int

    @property
    def prompt_tokens_per_s(self) -> float:
        return self.prompt_tokens_evaluated / (self.prompt_ms / 1e3) if self.prompt_ms > 0 else 0.0

    @property
    def generate_tokens_per_s(self) -> float:
        return self.completion_tokens / (self.generate_ms / 1e3) if self.generate_ms > 0 else 0.0


@dataclass(frozen=True)
class Completion:
    text: str
    tokens: list[int]
    finish_reason: FinishReason
    usage: Usage
    timings: Timings
    tool_calls: tuple[ParsedToolCall, ...] = ()  # chat with tools: the calls (`text` is then the content)
    reasoning: str | None = None  # a thinking chat: the text of its thinking block (`text` is then the content)
    # with logprobs=N: each generated token's TokenLogprob, in the order of `tokens` (None: none were asked for)
    logprobs: tuple[TokenLogprob, ...] | None = None


@dataclass(frozen=True)
class Piece:
    """One streamed piece: whole UTF-8 characters only. The last piece has a finish_reason.

    A chat with tools streams its content in `text` and its calls in `tool_calls`, as OpenAI's deltas:
    {"index", "id", "type", "function": {"name", "arguments": ""}} when a call starts, then
    {"index", "function": {"arguments": <fragment>}} as its arguments arrive. A thinking chat streams its
    thinking block's text in `reasoning` (see core.chat.reasoning). With logprobs=N, `logprobs` holds the
    TokenLogprob of each of `tokens` (a token's logprob goes with the piece that shows its text)."""
    text: str
    tokens: list[int] = field(default_factory=list)
    finish_reason: FinishReason | None = None
    completion: Completion | None = None  # on the last piece: the whole result
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    reasoning: str = ""  # a thinking chat: the piece's reasoning text (`text` is its content)
    logprobs: tuple[TokenLogprob, ...] = ()
