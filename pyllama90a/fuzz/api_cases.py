"""API misuse cases: a Model made with hostile arguments, then hostile calls on it, in a forked child.

A case is `{"target": "api", "base": name, "mutations": [...]}` like a GGUF case, so that the same runner,
shrinker and reports serve both. A mutation holds one op:

    {"op": "arg", "name": "n_ctx", "value": x}                          a Model() keyword argument
    {"op": "call", "method": "generate", "args": [...], "kwargs": {...}}  a method call (or property read)

Values are JSON, plus {"$bytes": hex}, {"$path": kind} (a path made in the child: see _PATHS) and
{"$range": n} (the list 0..n-1). After the calls, the case checks that the Model still generates: an
error raised by a bad call must leave the Model usable.
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
}
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
    "generate": lambda g: ([g.pick(TEXTS)], g.sampling()),
    "chat": lambda g: ([g.pick(MESSAGES)], g.sampling()),
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
    mutations += [g.mutation() for _ in range(rng.choice([1, 2, 3]))]
    return {"target": "api", "base": base, "mutations": mutations}


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
        return {k: _decode(v, work, model) for k, v in j.items()}
    return j


def _run_api_case(spec: dict, work: Path, stage: Stage) -> None:
    import pyllama90a as pl
    from .model_case import _show_native_log

    stage("build")
    work.mkdir(parents=True, exist_ok=True)
    kwargs: dict[str, Any] = {"n_ctx": 256, "n_threads": 1}
    calls = []
    for m in spec["mutations"]:
        for op in m["ops"]:
            if op["op"] == "arg":
                kwargs[op["name"]] = _decode(op["value"], work, None)
            else:
                calls.append(op)
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
