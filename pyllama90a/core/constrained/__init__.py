"""Constrained decoding: JSON schema, OpenAI response_format, regex, GBNF grammar and tool calls, with
llguidance (pip install "pyllama90a[structured]"), plus OpenAI's logit_bias.

    from pyllama90a import constrained as c
    spec = c.constraint_from(json_schema={"type": "object", ...})   # or response_format=, regex=, grammar=
    m = c.Matcher(spec, model)                                      # one per sequence
    m.apply(row); token = sample(row); m.accept(token)              # per step; stop when m.is_done()

Choice of library and its numbers: benchmarks/results/constrained-backends.md.

Modules:
    spec: what to constrain generation to, from what users send
    limits: bounds on a constraint before it reaches llguidance
    closed_objects: object schemas closed by default, as llama.cpp's converter reads them
    compile: a constraint's grammar converted and validated by llguidance in a worker process
    isolation: untrusted programs (grammars, schemas, chat templates) run in child processes
    vocab: llguidance's view of a loaded model's vocabulary
    matcher: per-sequence constrained decoding
    logit_bias: OpenAI's logit_bias
    rules: a request's rules on its output beyond the sampler chain
"""
from __future__ import annotations

from ...errors import ConstraintError
from .limits import ConstraintLimits, get_limits, set_limits
from .logit_bias import LogitBias, apply_logit_bias
from .matcher import Matcher, apply_bitmask, compute_masks
from .rules import OutputRules
from .spec import (
    JSON_DEFAULTS,
    CallPattern,
    Constraint,
    constraint_from,
    grammar,
    json_object,
    json_schema,
    regex,
    response_format,
    schema_dict,
    tool_calls,
)
from .vocab import Vocab, vocab_for

__all__ = [
    "JSON_DEFAULTS",
    "CallPattern",
    "Constraint",
    "ConstraintError",
    "ConstraintLimits",
    "LogitBias",
    "Matcher",
    "OutputRules",
    "Vocab",
    "apply_bitmask",
    "apply_logit_bias",
    "compute_masks",
    "constraint_from",
    "get_limits",
    "grammar",
    "json_object",
    "json_schema",
    "regex",
    "response_format",
    "schema_dict",
    "set_limits",
    "tool_calls",
    "vocab_for",
]
