"""The generation core shared by Model, BatchEngine and the server: one checked request (`GenerationRequest`),
one generation step (`GenerationSequence`), the KV-cache prefix reuse both paths use, and one reader of a
chat's output into content and tool calls (`ToolCallOutput`)."""
from __future__ import annotations

from .cache import common_prefix, keep_cached_prefix
from .request import MAX_TOP_LOGPROBS, GenerationRequest, RequestOptions, check_stops
from .sequence import GenerationSequence, Step, TokenLogprob
from .tool_output import ToolCallOutput, completion_of

__all__ = ["MAX_TOP_LOGPROBS", "GenerationRequest", "GenerationSequence", "RequestOptions", "Step", "TokenLogprob",
           "ToolCallOutput", "check_stops", "common_prefix", "completion_of", "keep_cached_prefix"]
