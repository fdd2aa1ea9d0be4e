"""Speculative decoding against plain decoding on code editing (issue 36's target: >= 1.5x decode with identical
greedy output): prompt lookup (ngram-simple) by default, a draft model with --draft.

    python -m pyllama90a.bench speculative [--model PATH] [--tokens 200] [--reps 3] [--draft-max 16] [--out DIR]
    python -m pyllama90a.bench speculative --draft [PATH] [--extra-layers 60 --extra-type f32] [--flash-attn off]
        [--kv-type f32]

Each task is a chat request whose prompt holds a code block that the answer largely repeats. Each repetition
runs every task plain and with speculation, interleaved, greedy; decode tok/s is the generated tokens over the
generation's time (the prompt's aside). The tokens of both runs are compared: "identical" says whether
speculation changed the output (a batched decode's float sums may differ from a one-token decode's, so a
near-tie can fall the other way, as in llama.cpp).

--draft (PATH, default: the default model) drafts with that model. The target is --model, or without it the
draft's deeper target (tools/synthetic_target.py: the draft's layers, then --extra-layers of --extra-type whose
output projections are zero: the draft's logits at a larger model's cost, so acceptance is high by
construction). Before the runs the bench measures the cost model: a decode of 1 and of draft_max + 1 tokens on
the target, of 1 token on the draft.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from ..core.generation.outputs import Completion
from ..core.generation.speculative import Speculation
from ..core.gguf.default_model import default_model
from ..core.model.model import Model
from ..tools.synthetic_target import WEIGHT_TYPES, deeper_target
from .report import machine_name, write_results

ARITHMETIC = """def add(a, b):
    return a + b

def mul(a, b):
    result = 0
    for _ in range(b):
        result = add(result, a)
    return result

def power(a, n):
    result = 1
    for _ in range(n):
        result = mul(result, a)
    return result
"""
INVENTORY = """class Inventory:
    \"\"\"A store's stock: item names and their counts.\"\"\"

    def __init__(self):
        self.items = {}

    def add(self, name, count=1):
        if count <= 0:
            raise ValueError("count must be positive")
        self.items[name] = self.items.get(name, 0) + count

    def remove(self, name, count=1):
        if self.items.get(name, 0) < count:
            raise KeyError(name)
        self.items[name] -= count
        if self.items[name] == 0:
            del self.items[name]

    def total(self):
        return sum(self.items.values())

    def report(self):
        lines = []
        for name in sorted(self.items):
            lines.append(f"{name}: {self.items[name]}")
        return "\\n".join(lines)
"""
TASKS = {
    "rename": "Rename the function `add` to `plus` everywhere in this code and show the whole code:\n\n"
              f"```python\n{ARITHMETIC}```",
    "docstring": f"Here is a Python class:\n\n```python\n{INVENTORY}```\n\nAdd a docstring to the method `total` and "
                 f"show the complete code.",
}


def _run(model: Model, task: str, tokens: int) -> Completion:
    completion = model.chat([{"role": "user", "content": TASKS[task]}], max_tokens=tokens, temperature=0)
    assert isinstance(completion, Completion)
    return completion


def _decode_ms(model: Model, prompt: list[int], n_tokens: int, reps: int = 3) -> float:
    """The median time of one decode of `n_tokens` tokens after `prompt` (the cost model's T(n))."""
    times = []
    model.truncate(0)
    model.eval(prompt)
    for _ in range(reps):
        model.truncate(len(prompt))
        start = time.perf_counter()
        model.eval(prompt[:n_tokens])
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _costs(target: Model, draft: Path | None, n_batch: int, settings: dict[str, Any]) -> dict[str, float]:
    """T(1) and T(n_batch) of the target, and T(1) of the draft (loaded alone: the target holds its draft's
    context), after a 64-token prompt (ms)."""
    prompt = target.tokenize(ARITHMETIC)[:64]
    costs = {"target_1": _decode_ms(target, prompt, 1), f"target_{n_batch}": _decode_ms(target, prompt, n_batch)}
    if draft is not None:
        with Model(draft, **settings) as alone:
            costs["draft_1"] = _decode_ms(alone, prompt, 1)
    return costs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyllama90a.bench speculative", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, help="GGUF (default: the default model)")
    ap.add_argument("--tokens", type=int, default=200, help="max_tokens per request")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--draft-max", type=int, default=16)
    ap.add_argument("--ngram", type=int, default=3, help="n-gram size of the lookup")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--draft", nargs="?", const="default", help="draft with this GGUF (no PATH: the default model)")
    ap.add_argument("--extra-layers", type=int, default=60, help="--draft without --model: the target's extra layers")
    ap.add_argument("--extra-type", default="f32", choices=WEIGHT_TYPES, help="their weights' type")
    ap.add_argument("--flash-attn", default="auto", help="both models' flash_attn (both modes)")
    ap.add_argument("--kv-type", default="f16", help="both models' K and V cache type (both modes)")
    ap.add_argument("--out", type=Path, help="write speculative.json/.md here")
    args = ap.parse_args(argv)
    draft = None if args.draft is None else default_model() if args.draft == "default" else Path(args.draft)
    path = args.model or (default_model() if draft is None else
                          deeper_target(draft, extra_layers=args.extra_layers, weight_type=args.extra_type))
    mode = "ngram" if draft is None else "draft"
    speculation = Speculation(draft_max=args.draft_max, ngram_size_n=args.ngram, draft=draft, draft_ctk=args.kv_type,
                              draft_ctv=args.kv_type)
    rates: dict[str, dict[str, list[float]]] = {t: {"plain": [], mode: []} for t in TASKS}
    outcome: dict[str, dict[str, object]] = {}
    settings: dict[str, Any] = {"n_ctx": 2048, "n_threads": args.threads, "flash_attn": args.flash_attn,
                                "ctk": args.kv_type, "ctv": args.kv_type}
    with Model(path, speculative=speculation, **settings) as fast, fast.with_context(**settings) as plain:
        costs = _costs(plain, draft, args.draft_max + 1, settings)
        print("decode costs (ms):", {k: round(v, 1) for k, v in costs.items()}, flush=True)
        for task in TASKS:  # warm-up
            _run(plain, task, 8), _run(fast, task, 8)
        for rep in range(args.reps):
            for task in TASKS:
                base, spec = _run(plain, task, args.tokens), _run(fast, task, args.tokens)
                for name, c in (("plain", base), (mode, spec)):
                    rates[task][name].append(c.timings.generate_tokens_per_s)
                same = base.tokens == spec.tokens
                first_diff = next((i for i, (a, b) in enumerate(zip(base.tokens, spec.tokens, strict=False))
                                   if a != b), None if same else min(len(base.tokens), len(spec.tokens)))
                outcome[task] = {"identical": same, "first_difference": first_diff, "tokens": len(spec.tokens),
                                 "drafted": spec.usage.draft_tokens, "accepted": spec.usage.draft_accepted}
                print(f"[rep {rep + 1}] {task}: plain {rates[task]['plain'][-1]:.1f} tok/s, {mode} "
                      f"{rates[task][mode][-1]:.1f} tok/s, identical {same}, accepted "
                      f"{spec.usage.draft_accepted}/{spec.usage.draft_tokens}", flush=True)
    rows = []
    for task in TASKS:
        p, s = statistics.median(rates[task]["plain"]), statistics.median(rates[task][mode])
        o = outcome[task]
        identical = "yes" if o["identical"] else f"no, from token {o['first_difference']}"
        rows.append(f"| {task} | {p:.1f} | {s:.1f} | {s / p:.2f}x | {o['accepted']}/{o['drafted']} | "
                    f"{o['tokens']} | {identical} |")
    how = f"ngram-simple n={args.ngram}" if draft is None else f"draft model {Path(draft).name}"
    table = "\n".join([
        f"Machine: {machine_name()}; model {Path(path).name}; greedy, {args.tokens} tokens at most; {how}, "
        f"draft_max={args.draft_max}, flash_attn {args.flash_attn}, K/V {args.kv_type}, threads {args.threads}; "
        f"median of {args.reps} "
        f"interleaved repetitions; decode costs (ms): "
        + ", ".join(f"{k} {v:.1f}" for k, v in costs.items()), "",
        f"| task | plain decode tok/s | {mode} decode tok/s | speed-up | accepted/drafted | tokens | identical |",
        "|---|---:|---:|---:|---:|---:|---|", *rows])
    print(table)
    if args.out:
        write_results(args.out, "speculative", {"rates": rates, "outcome": outcome, "tokens": args.tokens,
                                                "draft_max": args.draft_max, "ngram": args.ngram, "mode": mode,
                                                "model": Path(path).name, "draft": draft and Path(draft).name,
                                                "flash_attn": args.flash_attn, "kv_type": args.kv_type,
                                                "costs": costs}, table)
    return 0
