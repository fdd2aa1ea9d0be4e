"""API misuse cases: a Model made with hostile arguments, then hostile calls on it, in a forked child.

A case is `{"target": "api", "base": name, "mutations": [...]}` like a GGUF case, so that the same runner,
shrinker and reports serve both. A mutation holds one op:

    {"op": "arg", "name": "n_ctx", "value": x}                          a Model() keyword argument
    {"op": "call", "method": "generate", "args": [...], "kwargs": {...}}  a method call (or property read)

Values are JSON, plus {"$bytes": hex}, {"$path": kind} (a path made in the child: see _PATHS),
{"$range": n} (the list 0..n-1) and the hostile constraints of _HOSTILE ({"$gbnf_chain": n}, a GBNF chain of n
rules; {"$ref_chain": n}, {"$deep_schema": n}, {"$enum": n}, {"$properties": n}, {"$parens": n},
{"$alternation": n}). {"op": "limits", "values": {...}} lifts constraint limits (constrained.set_limits), so
that what the limits refuse reaches the constraint library in its worker process. After the calls, the case
checks that the Model still generates: an error raised by a bad call must leave the Model usable.
"""
from __future__ import annotations

import functools
import math
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .bases import load_base
from .runner import Stage

MODEL_ARGS: dict[str, list[Any]] = {
    "n_ctx": [1, 2, 8, 2**31, 2**40, 0, -1, 1.5, "256", None],
    "n_batch": [1, 2, 2**31, 2**63, 0],
    "n_ubatch": [1, 2**31, 0],
    "n_seq_max": [2, 64, 256, 2**20, 0],
    "n_threads": [10_000, 2**31, 0, -1, 1.5],
    "n_gpu_layers": [2**31, -2**31, 2**63, 1.5, None],
    "ctk": ["q4_0", "q8_0", "iq4_nl", "bf16", "q3_k", "", None, 8, "F16"],
    "ctv": ["q4_0", "q8_0", "iq4_nl", "bf16", "q3_k", "", None, 8, "F16"],
    "flash_attn": ["on", "off", "auto", "yes", None, True],
    "seed": [-1, 2**32, 2**64, 1.5, "1"],
    "embedding": [True, "no"],
    "chat_template": [  # hostile templates (issue 18): time, memory, output size, nesting
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
        "{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}",
        "{{ messages|tojson(indent=100000000) }}",
        "".join("{% for i" + str(i) + " in [1] %}" for i in range(25)) + "x" + "{% endfor %}" * 25,
        "{% if true %}" * 200 + "x" + "{% endif %}" * 200,
        "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}",
        "{{ raise_exception('no') }}", "{{ messages.__class__ }}", "{% for m in messages %}{{ m.content }}",
        "{{ messages[0].content }}", "", 5,
    ],
}
# constraint sizes (issue 18): values of generate's / chat's constraint arguments
CONSTRAINTS: dict[str, list[Any]] = {
    "grammar": [{"$gbnf_chain": 5000}, {"$gbnf_chain": 3000}, {"$gbnf_chain": 900}, {"$parens": 100},
                {"$alternation": 3000}, 'root ::= "a"', "root ::= root", ""],
    "json_schema": [{"$ref_chain": 1000}, {"$ref_chain": 60}, {"$deep_schema": 900}, {"$deep_schema": 60},
                    {"$enum": 5000}, {"$properties": 20_000}, {"type": "integer"}, "[" * 5000, "{}"],
    "regex": [{"$regex_parens": 500}, "a{1000}{1000}", "(a|b)*c", "(?=x)"],
}
LIMITS: list[dict[str, Any]] = [{"max_rules": 100_000}, {"max_refs": 100_000, "max_ref_depth": 100_000},
                                {"max_depth": 100_000}, {"compile_timeout_s": 0.5}, {"max_enum": 100_000}]
TEXTS: list[Any] = ["Hello", "", " ", "\ud800", "a\u0000b", "\U0001f600" * 3, {"$bytes": "68656c6c6f"},
                    "x" * 5000, None, 5, ["a"], [1, 2, 3], [], [-1], [2**31], [2**63], [1.5], [True]]
TOKENS: list[Any] = [[1, 2, 3], [], [-1], [2**31], [2**63], [1.5], ["a"], None, 5, {"$range": 300},
                     {"$range": 100}, [0] * 8]
FLAGS: list[Any] = [True, False, None, 2, "yes"]
MESSAGES: list[Any] = [
    [{"role": "user", "content": "hi"}], [], None, "hi", [{"role": "user"}], [{"role": "\ud800", "content": "x"}],
    [{"role": "user", "content": "\ud800"}], [{"role": "user", "content": None}], [{"role": 5, "content": "x"}],
    [{"role": "user", "content": "a\u0000b"}], [{"role": "user", "content": "x" * 100_000}], ["hi"],
    [{"role": "system", "content": "s"}] * 50,
]
SAMPLING: dict[str, list[Any]] = {
    "max_tokens": [0, -1, 1, 2**31, 2**63, 1.5, None, "4", True],
    "temperature": [0, -1.0, math.nan, math.inf, 1e308, None, "x", True],
    "top_k": [-1, 0, 2**31, 2**63, None, 1.5],
    "top_p": [math.nan, -1.0, 0.0, 2.0, None],
    "min_p": [math.nan, -1.0, 2.0, None],
    "repeat_penalty": [math.nan, 0.0, -1.0, math.inf, None],
    "seed": [-1, 2**32, 2**64, 1.5, None, "1"],
    "stop": [None, "", [""], [None], "x" * 10_000, 5, ["\ud800"], "\n", []],
    "stream": [True, False],
}
PATHS = ["nul", "dir", "missing-dir", "fifo", "garbage", "empty", "flipped-state", "truncated-state", "bytes"]
CALLS: dict[str, Any] = {
    "generate": lambda g: ([g.pick(TEXTS)], g.sampling() | g.constraint()),
    "chat": lambda g: ([g.pick(MESSAGES)], g.sampling() | g.constraint() | g.template_kwargs()),
    "apply_chat_template": lambda g: ([g.pick(MESSAGES)], {}),
    "tokenize": lambda g: ([g.pick(TEXTS)] + [g.pick(FLAGS) for _ in range(g.rng.choice([0, 1, 2]))], {}),
    "detokenize": lambda g: ([g.pick(TOKENS)] + [g.pick(FLAGS) for _ in range(g.rng.choice([0, 1]))], {}),
    "eval": lambda g: ([g.pick(TOKENS)], {}),
    "logits": lambda g: ([g.pick(TOKENS)], {}),
    "last_logits": lambda g: ([], {}),
    "truncate": lambda g: ([g.pick([-1, 0, 1, 2**63, 1.5, None, True])], {}),
    "metadata": lambda g: ([g.pick([5, None, "\ud800", "x" * 10_000, "general.name", "a\u0000b",
                                    {"$bytes": "00"}])], {}),
    "embed": lambda g: ([g.pick(TEXTS)], {}),
    "save_state": lambda g: ([g.pick([{"$path": p} for p in PATHS] + [None, 5, ""])], {}),
    "load_state": lambda g: ([g.pick([{"$path": p} for p in PATHS] + [None, 5, ""])], {}),
    "close": lambda g: ([], {}),
    "kv_cache": None,  # properties: read them
    "n_ctx": None,
    "n_cached": None,
}


class _Generator:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def pick(self, pool: list[Any]) -> Any:
        return self.rng.choice(pool)

    def sampling(self) -> dict:
        return {k: self.pick(v) for k, v in SAMPLING.items() if self.rng.random() < 0.25}

    def constraint(self) -> dict:
        if self.rng.random() >= 0.3:
            return {}
        name = self.pick(list(CONSTRAINTS))
        return {name: self.pick(CONSTRAINTS[name]), "max_tokens": 2}

    def template_kwargs(self) -> dict:
        return {"chat_template_kwargs": self.pick([{"self": 1}, {"messages": 1}, {"x": "y"}, {5: 1}, []])} \
            if self.rng.random() < 0.15 else {}

    def mutation(self) -> dict:
        method = self.pick(list(CALLS))
        op: dict[str, Any] = {"op": "call", "method": method}
        if CALLS[method] is not None:
            op["args"], op["kwargs"] = CALLS[method](self)
        return {"cls": f"api:{method}", "ops": [op]}


def generate_api_case(seed: int, index: int, base: str) -> dict:
    rng = random.Random(f"api/{seed}/{index}")
    g = _Generator(rng)
    mutations = []
    if rng.random() < 0.4:
        for name in rng.sample(list(MODEL_ARGS), rng.choice([1, 1, 2])):
            mutations.append({"cls": f"api:Model({name})",
                              "ops": [{"op": "arg", "name": name, "value": g.pick(MODEL_ARGS[name])}]})
    if rng.random() < 0.15:
        mutations.append({"cls": "api:constraint-limits", "ops": [{"op": "limits", "values": g.pick(LIMITS)}]})
    mutations += [g.mutation() for _ in range(rng.choice([1, 2, 3]))]
    return {"target": "api", "base": base, "mutations": mutations}


def generate_untrusted_case(seed: int, index: int, base: str) -> dict:
    """Only the untrusted programs (the "untrusted" target): a hostile chat template with chat calls, or
    hostile constraints, some with the constraint limits lifted."""
    rng = random.Random(f"untrusted/{seed}/{index}")
    g = _Generator(rng)
    mutations: list[dict] = []
    if index % 2 == 0:
        template = g.pick(MODEL_ARGS["chat_template"])
        mutations.append({"cls": "untrusted:chat_template", "ops": [{"op": "arg", "name": "chat_template",
                                                                     "value": template}]})
        for _ in range(rng.choice([1, 2])):
            mutations.append({"cls": "untrusted:chat", "ops": [{"op": "call", "method": "chat",
                                                                "args": [HI], "kwargs": {"max_tokens": 2}
                                                                | g.template_kwargs()}]})
    else:
        if rng.random() < 0.4:
            mutations.append({"cls": "untrusted:constraint-limits",
                              "ops": [{"op": "limits", "values": g.pick(LIMITS)}]})
        for _ in range(rng.choice([1, 2])):
            name = g.pick(list(CONSTRAINTS))
            mutations.append({"cls": f"untrusted:{name}", "ops": [{"op": "call", "method": "generate", "args": ["x"],
                                                                   "kwargs": {name: g.pick(CONSTRAINTS[name]),
                                                                              "max_tokens": 2}}]})
    return {"target": "api", "base": base, "mutations": mutations}


HI = [{"role": "user", "content": "hi"}]


# -- in the child -------------------------------------------------------------------------------------

def _make_path(kind: str, work: Path, model: Any) -> Any:
    if kind == "nul":
        return str(work / "a\0b")
    if kind == "dir":
        return str(work)
    if kind == "missing-dir":
        return str(work / "no-such-dir" / "state.bin")
    if kind == "fifo":
        path = work / "fifo"
        if not path.exists():
            os.mkfifo(path)
        return str(path)
    if kind == "bytes":
        return os.fsencode(work / "state-bytes.bin")
    path = work / f"{kind}.bin"
    if kind == "garbage":
        path.write_bytes(random.Random(0).randbytes(4096))
    elif kind == "empty":
        path.write_bytes(b"")
    else:  # a real state file, then damaged
        model.generate("Hello", max_tokens=2, temperature=0)
        model.save_state(path)
        data = bytearray(path.read_bytes())
        if kind == "flipped-state":
            data[len(data) // 2] ^= 0xFF
        else:
            del data[len(data) // 2:]
        path.write_bytes(bytes(data))
    return str(path)


def _decode(j: Any, work: Path, model: Any) -> Any:
    if isinstance(j, list):
        return [_decode(x, work, model) for x in j]
    if isinstance(j, dict):
        if "$bytes" in j:
            return bytes.fromhex(j["$bytes"])
        if "$path" in j:
            return _make_path(j["$path"], work, model)
        if "$range" in j:
            return list(range(j["$range"]))
        for key, make in _HOSTILE.items():
            if key in j:
                return make(j[key])
        return {k: _decode(v, work, model) for k, v in j.items()}
    return j


def _ref_chain(n: int) -> dict:
    defs: dict[str, Any] = {f"d{i}": {"type": "object", "properties": {"x": {"$ref": f"#/$defs/d{i + 1}"}}}
                            for i in range(n)}
    defs[f"d{n}"] = {"type": "string"}
    return {"$ref": "#/$defs/d0", "$defs": defs}


def _deep_schema(n: int) -> dict:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(n - 1):
        schema = {"type": "array", "items": schema}
    return schema


_HOSTILE: dict[str, Any] = {
    "$gbnf_chain": lambda n: "root ::= r0\n" + "".join(f"r{i} ::= r{i + 1}\n" for i in range(n)) + f'r{n} ::= "a"\n',
    "$alternation": lambda n: "root ::= " + " | ".join(f'"w{i}"' for i in range(n)),
    "$parens": lambda n: "root ::= " + "(" * n + '"a"' + ")" * n,
    "$regex_parens": lambda n: "(" * n + "a" + ")" * n,
    "$ref_chain": _ref_chain,
    "$deep_schema": _deep_schema,
    "$enum": lambda n: {"enum": list(range(n))},
    "$properties": lambda n: {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(n)}},
}


def _run_api_case(spec: dict, work: Path, stage: Stage) -> None:
    import pyllama90a as pl
    from pyllama90a.core import constrained
    from pyllama90a.core.chat import render

    from .model_case import _show_native_log

    stage("build")
    work.mkdir(parents=True, exist_ok=True)
    kwargs: dict[str, Any] = {"n_ctx": 256, "n_threads": 1}
    calls = []
    for m in spec["mutations"]:
        for op in m["ops"]:
            if op["op"] == "arg":
                kwargs[op["name"]] = _decode(op["value"], work, None)
            elif op["op"] == "limits":
                constrained.set_limits(**op["values"])
            else:
                calls.append(op)
    render.set_limits(render_timeout_s=2.0)  # a hostile template costs 2 s, not 5
    path = load_base(spec["base"]).data_path
    _show_native_log()
    stage("Model()")
    first_error: pl.LlamaError | None = None
    with pl.Model(path, **kwargs) as model:
        for call in calls:
            stage(f"{call['method']}()")
            try:
                if "args" not in call:
                    getattr(model, call["method"])
                    continue
                args = _decode(call["args"], work, model)
                call_kwargs = _decode(call["kwargs"], work, model)
                result = getattr(model, call["method"])(*args, **call_kwargs)
                if call_kwargs.get("stream") is True:
                    for _ in result:
                        pass
            except pl.LlamaError as e:
                first_error = first_error or e
        if not model.closed:
            stage("generate after the calls")
            model.generate("Hello", max_tokens=2, temperature=0)
    if first_error is not None:
        raise first_error


def api_job(spec: dict, work: Path) -> Callable[[Stage], None]:  # a runner job function (picklable)
    return functools.partial(_run_api_case, spec, work)
