"""Why test_speculative.py's test_different_draft_min_draft_max differs here: the logits of a token decoded alone,
in one batch with the tokens before it, and inside a draft's verification batch, for the test's prompt.

    python benchmarks/peer_suite/batch_vs_one.py [--positions 3 5 15] [--kv q8_0 f16]

For each KV cache type and attention-path set: the greedy answer's top-2 tokens and logprobs at the positions
given, (1) decoded one token at a time (plain generation), (2) decoded in one batch with the prompt and the answer
before it (a fresh engine), (3) verified in a draft's batch (the default model drafting for itself, draft 4 to 8
tokens, as the test's third setting). Prints the first position where the greedy answers of (1) and (3) differ.
"""
from __future__ import annotations

import argparse

import pyllama90a as pl
from pyllama90a.core.generation.speculative import Speculation
from pyllama90a.core.model.attention_paths import AttentionPaths

PROMPT = "I believe the meaning of life is"  # (the test's)
PATHS = {"default": AttentionPaths(), "vquant_direct off": AttentionPaths(vquant_direct=False)}


def run(path: str, tokens: list[int], n: int, kv: str, paths: AttentionPaths,
        speculative: Speculation | None = None) -> list:
    """The logprob items of a greedy generation of n tokens after `tokens` on a fresh engine."""
    with pl.BatchEngine(path, parallel=1, n_ctx=512, ctk=kv, ctv=kv, flash_attn="off", attention_paths=paths,
                        n_threads=2, speculative=speculative) as engine:
        return [item for chunk in engine.stream(tokens, max_tokens=n, temperature=0, logprobs=2)
                for item in (chunk.logprobs or [])]


def top(item) -> str:
    return "  ".join(f"{piece.decode(errors='replace')!r} {logprob:.4f}" for _, piece, logprob in item.top)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--positions", type=int, nargs="+", default=[3, 5, 15])
    p.add_argument("--kv", nargs="+", default=["q8_0", "f16"])
    args = p.parse_args()
    path = str(pl.default_model(pull=True))
    with pl.Model(path, n_ctx=256) as model:
        prompt = model.tokenize(PROMPT)
    n = max(args.positions) + 1
    for kv in args.kv:
        for name, paths in PATHS.items():
            alone = run(path, prompt, n, kv, paths)
            answer = [item.token for item in alone]
            verified = run(path, prompt, n, kv, paths, Speculation("draft-simple", 8, 4, draft=path))
            print(f"## KV {kv}, flash attention off, attention paths: {name}")
            for k in args.positions:
                batched = run(path, prompt + answer[:k], 1, kv, paths)[0]
                print(f"position {k}: one at a time {top(alone[k])} | one batch {top(batched)} | "
                      f"verified {top(verified[k])}")
            pairs = zip(alone, verified, strict=True)
            differs = next((i for i, (a, b) in enumerate(pairs) if a.token != b.token), None)
            verdict = "the same" if differs is None else f"differ from position {differs}"
            print(f"greedy answers (one at a time, verified): {verdict}\n", flush=True)


if __name__ == "__main__":
    main()
