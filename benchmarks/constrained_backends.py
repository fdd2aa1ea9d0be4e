"""llguidance vs xgrammar on pyllama90a's per-token path (benchmarks/results/constrained-backends.md).

For each case (a nested JSON schema, a regex, a GBNF grammar, a lazy tool call), on the real default model
(SmolLM2-135M-Instruct, 49,152 tokens), greedy:

  1. a constrained generation through pyllama90a.core.constrained (llguidance): compile time, first mask, and per
     token the mask computation, the in-place apply on the logits row, accept, and the model's own decode;
  2. when xgrammar can be imported: the same prompt again with the tokens of step 1 forced, and after every
     decode both backends' mask for the same state (llguidance's LLMatcher and xgrammar's GrammarMatcher, in
     alternating order), so both are timed on the same tokens under the same cache and thread conditions;
     plus xgrammar's compile time. Each recorded token must be allowed by xgrammar's mask too.

    python benchmarks/constrained_backends.py [--json OUT.json]

xgrammar needs torch (see the results file); measure it from a throwaway venv that sees this environment:
    python -m venv --system-site-packages /tmp/xgvenv && /tmp/xgvenv/bin/pip install xgrammar
    /tmp/xgvenv/bin/python benchmarks/constrained_backends.py
"""
from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np

MAX_TOKENS = 160

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "role": {"enum": ["admin", "user", "guest"]},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 16}, "minItems": 1, "maxItems": 4},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                           "country": {"enum": ["FR", "DE", "US", "UK"]}},
            "required": ["city", "zip", "country"], "additionalProperties": False},
        "pets": {"type": "array", "maxItems": 3, "items": {
            "type": "object", "properties": {"kind": {"enum": ["cat", "dog", "fish"]}, "name": {"type": "string"}},
            "required": ["kind", "name"], "additionalProperties": False}},
    },
    "required": ["name", "age", "role", "tags", "address", "pets"],
    "additionalProperties": False,
}
REGEX = (r"[A-Z][a-z]+( [A-Z][a-z]+)* was born on (1[0-9]|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
         r" in [A-Z][a-z]+( [A-Z][a-z]+)*\.")
GBNF = r'''
root ::= "Ingredients:\n" item item item? item? "Steps:\n" step step step?
item ::= "- " [0-9] [0-9]? [0-9]? " " unit " " word (" " word)? "\n"
unit ::= "g" | "ml" | "cups" | "tbsp" | "pieces"
word ::= [a-z] [a-z]? [a-z]? [a-z]? [a-z]? [a-z]? [a-z]? [a-z]? [a-z]? [a-z]? [a-z]? [a-z]?
step ::= [1-9] ". " [A-Z] [a-z ,]+ ".\n"
'''
TOOL_ARGS = {"type": "object", "properties": {"location": {"type": "string"},
                                               "unit": {"enum": ["celsius", "fahrenheit"]}},
             "required": ["location", "unit"], "additionalProperties": False}
TOOL_BEGIN = '<tool_call>\n{"name": "get_weather", "arguments": '
TOOL_END = "}\n</tool_call>"
TRIGGER = "<tool_call>"

CASES = [
    ("json_schema", "Describe a person named Alice who lives in Paris and has two pets, as JSON."),
    ("regex", "When and where was Ada Lovelace born? Answer in one sentence."),
    ("gbnf", "Give me a short pancake recipe."),
    ("lazy_tool_call", "What is the weather in Paris? To call the weather tool write <tool_call> and the call."),
]


def _stats(ns: list[int]) -> dict[str, float]:
    us = sorted(x / 1e3 for x in ns)
    if not us:
        return {"n": 0}
    return {"n": len(us), "mean_us": statistics.fmean(us), "median_us": us[len(us) // 2],
            "p90_us": us[min(len(us) - 1, int(len(us) * 0.9))], "max_us": us[-1]}


def _case_constraint(c, kind: str):  # c: the pyllama90a.core.constrained module
    if kind == "json_schema":
        return c.json_schema(SCHEMA)
    if kind == "regex":
        return c.regex(REGEX)
    if kind == "gbnf":
        return c.grammar(GBNF)
    return c.tool_calls([c.ToolCallFormat(TOOL_BEGIN, TOOL_ARGS, TOOL_END)], trigger=TRIGGER)


def _xgrammar_compile(xgr, info, kind: str):
    compiler = xgr.GrammarCompiler(info, max_threads=2, cache_enabled=False)  # fresh: no cache hit across cases
    if kind == "json_schema":
        return compiler.compile_json_schema(SCHEMA, any_whitespace=False, separators=(", ", ": "))
    if kind == "regex":
        return compiler.compile_regex(REGEX)
    if kind == "gbnf":
        return compiler.compile_grammar(GBNF)
    # xgrammar's triggered structural tag: free text until the trigger, then begin + JSON + end
    return compiler.compile_structural_tag([xgr.StructuralTagItem(begin=TOOL_BEGIN, schema=TOOL_ARGS, end=TOOL_END)],
                                           [TRIGGER])


def _allowed(mask: np.ndarray, token: int) -> bool:
    return bool((int(mask[token >> 5]) >> (token & 31)) & 1)


def main(out_json: str | None) -> None:
    import pyllama90a as pl
    from pyllama90a.core import constrained as c

    try:
        import xgrammar as xgr
    except ImportError as e:
        xgr = None
        print(f"xgrammar not measured: {e}")
    model = pl.Model(n_ctx=2048, seed=1)
    t0 = time.perf_counter()
    vocab = c.vocab_for(model)
    t_vocab = time.perf_counter() - t0
    import llguidance
    print(f"llguidance {llguidance.__version__}: vocabulary (pieces of {vocab.n_vocab} tokens + LLTokenizer) "
          f"{t_vocab * 1e3:.0f} ms")
    info = None
    if xgr is not None:
        from importlib.metadata import version
        t0 = time.perf_counter()
        # special tokens as empty strings: xgrammar's way of saying "never text"; EOG ids as its stop tokens
        encoded = [b"" if i in vocab.special else p for i, p in enumerate(vocab.pieces)]
        info = xgr.TokenizerInfo(encoded, xgr.VocabType.RAW, vocab_size=vocab.n_vocab, stop_token_ids=list(vocab.eog))
        print(f"xgrammar {version('xgrammar')}: TokenizerInfo {(time.perf_counter() - t0) * 1e3:.0f} ms "
              f"(from the same pieces)")
    results = {}
    for kind, prompt in CASES:
        tokens = model.tokenize(model.apply_chat_template([{"role": "user", "content": prompt}]), parse_special=True)
        # 1. live constrained generation, llguidance through pyllama90a.core.constrained
        t0 = time.perf_counter_ns()
        spec = _case_constraint(c, kind)
        t1 = time.perf_counter_ns()
        matcher = c.Matcher(spec, vocab)
        t2 = time.perf_counter_ns()
        matcher.compute_mask()
        t3 = time.perf_counter_ns()
        model.truncate(0)
        model.eval(tokens)
        compute, apply, accept, decode, generated = [], [], [], [], []
        while len(generated) < MAX_TOKENS:
            logits = model.last_logits()
            a = time.perf_counter_ns()
            matcher.compute_mask()
            b = time.perf_counter_ns()
            matcher.apply(logits)
            d = time.perf_counter_ns()
            token = int(np.argmax(logits))
            e = time.perf_counter_ns()
            matcher.accept(token)
            f = time.perf_counter_ns()
            if generated:  # the first mask was computed before the prompt (timed as first_mask)
                compute.append(b - a)
            apply.append(d - b)
            accept.append(f - e)
            generated.append(token)
            if token in vocab.eog:
                break
            g = time.perf_counter_ns()
            model.eval([token])
            decode.append(time.perf_counter_ns() - g)
        text = model.detokenize([t for t in generated if t not in vocab.eog])
        r = results[kind] = {
            "prompt": prompt, "n_tokens": len(generated), "tokens": generated, "text": text,
            "finished": matcher.finished,
            "llguidance": {"compile_ms": (t1 - t0) / 1e6, "matcher_ms": (t2 - t1) / 1e6,
                           "first_mask_ms": (t3 - t2) / 1e6, "compute_mask": _stats(compute)},
            "apply": _stats(apply), "accept": _stats(accept), "decode": _stats(decode),
        }
        # 2. the same tokens forced, both backends' masks after each decode
        if xgr is not None:
            t0 = time.perf_counter_ns()
            try:
                compiled = _xgrammar_compile(xgr, info, kind)
            except Exception as exc:  # noqa: BLE001 - report what xgrammar refuses
                r["xgrammar"] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                compiled = None
            if compiled is not None:
                xm = xgr.GrammarMatcher(compiled)
                t1 = time.perf_counter_ns()
                lm = c.Matcher(spec, vocab)
                xmask = np.zeros((1, (vocab.n_vocab + 31) // 32), dtype=np.int32)
                model.truncate(0)
                model.eval(tokens)
                t_l, t_x, first_x, n_ok = [], [], None, 0
                for i, token in enumerate(generated):
                    order = (0, 1) if i % 2 == 0 else (1, 0)
                    for which in order:
                        a = time.perf_counter_ns()
                        if which == 0:
                            lm.compute_mask()
                        else:
                            xm.fill_next_token_bitmask(xmask)
                        el = time.perf_counter_ns() - a
                        if which == 1 and first_x is None:
                            first_x = el
                        elif i:
                            (t_l if which == 0 else t_x).append(el)
                    if not _allowed(xmask[0], token) or not xm.accept_token(token):
                        break
                    n_ok += 1
                    lm.accept(token)
                    if token in vocab.eog:
                        break
                    model.eval([token])
                r["xgrammar"] = {"compile_ms": (t1 - t0) / 1e6, "first_mask_ms": (first_x or 0) / 1e6,
                                 "compute_mask": _stats(t_x), "tokens_allowed": f"{n_ok} of {len(generated)}"}
                r["llguidance"]["compute_mask_side_by_side"] = _stats(t_l)
        _print(kind, r)
    slots = eight_slots(model, vocab, c, results["json_schema"]["tokens"])
    model.close()
    slots["engine_ms_per_step"] = engine_step_ms()
    s = slots
    print(f"== 8 sequences under the JSON schema (masks after a decode, ms per step of 8): "
          f"sequential compute {s['sequential_ms']:.2f}, compute_masks (LLExecutor) {s['parallel_ms']:.2f}, "
          f"apply x8 {s['apply_ms']:.2f}")
    step = s["engine_ms_per_step"]
    print(f"   BatchEngine, 8 slots, unconstrained: {step:.2f} ms per step of 8 tokens -> "
          f"estimated constrained/unconstrained tok/s {step / (step + s['sequential_ms'] + s['apply_ms']):.2f} "
          f"(sequential), {step / (step + s['parallel_ms'] + s['apply_ms']):.2f} (compute_masks)")
    if out_json:
        with open(out_json, "w") as f:
            json.dump({"n_vocab": vocab.n_vocab, "vocab_ms": t_vocab * 1e3, "results": results, "eight_slots": slots},
                      f, indent=1)


def eight_slots(model, vocab, c, tokens: list[int]) -> dict:
    """8 matchers under the JSON schema on the tokens of its generation: per step, after a real decode (the
    caches as the engine leaves them), the 8 masks one after another vs compute_masks(), and 8 applies."""
    spec = c.json_schema(SCHEMA)
    prompt = model.tokenize(model.apply_chat_template([{"role": "user", "content": CASES[0][1]}]), parse_special=True)
    out = {}
    for mode in ("sequential", "parallel"):
        matchers = [c.Matcher(spec, vocab) for _ in range(8)]
        model.truncate(0)
        model.eval(prompt)
        times, apply_times = [], []
        rows = np.zeros((8, vocab.n_vocab), dtype=np.float32)
        for token in tokens[:-1]:
            a = time.perf_counter_ns()
            if mode == "sequential":
                for m in matchers:
                    m.compute_mask()
            else:
                c.compute_masks(matchers)
            b = time.perf_counter_ns()
            for m, row in zip(matchers, rows, strict=True):
                m.apply(row)
            d = time.perf_counter_ns()
            times.append(b - a)
            apply_times.append(d - b)
            for m in matchers:
                m.accept(token)
            model.eval([token])
        out[f"{mode}_ms"] = statistics.median(times) / 1e6
        out["apply_ms"] = statistics.median(apply_times) / 1e6
    return out


def engine_step_ms(parallel: int = 8, max_tokens: int = 64) -> float:
    """Unconstrained BatchEngine, `parallel` greedy requests at once: wall time per step of `parallel` tokens."""
    import threading

    import pyllama90a as pl

    with pl.BatchEngine(n_ctx=parallel * 512, parallel=parallel) as engine:
        done = threading.Semaphore(0)
        counts = [0] * parallel

        def on_chunk(i: int):
            def f(chunk) -> None:
                counts[i] += len(chunk.tokens)
                if chunk.finish_reason is not None or chunk.error is not None:
                    done.release()
            return f

        prompts = [f"Write a story about the number {i}." for i in range(parallel)]
        for warm in (True, False):
            t0 = time.perf_counter()
            for i, p in enumerate(prompts):
                engine.submit(p, on_chunk(i), max_tokens=8 if warm else max_tokens, temperature=0, ignore_eos=True)
            for _ in prompts:
                done.acquire()
            elapsed = time.perf_counter() - t0
        # the prompts are a few tokens; the time is the decode steps'
        return elapsed * 1e3 / max_tokens


def _print(kind: str, r: dict) -> None:
    def row(name: str, st: dict) -> str:
        if not st.get("n"):
            return f"{name}: -"
        return (f"{name}: median {st['median_us']:.0f} us, mean {st['mean_us']:.0f}, p90 {st['p90_us']:.0f}, "
                f"max {st['max_us']:.0f} (n={st['n']})")

    g = r["llguidance"]
    print(f"== {kind}: {r['n_tokens']} tokens, ended by the grammar: {r['finished']}")
    print(f"  output: {r['text']!r}")
    print(f"  llguidance compile {g['compile_ms']:.2f} ms + matcher {g['matcher_ms']:.2f} ms + first mask "
          f"{g['first_mask_ms']:.2f} ms")
    print("  live " + row("llguidance mask", g["compute_mask"]))
    print("  live " + row("apply (in place)", r["apply"]))
    print("  live " + row("accept", r["accept"]))
    print("  live " + row("decode of 1 token", r["decode"]))
    x = r.get("xgrammar")
    if x is None:
        return
    if "error" in x:
        print(f"  xgrammar refused: {x['error']}")
        return
    print(f"  xgrammar compile {x['compile_ms']:.2f} ms (+ matcher), first mask {x['first_mask_ms']:.2f} ms, "
          f"recorded tokens allowed {x['tokens_allowed']}")
    print("  same tokens, " + row("llguidance mask", g["compute_mask_side_by_side"]))
    print("  same tokens, " + row("xgrammar mask  ", x["compute_mask"]))


if __name__ == "__main__":
    args = sys.argv[1:]
    out = None
    if args[:1] == ["--json"] and len(args) == 2:
        out = args[1]
    elif args:
        sys.exit(__doc__)
    main(out)
