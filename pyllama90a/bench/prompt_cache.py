"""`python -m pyllama90a.bench prompt-cache`: time to first token of a repeated long system prompt with a new
user turn each time, when its cells come from nowhere, from the host-RAM prompt cache, or from a slot.

Each round sends one BatchEngine per setting an unrelated chat (which, in one slot, replaces the cells of the
last one), then the system prompt with a new user turn, and times that request from submit to its first token:
    no reuse     1 slot, no RAM cache: the unrelated chat took the slot, the whole prompt is decoded
    RAM cache    1 slot, --cache-ram: the slot's cells were stored before the unrelated chat took it and are
                 restored (prompt_cache.py)
    slot reuse   2 slots: the unrelated chat takes the other slot, the prompt's slot keeps its cells
The engines take turns within a round, in alternating order between rounds, so that drift hits all alike; a
first round, not timed, fills the caches.

    python -m pyllama90a.bench prompt-cache --system-tokens 2048 --rounds 4 --out benchmarks/results/x
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from ..core.engine.engine import BatchEngine
from .report import machine_name, write_results

SETTINGS = {"no reuse": (1, 0), "RAM cache": (1, 256 << 20), "slot reuse": (2, 0)}  # (slots, cache_ram_bytes)
QUESTIONS = ["What is the capital of France?", "Name three red fruits.", "How many legs does a spider have?",
             "Write a haiku about rain.", "What is 17 times 3?", "Who wrote Hamlet?", "Why is the sky blue?",
             "Translate 'good morning' to Spanish.", "What is a prime number?", "Suggest a name for a cat."]


def system_prompt(engine: BatchEngine, n_tokens: int) -> str:
    """Numbered rules, as many as make about `n_tokens` tokens of system prompt."""
    rules = ["You are a helpful assistant who follows these rules."]
    while len(engine.tokenize_prompt(" ".join(rules))) < n_tokens:
        rules.append(f"Rule {len(rules)}: when asked about topic {len(rules)}, answer briefly and kindly.")
    return " ".join(rules)


def time_to_first_token(engine: BatchEngine, tokens: list[int], max_tokens: int) -> tuple[float, int]:
    """Seconds from submit to the first generated token, and the prompt tokens the engine reused."""
    start = time.perf_counter()
    first = float("nan")
    cached = -1
    for chunk in engine.stream(tokens, max_tokens=max_tokens, temperature=0, ignore_eos=True):
        if chunk.tokens and first != first:
            first = time.perf_counter() - start
        if chunk.usage is not None:
            cached = chunk.usage.cached_tokens
    return first, cached


def run(args: argparse.Namespace) -> dict[str, Any]:
    engines = {name: BatchEngine(args.model, parallel=slots, n_ctx=slots * args.n_ctx_slot, cache_ram_bytes=ram,
                                 ctk=args.ctk, ctv=args.ctv, flash_attn=args.flash_attn, n_threads=args.threads)
               for name, (slots, ram) in SETTINGS.items()}
    try:
        any_engine = next(iter(engines.values()))
        attention = any_engine.model.attention.flash_attn  # (what "auto" chose)
        system = system_prompt(any_engine, args.system_tokens)

        def chat(system_text: str, question: str) -> list[int]:
            return any_engine.chat_prompt([{"role": "system", "content": system_text},
                                           {"role": "user", "content": question}])
        unrelated = chat("You are a poet.", "Write four lines about the sea and its ships.")
        samples: dict[str, list[tuple[float, int]]] = {name: [] for name in engines}
        names = list(engines)
        for r in range(args.rounds + 1):
            prompt = chat(system, QUESTIONS[r % len(QUESTIONS)] + f" (question {r})")
            for name in names if r % 2 == 0 else names[::-1]:
                engine = engines[name]
                time_to_first_token(engine, unrelated, args.max_tokens)
                ttft, cached = time_to_first_token(engine, prompt, args.max_tokens)
                if r:  # (round 0 fills the caches)
                    samples[name].append((ttft, cached))
                print(f"round {r}/{args.rounds} {name}: {ttft * 1e3:.0f} ms, {cached} of {len(prompt)} cached",
                      file=sys.stderr, flush=True)
        stats = {name: engines[name].prompt_cache_stats() for name in engines}
    finally:
        for engine in engines.values():
            engine.close()
    base = statistics.median(t for t, _ in samples["no reuse"])
    rows = []
    for name, got in samples.items():
        ttfts = [t for t, _ in got]
        median = statistics.median(ttfts)
        ram = stats[name]
        rows.append({"setting": name, "slots": SETTINGS[name][0], "cache_ram_bytes": SETTINGS[name][1],
                     "ttft_ms": [t * 1e3 for t in ttfts], "ttft_median_ms": median * 1e3,
                     "cached_tokens": [c for _, c in got], "speedup": base / median,
                     "ram_entries": ram.entries if ram else None, "ram_bytes": ram.bytes if ram else None})
    return {"machine": machine_name(), "model": Path(any_engine.model.path).name, "ctk": args.ctk, "ctv": args.ctv,
            "flash_attn": f"{args.flash_attn} ({attention})", "threads": args.threads, "prompt_tokens": len(prompt),
            "rounds": args.rounds,
            "max_tokens": args.max_tokens, "rows": rows,
            "command": "python -m pyllama90a.bench prompt-cache " + " ".join(sys.argv[2:])}


def markdown(result: dict[str, Any]) -> str:
    head = (f"Time to first token of a repeated system prompt with a new user turn, {result['machine']}; "
            f"{result['model']}, K {result['ctk']} / V {result['ctv']}, flash_attn {result['flash_attn']}, "
            f"{result['threads']} threads; prompt "
            f"{result['prompt_tokens']} tokens; {result['rounds']} rounds, settings alternated.\n\n")
    lines = ["| setting | slots | RAM cache | TTFT median ms | TTFT each ms | cached tokens | vs no reuse |",
             "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        ram = f"{r['cache_ram_bytes'] >> 20} MiB ({r['ram_entries']} states, {r['ram_bytes'] >> 20} MiB)" \
            if r["cache_ram_bytes"] else "-"
        each = ", ".join(f"{t:.0f}" for t in r["ttft_ms"])
        cached = ", ".join(str(c) for c in r["cached_tokens"])
        lines.append(f"| {r['setting']} | {r['slots']} | {ram} | {r['ttft_median_ms']:.0f} | {each} | {cached} | "
                     f"{r['speedup']:.1f}x |")
    return head + "\n".join(lines) + f"\n\n`{result['command']}`\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyllama90a.bench prompt-cache", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="GGUF path (default: the default model)")
    ap.add_argument("--system-tokens", type=int, default=2048, help="tokens of the system prompt (default 2048)")
    ap.add_argument("--rounds", type=int, default=4, help="timed rounds (default 4)")
    ap.add_argument("--max-tokens", type=int, default=2, help="tokens each request generates (default 2)")
    ap.add_argument("--n-ctx-slot", type=int, default=4096, help="KV cells per slot (default 4096)")
    ap.add_argument("--ctk", default="q8_0")
    ap.add_argument("--ctv", default="q8_0")
    ap.add_argument("--flash-attn", default="auto", choices=["on", "off", "auto"], help="(default auto, the server's)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", help="folder for prompt-cache.json and prompt-cache.md")
    args = ap.parse_args(argv)
    if min(args.system_tokens, args.rounds, args.max_tokens, args.threads) < 1:
        ap.error("--system-tokens, --rounds, --max-tokens and --threads must be >= 1")
    if args.system_tokens + args.max_tokens + 128 > args.n_ctx_slot:
        ap.error("the system prompt does not fit a slot: raise --n-ctx-slot")
    from ..core.gguf.default_model import default_model

    args.model = args.model or str(default_model())
    result = run(args)
    table = markdown(result)
    print(table)
    if args.out:
        write_results(Path(args.out), "prompt-cache", result, table)
    return 0
