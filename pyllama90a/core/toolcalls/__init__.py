"""Tool calls: the syntax a model family writes them in (format.py), the data a constrained decoder needs
(pattern.py), and one partial-aware reader per format family (formats/<family>.py) from which whole-text
parses and streams (parse.py, stream.py) both come.

Modules:
    tools: a request's tools and tool_choice, checked once where they enter, and call ids
    format: `ToolCallFormat`, a template's tool-call syntax detected
    formats/: one partial-aware reader per family of tool-call syntax
    json_scan: an incremental scanner of one JSON object
    parse: one reader of generated text into content and tool calls, whole or streamed
    stream: `ToolCallStream`, the streaming reader
    pattern: what a constrained decoder enforces for tool calls, as plain data
    results: parsed tool calls, and OpenAI's streaming deltas of them put back together
"""
from __future__ import annotations

from .format import (
    FORMATS,
    GENERIC,
    HERMES,
    LLAMA3_JSON,
    MISTRAL,
    ToolCallFormat,
    detect_format,
    get_format,
    parameters_schema,
    tools_system_prompt,
)
from .pattern import CallPattern, ToolCallConstraint
from .results import ParsedToolCall, ParseResult, reassemble
from .stream import ToolCallStream
from .tools import NAME_PATTERN, ToolChoice, Tools, check_tool_choice, check_tools, new_call_id, tool_names

__all__ = [
    "FORMATS", "GENERIC", "HERMES", "LLAMA3_JSON", "MISTRAL", "NAME_PATTERN", "CallPattern", "ParseResult",
    "ParsedToolCall", "ToolCallConstraint", "ToolCallFormat", "ToolCallStream", "ToolChoice", "Tools",
    "check_tool_choice", "check_tools", "detect_format", "get_format", "new_call_id", "parameters_schema",
    "reassemble", "tool_names", "tools_system_prompt",
]
