"""Speculative decoding (prompt lookup) against plain decoding on code editing (issue 36's target: >= 1.5x decode
with identical greedy output).

    python -m pyllama90a.bench speculative [--model PATH] [--tokens 200] [--reps 3] [--draft-max 16] [--out DIR]

Each task is a chat request whose prompt holds a code block that the answer largely repeats. Each repetition
runs every task plain and with speculation, interleaved, greedy; decode tok/s is the generated tokens over the
generation's time (the prompt's aside). The tokens of both runs are compared: "identical" says whether
speculation changed the output (a batched decode's float sums may differ from a one-token decode's, so a
near-tie can fall the other way, as in llama.cpp).
"""
from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from ..core.generation.outputs import Completion
from ..core.generation.speculative import Speculation
from ..core.gguf.default_model import default_model
from ..core.model.model import Model
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyllama90a.bench speculative", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, help="GGUF (default: the default model)")
    ap.add_argument("--tokens", type=int, default=200, help="max_tokens per request")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--draft-max", type=int, default=16)
    ap.add_argument("--ngram", type=int, default=3, help="n-gram size of the lookup")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, help="write speculative.json/.md here")
    args = ap.parse_args(argv)
    path = args.model or default_model()
    speculation = Speculation(draft_max=args.draft_max, ngram_size_n=args.ngram)
    rates: dict[str, dict[str, list[float]]] = {t: {"plain": [], "ngram": []} for t in TASKS}
    outcome: dict[str, dict[str, object]] = {}
    with Model(path, n_ctx=2048, n_threads=args.threads) as plain, \
            Model(path, n_ctx=2048, n_threads=args.threads, speculative=speculation) as fast:
        for task in TASKS:  # warm-up
            _run(plain, task, 8), _run(fast, task, 8)
        for rep in range(args.reps):
            for task in TASKS:
                base, spec = _run(plain, task, args.tokens), _run(fast, task, args.tokens)
                for name, c in (("plain", base), ("ngram", spec)):
                    rates[task][name].append(c.timings.generate_tokens_per_s)
                same = base.tokens == spec.tokens
                first_diff = next((i for i, (a, b) in enumerate(zip(base.tokens, spec.tokens, strict=False))
                                   if a != b), None if same else min(len(base.tokens), len(spec.tokens)))
                outcome[task] = {"identical": same, "first_difference": first_diff, "tokens": len(spec.tokens),
                                 "drafted": spec.usage.draft_tokens, "accepted": spec.usage.draft_accepted}
                print(f"[rep {rep + 1}] {task}: plain {rates[task]['plain'][-1]:.1f} tok/s, ngram "
                      f"{rates[task]['ngram'][-1]:.1f} tok/s, identical {same}, accepted "
                      f"{spec.usage.draft_accepted}/{spec.usage.draft_tokens}", flush=True)
    rows = []
    for task in TASKS:
        p, s = statistics.median(rates[task]["plain"]), statistics.median(rates[task]["ngram"])
        o = outcome[task]
        identical = "yes" if o["identical"] else f"no, from token {o['first_difference']}"
        rows.append(f"| {task} | {p:.1f} | {s:.1f} | {s / p:.2f}x | {o['accepted']}/{o['drafted']} | "
                    f"{o['tokens']} | {identical} |")
    table = "\n".join([
        f"Machine: {machine_name()}; model {Path(path).name}; greedy, {args.tokens} tokens at most; ngram-simple "
        f"n={args.ngram}, draft_max={args.draft_max}; median of {args.reps} interleaved repetitions", "",
        "| task | plain decode tok/s | ngram decode tok/s | speed-up | accepted/drafted | tokens | identical |",
        "|---|---:|---:|---:|---:|---:|---|", *rows])
    print(table)
    if args.out:
        write_results(args.out, "speculative", {"rates": rates, "outcome": outcome, "tokens": args.tokens,
                                                "draft_max": args.draft_max, "ngram": args.ngram}, table)
    return 0
