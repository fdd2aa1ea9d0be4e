"""What to constrain generation to, from what users send: a JSON schema (or a pydantic model), OpenAI's
response_format, a regular expression, a GBNF grammar (llama.cpp's `grammar` field), or a tool call.

Each input is checked when its Constraint is made, so a bad schema, regex or grammar is a ConstraintError
naming the field before any token is generated: against the limits of limits.py, then converted and validated
by llguidance in a worker process under a time limit (compile.py), so no constraint can crash or stall this
process. The grammar itself is llguidance's (a JSON schema is compiled by llguidance, a GBNF grammar converted
to its Lark dialect by llguidance's own converter).
"""
from __future__ import annotations

import json
import re
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from ...errors import ConstraintError
from ..toolcalls.pattern import CallPattern
from . import limits as _limits
from .closed_objects import closed_objects
from .compile import JSON_DEFAULTS, _clean, compiled
from .vocab import SPECIAL_PREFIX, Vocab, llguidance

# A JSON value of any kind is not what "json_object" means: OpenAI's JSON mode gives an object.
ANY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object"}



@dataclass(frozen=True, eq=False)
class Constraint:
    """A checked constraint. Make one with the functions of this module (or `constraint_from`), then a
    Matcher per sequence. `kind` is "json_schema", "json_object", "regex", "grammar" or "tool_calls"."""

    kind: str
    source: Any = field(repr=False)        # what the user gave, for messages
    trigger: str | None = None             # lazy: unconstrained until this text appears (tool_calls only)
    _lark: Any = field(default=None, repr=False)  # str, or a function Vocab -> str for vocabulary-dependent text
    _per_vocab: Any = field(default_factory=weakref.WeakKeyDictionary, repr=False)
    _lock: Any = field(default_factory=threading.Lock, repr=False)

    @property
    def lazy(self) -> bool:
        return self.trigger is not None

    def grammar_for(self, vocab: Vocab) -> str:
        """The llguidance grammar (serialized) for this vocabulary."""
        return self._lark if isinstance(self._lark, str) else self._lark(vocab)

    def template(self, vocab: Vocab) -> Any:
        """A fresh llguidance.LLMatcher in its start state, compiled once per vocabulary (new matchers are
        copies of it, so n sequences under one constraint compile it once)."""
        with self._lock:
            t = self._per_vocab.get(vocab)
            if t is None:
                llg = llguidance()
                grammar = self.grammar_for(vocab)
                t = llg.LLMatcher(vocab.tokenizer, grammar, log_level=0)
                if t.is_error():
                    field = _FIELD.get(self.kind, self.kind)
                    raise ConstraintError(f"{field}: {_clean(t.get_error())}", param=field)
                self._per_vocab[vocab] = t
            return t.deep_copy()


_FIELD = {"json_schema": "json_schema", "json_object": "response_format", "regex": "regex",
          "grammar": "grammar", "tool_calls": "tools"}


# -- checks ---------------------------------------------------------------------------------------------------

def _text(name: str, value: object, *, empty_ok: bool = False) -> str:
    if not isinstance(value, str):
        raise ConstraintError(f"{name} must be a str, got {type(value).__name__}")
    if not value and not empty_ok:
        raise ConstraintError(f"{name} is empty")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ConstraintError(f"{name} is not valid Unicode text: {e.reason} at index {e.start}") from None
    _limits.check_text(name, value)
    return value


def schema_dict(schema: object, name: str = "json_schema") -> dict[str, Any]:
    """A JSON schema as a dict: a dict as it is, JSON text parsed, a pydantic model class (anything with a
    `model_json_schema()`) asked for its schema."""
    if hasattr(schema, "model_json_schema") and callable(schema.model_json_schema):  # pydantic v2, duck-typed
        try:
            schema = schema.model_json_schema()
        except Exception as e:  # noqa: BLE001 - pydantic refuses some models; say which
            raise ConstraintError(f"{name}: {type(e).__name__}: {e}") from None
    elif isinstance(schema, str):
        _text(name, schema)
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise ConstraintError(f"{name} is not valid JSON: {e}") from None
        except RecursionError:
            raise ConstraintError(f"{name} is nested too deeply") from None
    if not isinstance(schema, Mapping):
        raise ConstraintError(f"{name} must be a JSON schema object (a dict, JSON text or a pydantic model class), "
                              f"got {type(schema).__name__}")
    _limits.check_schema(name, schema)  # (before json.dumps, which recurses as deep as the schema)
    try:
        text = json.dumps(schema, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise ConstraintError(f"{name} is not JSON-serializable: {e}") from None
    _limits.check_text(name, text)
    return cast(dict[str, Any], json.loads(text))  # a plain, private copy (of a Mapping: a dict)


def _json_grammar(schema: dict[str, Any], name: str) -> str:
    return compiled("json", schema, name)


def _lark_str(text: str) -> str:
    """`text` as a Lark string literal (JSON's escapes are Lark's)."""
    return json.dumps(text, ensure_ascii=False)


def _literal(text: str, vocab: Vocab | None) -> str:
    """Lark for literal `text`, with any special token of the vocabulary in it matched as that token."""
    if not text:
        return ""
    if vocab is None or not vocab.special:
        return _lark_str(text)
    specials = sorted((vocab.pieces[t][1:].decode("utf-8", "replace"), t) for t in vocab.special
                      if len(vocab.pieces[t]) > 1)
    specials = [(s, t) for s, t in specials if s and s in text]
    if not specials:
        return _lark_str(text)
    by_text = dict(specials)
    pattern = re.compile("|".join(re.escape(s) for s in sorted(by_text, key=len, reverse=True)))
    parts: list[str] = []
    pos = 0
    for m in pattern.finditer(text):
        if m.start() > pos:
            parts.append(_lark_str(text[pos:m.start()]))
        parts.append(f"<[{by_text[m.group()]}]>")
        pos = m.end()
    if pos < len(text):
        parts.append(_lark_str(text[pos:]))
    return " ".join(parts)


# -- the constraints ------------------------------------------------------------------------------------------

def json_schema(schema: object, *, name: str = "json_schema") -> Constraint:
    """JSON valid under `schema` (a dict, JSON text, or a pydantic model class); an object schema with
    `properties` and no `additionalProperties` allows no other key (closed_objects.py)."""
    d = closed_objects(schema_dict(schema, name))
    return Constraint("json_schema", d, _lark=_json_grammar(d, name))


def json_object(schema: object | None = None, *, name: str = "response_format") -> Constraint:
    """Any JSON object (OpenAI's JSON mode); with `schema` (llama.cpp's json_object extension), that schema."""
    if schema is not None:
        return json_schema(schema, name=f"{name}.schema")
    return Constraint("json_object", ANY_OBJECT_SCHEMA, _lark=_json_grammar(dict(ANY_OBJECT_SCHEMA), name))


def regex(pattern: str, *, name: str = "regex") -> Constraint:
    """Text that matches `pattern` as a whole (Rust regex syntax: no look-around or back-references)."""
    _text(name, pattern)
    return Constraint("regex", pattern, _lark=compiled("regex", pattern, name))


def grammar(text: str, *, name: str = "grammar") -> Constraint:
    """A GBNF grammar as llama.cpp takes it (rule `root`); text that starts with `%llguidance` is taken as
    llguidance's Lark dialect, as llama.cpp built with LLGuidance does."""
    _text(name, text)
    return Constraint("grammar", text, _lark=compiled("gbnf", text, name))


def tool_calls(formats: Sequence[CallPattern], *, trigger: str | None = None, parallel: bool = False,
               separator: str = "\n", name: str = "tools") -> Constraint:
    """A tool call: one of `formats` (literal prefix, JSON under the schema, literal suffix).

    Each schema is read as json_schema() reads it (objects with `properties` closed by default).
    Without `trigger` the whole output is the call (tool_choice "required" or a named function). With
    `trigger` the constraint is lazy, as llama.cpp's "auto" tool calls: text is free until `trigger` appears,
    and from it on the output must be one of `formats`, each of whose prefixes starts with `trigger`. Output
    with no trigger may end at any point. With `parallel`, more calls may follow, each after `separator` (and
    optional whitespace); otherwise generation ends after the first call.
    """
    if isinstance(formats, CallPattern):
        formats = [formats]
    if not isinstance(formats, (list, tuple)) or not formats:
        raise ConstraintError(f"{name}: at least one tool-call format is needed")
    if not isinstance(parallel, bool):
        raise ConstraintError(f"{name}: parallel must be True or False")
    _text(f"{name} separator", separator, empty_ok=True)
    if trigger is not None:
        _text(f"{name} trigger", trigger)
    checked: list[tuple[str, dict[str, Any], str]] = []
    for i, f in enumerate(formats):
        if not isinstance(f, CallPattern):
            raise ConstraintError(f"{name}[{i}] must be a CallPattern, got {type(f).__name__}")
        prefix = _text(f"{name}[{i}].prefix", f.prefix, empty_ok=trigger is None)
        suffix = _text(f"{name}[{i}].suffix", f.suffix, empty_ok=True)
        if trigger is not None and not prefix.startswith(trigger):
            raise ConstraintError(f"{name}[{i}].prefix must start with the trigger {trigger!r}, got {prefix!r}")
        schema = closed_objects(schema_dict(f.schema, f"{name}[{i}].schema"))
        _json_grammar(schema, f"{name}[{i}].schema")  # checks the schema, naming the format it is in
        checked.append((prefix, schema, suffix))

    def lark(vocab: Vocab | None) -> str:
        def body(prefix: str, schema: dict[str, Any], suffix: str) -> str:
            s = dict(schema)
            s.setdefault("x-guidance", JSON_DEFAULTS)
            parts = [_literal(prefix, vocab), "%json " + json.dumps(s), _literal(suffix, vocab)]
            return " ".join(p for p in parts if p)

        rules = ["%llguidance {}"]
        alts = " | ".join(f"call_{i}" for i in range(len(checked)))
        rules.append(f"call: {alts}")
        for i, (prefix, schema, suffix) in enumerate(checked):
            rules.append(f"call_{i}: {body(prefix, schema, suffix)}")
        more = "(SEP call)*" if parallel else ""
        rules.append(r"SEP: " + (_lark_str(separator) + r" /[ \t\r\n]*/" if separator else r"/[ \t\r\n]*/"))
        if trigger is None:
            rules.insert(1, f"start: call {more}")
        else:
            special = vocab.special_token(trigger) if vocab is not None else None
            # the text before the trigger: anything (never a special token: its bytes start with 0xFF)
            rules.append(r"FREE: /(.|\n)*/")
            firsts = []
            for i, (prefix, schema, suffix) in enumerate(checked):
                rules.append(f"first_{i}: {body(prefix[len(trigger):], schema, suffix)}")
                firsts.append(f"first_{i}")
            if special is not None:
                # a special-token trigger ends the free text by itself
                rules.insert(1, f"start: FREE | FREE <[{special}]> ({' | '.join(firsts)}) {more}")
            else:
                # a lazy lexeme: free text that ends at the first occurrence of the trigger
                rules.append(f"trig[lazy]: FREE {_lark_str(trigger)}")
                rules.insert(1, f"start: FREE | trig ({' | '.join(firsts)}) {more}")
        compiled_lark: str = llguidance().LLMatcher.grammar_from_lark("\n".join(rules) + "\n")  # (llguidance(): Any)
        return compiled_lark

    compiled("lark", lark(None), name)
    cache: weakref.WeakKeyDictionary[Vocab, str] = weakref.WeakKeyDictionary()

    def per_vocab(vocab: Vocab) -> str:
        g = cache.get(vocab)
        if g is None:
            g = cache[vocab] = lark(vocab)
        return g

    return Constraint("tool_calls", tuple(checked), trigger=trigger, _lark=per_vocab)


def response_format(value: object, *, name: str = "response_format") -> Constraint | None:
    """OpenAI's response_format: {"type": "text"} (None: no constraint), {"type": "json_object"} (with
    llama.cpp's optional "schema"), {"type": "json_schema", "json_schema": {"name", "schema", "strict"}};
    or a pydantic model class, as the openai SDK's parse() takes it."""
    if hasattr(value, "model_json_schema"):
        return json_schema(value, name=name)
    if not isinstance(value, Mapping):
        raise ConstraintError(f"{name} must be an object with a \"type\", got {type(value).__name__}")
    kind = value.get("type")
    allowed = {"text": {"type"}, "json_object": {"type", "schema"}, "json_schema": {"type", "json_schema", "schema"}}
    if not isinstance(kind, str) or kind not in allowed:  # (a dict or list here is unhashable: check the type first)
        raise ConstraintError(f"{name}.type must be one of \"text\", \"json_object\", \"json_schema\", got {kind!r}")
    extra = sorted(set(value) - allowed[kind])
    if extra:
        raise ConstraintError(f"{name}: unknown field(s) {', '.join(map(repr, extra))} for type {kind!r}")
    if kind == "text":
        return None
    if kind == "json_object":
        return json_object(value.get("schema"), name=name)
    spec = value.get("json_schema")
    if spec is None and "schema" in value:  # llama.cpp's server takes the schema beside "type" too
        return json_schema(value["schema"], name=f"{name}.schema")
    if "schema" in value:  # both places: the outer one would be dropped (llama.cpp's server drops it silently)
        raise ConstraintError(f"{name}: give the schema in json_schema.schema or beside \"type\", not both "
                              f"(json_schema and schema are both given)")
    if not isinstance(spec, Mapping):
        raise ConstraintError(f"{name}.json_schema must be an object with \"name\" and \"schema\", "
                              f"got {type(spec).__name__}")
    extra = sorted(set(spec) - {"name", "schema", "strict", "description"})
    if extra:
        raise ConstraintError(f"{name}.json_schema: unknown field(s) {', '.join(map(repr, extra))}")
    if "name" in spec:
        n = spec["name"]
        if not isinstance(n, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", n):
            raise ConstraintError(f"{name}.json_schema.name must be 1-64 letters, digits, '_' or '-', got {n!r}")
    if "strict" in spec and spec["strict"] is not None and not isinstance(spec["strict"], bool):
        raise ConstraintError(f"{name}.json_schema.strict must be true or false, got {spec['strict']!r}")
    if spec.get("schema") is None:  # OpenAI: no schema means any JSON object
        return json_object(name=f"{name}.json_schema")
    return json_schema(spec["schema"], name=f"{name}.json_schema.schema")


def constraint_from(*, json_schema: object = None, response_format: object = None, regex: str | None = None,
                    grammar: str | None = None) -> Constraint | None:
    """The one Constraint the arguments ask for (None for none, or for response_format {"type": "text"});
    more than one of them is a ConstraintError."""
    given = [k for k, v in (("json_schema", json_schema), ("response_format", response_format),
                            ("regex", regex), ("grammar", grammar)) if v is not None]
    if len(given) > 1:
        raise ConstraintError(f"give at most one of json_schema, response_format, regex and grammar, "
                              f"got {', '.join(given)}")
    if json_schema is not None:
        return _json_schema(json_schema)
    if response_format is not None:
        return _response_format(response_format)
    if regex is not None:
        return _regex(regex)
    if grammar is not None:
        return _grammar(grammar)
    return None


_json_schema, _response_format, _regex, _grammar = json_schema, response_format, regex, grammar

__all__ = [
    "JSON_DEFAULTS",
    "SPECIAL_PREFIX",
    "CallPattern",
    "Constraint",
    "ConstraintError",
    "constraint_from",
    "grammar",
    "json_object",
    "json_schema",
    "regex",
    "response_format",
    "schema_dict",
    "tool_calls",
]
