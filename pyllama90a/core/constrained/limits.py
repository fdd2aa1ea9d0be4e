"""Bounds on a constraint before it reaches the constraint library (llguidance).

llguidance compiles a grammar's rules depth first, one native stack frame chain per rule reference
(lark compiler: do_rule -> do_expansions -> do_expr -> do_atom -> do_rule), so a chain of rules is as deep on
the stack as it is long: 4,000 chained GBNF rules, or 1,000 chained `$ref`s of a JSON schema, overflow an
8 MiB stack (SIGSEGV). No option of llguidance bounds that depth (LLParserLimits bounds sizes, counted after
the recursion returns). These checks refuse such constraints with a ConstraintError naming the limit; the
compile itself runs in a worker process (isolation.py) with a time limit, so what the checks miss still cannot
end this process.

Defaults (ConstraintLimits; the server's --constraint-* flags, `set_limits()` in Python):
  max_bytes 1 MiB (text of a grammar, regex or schema as JSON), max_rules 1,000 (GBNF / Lark rules),
  max_depth 64 (nesting of a schema's objects and arrays, of a grammar's or regex's parentheses),
  max_refs 1,000 ($ref in one schema), max_ref_depth 64 ($ref chained through $ref),
  max_enum 1,000 (values of one enum), max_properties 1,000 (of one object), max_nodes 10,000 (subschemas),
  max_repeat 10,000 (a regex's nested bounded repetitions multiplied: a{1000}{1000} is a million, whose
  first mask took 7 s of matching in this process), compile_timeout_s 10 (the compile in the worker).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from ...errors import ConstraintError, PositiveSettings

__all__ = ["ConstraintLimits", "check_grammar", "check_schema", "check_text", "get_limits", "set_limits"]


@dataclass(frozen=True)
class ConstraintLimits(PositiveSettings):
    WHAT = "constraint limit"
    max_bytes: int = 1 << 20
    max_rules: int = 1000
    max_depth: int = 64
    max_refs: int = 1000
    max_ref_depth: int = 64
    max_enum: int = 1000
    max_properties: int = 1000
    max_nodes: int = 10_000
    max_repeat: int = 10_000
    compile_timeout_s: float = 10.0


_limits = ConstraintLimits()


def get_limits() -> ConstraintLimits:
    """The limits in force."""
    return _limits


def set_limits(**changes: Any) -> ConstraintLimits:
    """Change some limits (e.g. set_limits(max_rules=5000)) for every constraint made afterwards."""
    global _limits
    _limits = replace(_limits, **changes)
    return _limits


def _over(name: str, what: str, value: int, limit: int, flag: str) -> ConstraintError:
    return ConstraintError(f"{name}: {what} {value} is over the limit of {limit} "
                           f"(server flag --constraint-{flag.replace('_', '-')})", param=name.split(" ")[0])


def check_text(name: str, text: str) -> None:
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > _limits.max_bytes:
        raise _over(name, "size in bytes", size, _limits.max_bytes, "max_bytes")


# -- grammars and regular expressions -------------------------------------------------------------------------

_GBNF_RULE = re.compile(r"^[ \t]*[A-Za-z0-9_.-]+[ \t]*::=", re.MULTILINE)
_LARK_RULE = re.compile(r"^[ \t]*[?!]?[A-Za-z_][A-Za-z0-9_]*(\.-?\d+)?(\[[^\]\n]*\])?[ \t]*:", re.MULTILINE)


def _paren_depth(text: str, *, lark: bool = False, regex: bool = False) -> int:
    """The deepest nesting of parentheses outside string literals and character classes ([...]; in Lark also
    /regex/ literals, whose parentheses _regex_depth counts)."""
    depth = deepest = 0
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            i += 2
            continue
        if (not regex and c in "\"'") or c == "[" or (lark and c == "/"):
            close = "]" if c == "[" else c
            i += 1
            while i < n and text[i] != close:
                i += 2 if text[i] == "\\" else 1
        elif c == "#" and not lark and not regex:  # a GBNF comment
            while i < n and text[i] != "\n":
                i += 1
        elif c == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif c == ")":
            depth = max(0, depth - 1)
        i += 1
    return deepest


_QUANTIFIER = re.compile(r"\{(\d+)(?:,(\d*))?\}")


def _repeat_product(text: str) -> int:
    """The largest product of nested bounded repetitions of a regex: x{a}{b} and (x{a}){b} count a*b."""
    groups = [1]          # per open group: the largest product inside it
    last = 1              # the product of the atom just read (a group's inside, or stacked quantifiers)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "\\":
            last, i = 1, i + 2
            continue
        if c == "[":
            i += 1
            while i < n and text[i] != "]":
                i += 2 if text[i] == "\\" else 1
            last = 1
        elif c == "(":
            groups.append(1)
            last = 1
        elif c == ")" and len(groups) > 1:
            last = groups.pop()
            groups[-1] = max(groups[-1], last)
        elif c == "{" and (m := _QUANTIFIER.match(text, i)):
            bound = max(int(m.group(1)), int(m.group(2) or 0))
            last *= max(bound, 1)
            groups[-1] = max(groups[-1], last)
            i = m.end()
            continue
        else:
            last = 1
        i += 1
    return max(groups)


def check_grammar(name: str, text: str, kind: str) -> None:
    """kind: "gbnf", "lark" or "regex"."""
    check_text(name, text)
    if kind != "regex":
        rules = len((_LARK_RULE if kind == "lark" else _GBNF_RULE).findall(text))
        if rules > _limits.max_rules:
            raise _over(name, "number of rules", rules, _limits.max_rules, "max_rules")
    depth = _paren_depth(text, lark=kind == "lark", regex=kind == "regex")
    if depth > _limits.max_depth:
        raise _over(name, "nesting depth of parentheses", depth, _limits.max_depth, "max_depth")
    if kind == "regex":
        product = _repeat_product(text)
        if product > _limits.max_repeat:
            raise _over(name, "product of nested repetition counts", product, _limits.max_repeat, "max_repeat")


# -- JSON schemas ---------------------------------------------------------------------------------------------

def check_schema(name: str, schema: Any) -> None:
    """Walk `schema` (JSON data, any depth: no recursion here) and refuse what is over the limits."""
    lim = _limits
    nodes = refs = 0
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > lim.max_depth:
            raise _over(name, "nesting depth", depth, lim.max_depth, "max_depth")
        if isinstance(node, dict):
            nodes += 1
            if nodes > lim.max_nodes:
                raise _over(name, "number of objects", nodes, lim.max_nodes, "max_nodes")
            if isinstance(node.get("$ref"), str):
                refs += 1
                if refs > lim.max_refs:
                    raise _over(name, "number of $ref", refs, lim.max_refs, "max_refs")
            for key, limit, flag in (("enum", lim.max_enum, "max_enum"), ("properties", lim.max_properties,
                                                                            "max_properties")):
                value = node.get(key)
                if isinstance(value, (list, dict)) and len(value) > limit:
                    raise _over(name, f"size of one {key!r}", len(value), limit, flag)
            stack.extend((v, depth + 1) for v in node.values())
        elif isinstance(node, list):
            stack.extend((v, depth + 1) for v in node)
    if refs:
        depth = _ref_depth(schema)
        if depth > lim.max_ref_depth:
            raise _over(name, "depth of $ref chained through $ref", depth, lim.max_ref_depth, "max_ref_depth")


def _pointer(root: Any, ref: str) -> Any:
    """The local target of `ref` ("#/$defs/a"), or None (remote, or not found)."""
    if not ref.startswith("#"):
        return None
    node = root
    for part in ref[1:].split("/")[1:] if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _refs_in(node: Any) -> list[str]:
    """The $ref strings inside `node` (not through other $refs)."""
    out, stack = [], [node]
    while stack:
        n = stack.pop()
        if isinstance(n, dict):
            if isinstance(n.get("$ref"), str):
                out.append(n["$ref"])
            stack.extend(n.values())
        elif isinstance(n, list):
            stack.extend(n)
    return out


def _ref_depth(root: Any) -> int:
    """The longest chain root -> $ref -> $ref ... (a cycle, i.e. a recursive schema, counts once), found by a
    depth-first walk with an explicit stack."""
    children: dict[str, list[str]] = {}

    def refs_of(ref: str) -> list[str]:
        if ref not in children:
            target = _pointer(root, ref)
            children[ref] = _refs_in(target) if target is not None else []
        return children[ref]

    memo: dict[str, int] = {}
    for start in _refs_in(root):
        if start in memo:
            continue
        stack = [(start, iter(refs_of(start)))]
        on_path = {start}
        while stack:
            ref, rest = stack[-1]
            nxt = next(rest, None)
            if nxt is None:
                memo[ref] = 1 + max((memo.get(r, 0) for r in refs_of(ref)), default=0)
                on_path.discard(ref)
                stack.pop()
            elif nxt not in memo and nxt not in on_path:
                on_path.add(nxt)
                stack.append((nxt, iter(refs_of(nxt))))
    return max(memo.values(), default=0)
