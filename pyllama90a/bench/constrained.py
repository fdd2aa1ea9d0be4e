"""Constrained decoding against free decoding with N slots of one BatchEngine (issue 12's target: >= 0.9x).

    python -m pyllama90a.bench constrained [--model PATH] [--parallel 8] [--tokens 64] [--reps 3] [--out DIR]

Each repetition runs both modes, interleaved: N requests at once, the same prompts, greedy. The constrained
requests follow a JSON schema that admits long outputs (an array of short strings), so that they generate
about as many tokens as the free ones; tok/s counts the tokens each mode actually generated over its wall time.
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time
from pathlib import Path

from ..core import constrained
from ..core.engine.engine import BatchEngine
from ..core.gguf.default_model import default_model
from .report import machine_name, write_results

SCHEMA = {"type": "object", "properties": {"words": {"type": "array", "items": {"type": "string", "maxLength": 12},
                                                     "minItems": 40}},
          "required": ["words"], "additionalProperties": False}
PROMPTS = ["List many English words as JSON.", "Write animal names as JSON.", "Give colours as JSON.",
           "Name cities in a JSON list.", "Some fruit, as JSON:", "JSON of verbs:", "Tools, in JSON:",
           "Write a JSON list of rivers."]


def _round(engine: BatchEngine, n: int, tokens: int, constraint: constrained.Constraint | None) -> tuple[int, float]:
    counts = [0] * n

    def run(i: int) -> None:
        extra = {"constraint": constraint} if constraint is not None else {"ignore_eos": True}
        for chunk in engine.stream(PROMPTS[i % len(PROMPTS)], max_tokens=tokens, temperature=0, **extra):
            counts[i] += len(chunk.tokens)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts), time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyllama90a.bench constrained", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, help="GGUF (default: the default model)")
    ap.add_argument("--parallel", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64, help="max_tokens per request")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, help="write constrained.json/.md here")
    args = ap.parse_args(argv)
    path = args.model or default_model()
    constraint = constrained.json_schema(SCHEMA)
    rates: dict[str, list[float]] = {"free": [], "json_schema": []}
    with BatchEngine(path, ctk="q8_0", ctv="q8_0", parallel=args.parallel, n_ctx=512 * args.parallel,
                     n_threads=args.threads) as engine:
        _round(engine, args.parallel, 8, None)  # warm-up (and the vocabulary the constraint layer builds once)
        _round(engine, args.parallel, 8, constraint)
        for rep in range(args.reps):
            for name, c in (("free", None), ("json_schema", constraint)):
                n, seconds = _round(engine, args.parallel, args.tokens, c)
                rates[name].append(n / seconds)
                print(f"[rep {rep + 1}] {name}: {n} tokens in {seconds:.2f} s = {n / seconds:.1f} tok/s", flush=True)
    free, cons = statistics.median(rates["free"]), statistics.median(rates["json_schema"])
    table = "\n".join([
        f"Machine: {machine_name()}; model {Path(path).name}; {args.parallel} slots; {args.tokens} tokens per "
        f"request; median of {args.reps} interleaved repetitions", "",
        "| mode | tok/s (median) | runs | vs free |", "|---|---:|---|---:|",
        f"| free | {free:.1f} | {', '.join(f'{r:.1f}' for r in rates['free'])} | 1.00x |",
        f"| json_schema | {cons:.1f} | {', '.join(f'{r:.1f}' for r in rates['json_schema'])} | {cons / free:.2f}x |"])
    print(table)
    if args.out:
        write_results(args.out, "constrained", {"free": rates["free"], "json_schema": rates["json_schema"],
                                                "parallel": args.parallel, "tokens": args.tokens}, table)
    return 0

