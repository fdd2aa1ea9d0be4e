"""CK's generated fmha_fwd_api.cpp, read as data: which compiled instance fmha_fwd would call.

The generated dispatcher is a fixed shape of nested if/else-if chains (data type, then head dim, then
one condition per instance over the traits `t` and the arguments `a`). This parses that shape and
evaluates the conditions in Python, so the tests can show that every argument set the mapping produces
reaches a compiled instance (fmha_fwd returns -1 otherwise) without a GPU.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from types import SimpleNamespace

ENUMS = {
    "mask_enum::no_mask": "0", "mask_enum::mask_top_left": "1", "mask_enum::mask_bottom_right": "2",
    "mask_enum::window_generic": "3",
    "bias_enum::no_bias": "0", "bias_enum::elementwise_bias": "1", "bias_enum::alibi": "2",
}


@dataclass
class Instance:
    condition: str  # a Python expression over t and a
    trait: str      # the fmha_fwd_traits_<...> the branch calls


@dataclass
class HeadDimCase:
    condition: str
    instances: list[Instance]


@dataclass
class DataTypeCase:
    condition: str
    head_dims: list[HeadDimCase]


def python_expression(cpp: str) -> str:
    expr = re.sub(r"/\*.*?\*/", "", cpp)
    expr = re.sub(r'(\w+(?:\.\w+)*)\.compare\("(\w+)"\)\s*==\s*0', r'(\1 == "\2")', expr)
    for name, value in ENUMS.items():
        expr = expr.replace(name, value)
    expr = expr.replace("&&", " and ").replace("||", " or ")
    expr = re.sub(r"\s+", " ", expr)
    expr = re.sub(r"\btrue\b", "True", expr)
    expr = re.sub(r"\bfalse\b", "False", expr)
    if re.search(r"::|!(?!=)|\?", expr):
        raise ValueError(f"a C++ construct this reader does not know: {cpp}")
    return expr.strip()


def _condition(line: str) -> str:
    """The condition of an `if (...) {` / `else if (...) {` line (parentheses balanced)."""
    start = line.index("(")
    depth = 0
    for i in range(start, len(line)):
        depth += {"(": 1, ")": -1}.get(line[i], 0)
        if depth == 0:
            return line[start + 1:i]
    raise ValueError(f"unbalanced condition: {line}")


def parse_api(source: str) -> list[DataTypeCase]:
    body = source[source.index("float fmha_fwd(fmha_fwd_traits t"):]
    lines = body.splitlines()
    cases: list[DataTypeCase] = []
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if "t.data_type.compare" in line:
            cases.append(DataTypeCase(python_expression(_condition(line)), []))
        elif line.startswith(("if (t.hdim_q", "else if (t.hdim_q")):
            cases[-1].head_dims.append(HeadDimCase(python_expression(_condition(line)), []))
        elif line.startswith(("if((t.is_group_mode", "else if((t.is_group_mode")):
            text = line
            while not text.rstrip().endswith("{"):  # a condition spans lines up to its opening brace
                i += 1
                text += " " + lines[i].strip()
            trait = re.search(r"using trait_ = (fmha_fwd_traits_<.*?>);", lines[i + 1]).group(1)
            cases[-1].head_dims[-1].instances.append(Instance(python_expression(_condition(text)), trait))
        i += 1
    return cases


def namespace(cdata, fields: list[str]) -> SimpleNamespace:
    return SimpleNamespace(**{f: getattr(cdata, f) for f in fields})


def select(cases: list[DataTypeCase], t: SimpleNamespace, a: SimpleNamespace) -> str | None:
    """The trait of the instance fmha_fwd calls for (t, a), or None where it returns -1."""
    scope = {"t": t, "a": a}
    for dtype in cases:
        if eval(dtype.condition, {}, scope):  # noqa: S307 - our own translation of CK's generated C++
            for hdim in dtype.head_dims:
                if eval(hdim.condition, {}, scope):  # noqa: S307
                    for instance in hdim.instances:
                        if eval(instance.condition, {}, scope):  # noqa: S307
                            return instance.trait
                    return None  # else-if chain: no later head-dim case is tried
            return None
    return None


def trait_parameters(trait: str) -> list[str]:
    """fmha_fwd_traits_<...>'s template arguments, split at top-level commas."""
    inner = trait[trait.index("<") + 1:trait.rindex(">")]
    out, depth, current = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            out.append(current.strip())
            current = ""
            continue
        depth += {"<": 1, ">": -1}.get(ch, 0)
        current += ch
    out.append(current.strip())
    return out
