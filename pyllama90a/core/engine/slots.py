"""What a BatchEngine keeps of each request and each slot, shared by engine.py, lora_turns.py and slot_files.py:
a request's Job (its prompt, its generation, where its Chunks go) and the Slot (a sequence id and the tokens in
its cells) that runs it. Only the engine thread changes them once a job is queued. Also the records the engine
hands out: a request's Handle and the EngineStats."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from ..generation.lora_request import Scales
from ..generation.outputs import FinishReason, Usage
from ..generation.sequence import GenerationSequence, TokenLogprob


@dataclass(frozen=True)
class Chunk:
    """A step of one request's output. The last chunk has finish_reason and usage set (or error)."""
    text: str = ""
    tokens: tuple[int, ...] = ()
    logprobs: tuple[TokenLogprob, ...] = ()
    # "stop" or "length" (the engine reads no tool calls: the server does, with core.ToolCallOutput), or "error"
    finish_reason: FinishReason | Literal["error"] | None = None
    usage: Usage | None = None
    error: Exception | None = None
    # a prompt-progress report (a Job with progress): (prompt tokens from a cache, prompt tokens in the cells
    # now, the prompt's tokens), sent after each batch that decoded part of the prompt; it carries nothing else
    progress: tuple[int, int, int] | None = None


@dataclass
class Job:
    """A request from submit() to its last chunk."""
    prompt: list[int]
    sequence: GenerationSequence
    on_chunk: Callable[[Chunk], None]
    cancelled: bool = False
    lora: Scales = ()  # every adapter's scale for this request (lora_turns.py)
    slot: int | None = None  # the slot it must run in (llama-server's id_slot); None: the best free one
    progress: bool = False  # a progress Chunk after each batch of its prompt (llama-server's return_progress)
    to_decode: list[int] = field(default_factory=list)  # prompt or sampled tokens not yet in the KV cache
    cached: int = 0  # prompt tokens whose cells came from a cache (prefix_reuse.py), not decoded: Usage's
    draft: list[int] = field(default_factory=list)  # tokens guessed to follow to_decode's sampled one (speculative)
    # sampled tokens whose text is held back (part of a UTF-8 character, a possible stop string): no chunk has
    # carried them yet, so the next one does
    unsent: list[int] = field(default_factory=list)

    @property
    def generated(self) -> list[int]:
        return self.sequence.generated


@dataclass
class Slot:
    """One of the engine's `parallel` sequences of the context, and the job it runs (None while idle)."""
    seq: int
    cached: list[int] = field(default_factory=list)  # tokens whose K and V are in this sequence's cells
    lora: Scales = ()  # the adapter scales those cells were computed with
    job: Job | None = None
    admitted: int = 0  # when it last took a request (the engine's count of admissions): the least recent is
                       # the one a request that shares no prefix takes


@dataclass(frozen=True)
class Handle:
    """A submitted request: cancel() frees its slot at the next step (e.g. when a client disconnects)."""
    cancel: Callable[[], None]


@dataclass(frozen=True)
class EngineStats:
    requests_total: int
    requests_failed: int
    prompt_tokens_total: int       # prompt tokens of finished and running requests
    prompt_tokens_decoded: int     # of those, the ones decoded (the rest came from a slot's cache)
    completion_tokens_total: int
    queue_depth: int
    busy_slots: int
    parallel: int
    tokens_per_s: float            # generated tokens per second over the last few seconds
    draft_tokens_total: int = 0    # speculative decoding: tokens drafted and decoded for verification
    draft_accepted_total: int = 0  # of those, the ones kept
    drafts_total: int = 0          # drafts verified (each one or more tokens)
    decodes_total: int = 0         # decode calls (each a batch of one or more slots' tokens)
    decode_slots_total: int = 0    # slots in those calls, summed
    tokens_max: int = 0            # the most tokens a slot's cells held at the end of a decode
