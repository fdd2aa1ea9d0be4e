"""A constraint's grammar, converted and validated by llguidance in a worker process (isolation.py).

`compile_constraint((kind, source, name))` runs in the worker: kind "json" (a schema dict), "regex", "gbnf" (a
GBNF grammar, or Lark text starting with %llguidance) or "lark" (llguidance's own Lark text); it returns the
serialized grammar, or raises ConstraintError naming `name`. `compiled(kind, source, name)` is the caller's
side: the limits of limits.py first, then the worker under the compile time limit; whatever the worker does
(a crash, a hang, the memory limit) is a ConstraintError here.
"""
from __future__ import annotations

from typing import Any, cast

from ...errors import ConstraintError
from . import isolation
from . import limits as _limits
from .vocab import llguidance

# Compact, deterministic JSON (what OpenAI's models produce): no free whitespace, so a small model cannot loop
# on newlines inside an object. A schema's own "x-guidance" options override these.
JSON_DEFAULTS: dict[str, Any] = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def _clean(message: str) -> str:
    return message.strip().replace("\n\n", "\n")


def _schema_path(schema: Any) -> str:
    """Where the JSON Schema metaschema says `schema` is wrong (e.g. ' (at properties.age.type)'), when the
    jsonschema package is installed; llguidance's own message does not always say."""
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - optional
        return ""
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        error = jsonschema.exceptions.best_match(cls(cls.META_SCHEMA).iter_errors(schema))
    except Exception:  # noqa: BLE001 - a hint only: a metaschema check that itself fails says nothing
        return ""
    if error is None:
        return ""
    path = ".".join(str(p) for p in error.absolute_path) or "(root)"
    return f" (at {path}: {error.message[:200]})"


def _validate(grammar: str, what: str, schema_for_path: Any = None) -> None:
    """ConstraintError naming `what` if llguidance refuses `grammar` (checked without a vocabulary)."""
    is_error, messages = llguidance().LLMatcher.validate_grammar_with_warnings(grammar)
    if is_error:
        detail = _clean(messages[0]) if messages else "invalid"
        if detail.startswith("Unimplemented keys"):  # e.g. uniqueItems (pydantic's set[...]): not a CFG's
            detail += (" (llguidance cannot enforce them, and a schema is never silently weakened: leave them "
                       "out; maxItems bounds an array)")
        where = _schema_path(schema_for_path) if schema_for_path is not None else ""
        raise ConstraintError(f"{what}: {detail}{where}")


def compile_constraint(payload: tuple[str, Any, str]) -> str:
    """(In the worker.) The validated llguidance grammar of a constraint."""
    kind, source, name = payload
    llg = llguidance()
    if kind == "json":
        try:
            grammar: str = llg.LLMatcher.grammar_from_json_schema(source, defaults=JSON_DEFAULTS)
        except (ValueError, TypeError) as e:
            raise ConstraintError(f"{name}: {e}") from None
        _validate(grammar, name, source)
    elif kind == "regex":
        grammar = llg.LLMatcher.grammar_from_regex(source)
        _validate(grammar, name)
    elif kind == "gbnf":
        if source.lstrip().startswith("%llguidance"):
            lark = source
        else:
            from llguidance.gbnf_to_lark import gbnf_to_lark

            try:
                lark = gbnf_to_lark(source)
            except RecursionError:
                raise ConstraintError(f"{name}: nested too deeply") from None
            except Exception as e:  # noqa: BLE001 - the converter raises plain Exception for grammar errors
                raise ConstraintError(f"{name}: {e}") from None
        grammar = llg.LLMatcher.grammar_from_lark(lark)
        _validate(grammar, name)
    elif kind == "lark":
        grammar = source
        _validate(grammar, name)
    else:
        raise ValueError(f"unknown constraint kind {kind!r}")
    return grammar


def compiled(kind: str, source: Any, name: str) -> str:
    """The grammar of a constraint, checked against the limits and compiled in a worker process."""
    if kind == "json":
        _limits.check_schema(name, source)
    else:
        _limits.check_grammar(name, source, {"gbnf": "lark" if source.lstrip().startswith("%llguidance")
                                             else "gbnf"}.get(kind, kind))
    field = name.replace("{", "{{").replace("}", "}}")  # (the formats below are str.format templates)
    wording = isolation.Wording(
        ConstraintError, memory=field + ": compiling it {message} (server flag --isolation-memory-mb)",
        other=field + ": {kind}: {message}",
        timeout=field + ": did not compile within {timeout:g} s (the compile time limit, server flag "
                       "--constraint-compile-timeout)",
        crash=field + ": the constraint library failed on it ({crash}); a constraint this large or deep is not "
                     "supported")
    return cast(str, isolation.run_as("constraint", (kind, source, name),  # (compile_constraint's str)
                                      timeout_s=_limits.get_limits().compile_timeout_s, wording=wording))
