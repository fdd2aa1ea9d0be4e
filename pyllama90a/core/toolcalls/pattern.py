"""What a constrained decoder enforces for tool calls, as plain data: constrained.tool_calls compiles it, the
formats make it; nothing here depends on how it is enforced."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, eq=False)
class CallPattern:
    """One way a tool call is written: literal `prefix`, then JSON valid under `schema`, then literal `suffix`.

    E.g. Hermes/Qwen: prefix '<tool_call>\\n{"name": "get_weather", "arguments": ', schema of the arguments,
    suffix '}\\n</tool_call>'; or prefix '<tool_call>\\n', a schema of {"name", "arguments"}, suffix '\\n</tool_call>'.
    Text that is a special token of the model's vocabulary (e.g. '<|python_tag|>') is matched as that token.
    """

    prefix: str
    schema: Any
    suffix: str = ""


@dataclass(frozen=True)
class ToolCallConstraint:
    """What a constrained decoder enforces for a request's tool calls: a call is one of `patterns`.

    trigger None: from the first generated token (tool_choice "required" or a named function). trigger set
    (tool_choice "auto"): free text until the model writes `trigger`; the constrained text starts where the
    trigger starts (every pattern's prefix starts with the trigger). parallel: more calls may follow the
    first, each after `separator` (and optional whitespace).

    The patterns put the function's name in the literal prefix and constrain its arguments with its own
    `parameters` schema (one pattern per allowed function), so the trigger is a literal prefix of every
    pattern whatever the JSON layer's whitespace, and the JSON layer compiles the functions' schemas, not a
    union of them. (Mistral with parallel calls is the one exception: prefix '[TOOL_CALLS]', a schema of the
    array of calls.) With constrained: tool_calls(c.patterns, trigger=c.trigger, parallel=c.parallel,
    separator=c.separator)."""

    patterns: tuple[CallPattern, ...]
    trigger: str | None
    parallel: bool
    separator: str
