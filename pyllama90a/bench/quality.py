"""`python -m pyllama90a.bench quality`: what a quantized KV cache costs in quality, against an f16 cache.

On the same text and the same attention path (FA off, or hybrid: FA prefill and the quantized non-flash decode),
each cache type's next-token distributions are compared with those of an f16/f16 cache: the mean KL divergence
KL(f16 || type), the top-1 agreement, and the perplexity of the text with its change. As llama-perplexity does,
the text is cut into chunks of n_ctx tokens and the second half of each chunk is scored (the first half is its
context), twice: from one prefill of the chunk ("prefill": the logits of every token of one batch), and by
decoding the second half one token at a time after a prefill of the first ("decode": the path of generation).
Everything is deterministic on one machine: the same text, model and threads give the same numbers.

    python -m pyllama90a.bench quality --out benchmarks/results/cpu-smollm2-kv-quality
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from ..core.model.model import Model
from ..native.kv_types import KV_TYPES, check_kv_type
from .report import machine_name, pyplot, write_results

# the shipped text: the first scenes of Shakespeare's Coriolanus (public domain), after an attribution paragraph
TEXT = Path(__file__).with_name("coriolanus.txt")
PATHS = ("off", "hybrid")  # the flash_attn settings whose read of a quantized cache is measured
PHASES = ("prefill", "decode")
REFERENCE = ("f16", "f16")


def quality_text() -> str:
    """The shipped text without its attribution (the first paragraph)."""
    return TEXT.read_text(encoding="utf-8").split("\n\n", 1)[1]


@dataclass(frozen=True)
class QualityRow:
    """One cache type on one path and phase, against the f16 cache on the same path and phase."""
    flash_attn: str
    phase: str
    ctk: str
    ctv: str
    mean_kl: float         # mean over the scored tokens of KL(f16's distribution || this type's), in nats
    top1: float            # fraction of scored tokens whose most likely next token is f16's
    perplexity: float      # of the scored tokens of the text
    perplexity_f16: float  # the same with the f16 cache
    tokens: int            # scored tokens
    kv_bytes_per_token: int  # K and V bytes of one cell (all layers)

    @property
    def perplexity_change(self) -> float:
        """Relative: 0.01 is 1 % higher than f16's."""
        return self.perplexity / self.perplexity_f16 - 1


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    x -= x.max(axis=-1, keepdims=True)
    result: np.ndarray = x - np.log(np.exp(x).sum(axis=-1, keepdims=True))
    return result


def scored_log_probs(model: Model, chunks: Sequence[list[int]], phase: str) -> np.ndarray:
    """Log-probabilities of the next token at each scored position (the second half of each chunk, the token
    before each scored one), shape (scored tokens, n_vocab)."""
    rows: list[np.ndarray] = []
    for chunk in chunks:
        half = len(chunk) // 2
        if phase == "prefill":
            rows.append(_log_softmax(model.logits(chunk)[half - 1:-1]))
            continue
        model.truncate(0)
        model.eval(chunk[:half])
        steps = [model.last_logits()]
        for token in chunk[half:-1]:
            model.eval([token])
            steps.append(model.last_logits())
        rows.append(_log_softmax(np.stack(steps)))
    return np.concatenate(rows)


def compare(reference: np.ndarray, measured: np.ndarray, targets: np.ndarray) -> tuple[float, float, float, float]:
    """(mean KL(reference || measured), top-1 agreement, perplexity of measured, of reference) from log-probs."""
    kl = (np.exp(reference) * (reference - measured)).sum(axis=-1)
    top1 = np.mean(reference.argmax(axis=-1) == measured.argmax(axis=-1))
    picked = np.arange(len(targets))

    def perplexity(log_probs: np.ndarray) -> float:
        return math.exp(-float(log_probs[picked, targets].mean()))

    return float(kl.mean()), float(top1), perplexity(measured), perplexity(reference)


def text_chunks(model: Model, n_ctx: int, n_chunks: int) -> list[list[int]]:
    """The first `n_chunks` chunks of n_ctx tokens of the shipped text (fewer if the text is shorter)."""
    tokens = model.tokenize(quality_text())
    return [tokens[i * n_ctx:(i + 1) * n_ctx] for i in range(min(n_chunks, len(tokens) // n_ctx))]


def measure_quality(model_path: Path, cache_types: Sequence[tuple[str, str]], paths: Sequence[str] = PATHS,
                    phases: Sequence[str] = PHASES, n_ctx: int = 512, n_chunks: int = 1,
                    n_threads: int | None = None, progress: Callable[[str], None] | None = None) -> list[QualityRow]:
    """Each (ctk, ctv) in `cache_types` on each path and phase, against f16/f16 on the same path and phase. One
    load of the weights; one context per cache type and path, made and closed in turn."""
    report = progress or (lambda _: None)
    rows = []
    with Model(model_path, n_ctx=n_ctx, n_threads=n_threads, flash_attn="off") as base:
        chunks = text_chunks(base, n_ctx, n_chunks)
        if not chunks:
            raise ValueError(f"the text has fewer than n_ctx={n_ctx} tokens")
        targets = np.concatenate([chunk[len(chunk) // 2:] for chunk in chunks])
        for flash_attn in paths:
            for phase in phases:
                reference, f16_cell = _measure(base, REFERENCE, flash_attn, phase, chunks, n_ctx, n_threads)
                for ctk, ctv in cache_types:
                    report(f"{flash_attn} {phase} {ctk}/{ctv}")
                    measured, cell = (reference, f16_cell) if (ctk, ctv) == REFERENCE else \
                        _measure(base, (ctk, ctv), flash_attn, phase, chunks, n_ctx, n_threads)
                    kl, top1, ppl, ppl_f16 = compare(reference, measured, targets)
                    rows.append(QualityRow(flash_attn, phase, ctk, ctv, kl, top1, ppl, ppl_f16, len(targets), cell))
    return rows


def _measure(base: Model, types: tuple[str, str], flash_attn: str, phase: str, chunks: Sequence[list[int]],
             n_ctx: int, n_threads: int | None) -> tuple[np.ndarray, int]:
    """The scored log-probs with these types, and the K+V bytes of one cell (from the context itself)."""
    with base.with_context(ctk=types[0], ctv=types[1], flash_attn=flash_attn, n_ctx=n_ctx,
                           n_threads=n_threads) as model:
        cache = model.kv_cache
        return scored_log_probs(model, chunks, phase), cache.total_bytes // cache.n_ctx


def markdown(result: dict[str, Any]) -> str:
    lines = [f"Machine: {result['machine']}  ",
             f"Model: `{Path(result['model']).name}`, text `{result['text']}` ({result['tokens']} scored tokens: "
             f"{result['chunks']} chunk(s) of n_ctx {result['n_ctx']}, the second half of each), threads "
             f"{result['n_threads']}, {result['date']}  ",
             "KL: mean KL(f16 || type) of the next-token distributions in nats; top-1: how often the most likely "
             "token is f16's; both against f16/f16 on the same path and phase.", "",
             "| path | phase | K/V | bytes/token (K+V) | mean KL | top-1 | perplexity | vs f16 |",
             "|---|---|---|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        change = r["perplexity"] / r["perplexity_f16"] - 1
        lines.append(f"| {r['flash_attn']} | {r['phase']} | {r['ctk']}/{r['ctv']} | {r['kv_bytes_per_token']} | "
                     f"{r['mean_kl']:.5f} | {r['top1']:.2%} | {r['perplexity']:.3f} | {change:+.2%} |")
    return "\n".join(lines) + "\n"


def quality_panel(ax: Any, rows: Sequence[dict[str, Any]]) -> None:
    """Mean KL against KV bytes per token, one series per path and phase, each point named by its K type (this
    bench's PNG and calibrate's); `rows` need flash_attn, phase, ctk, ctv, kv_bytes_per_token and mean_kl."""
    series: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if (r["ctk"], r["ctv"]) != REFERENCE:
            series.setdefault(f"{r['flash_attn']} {r['phase']}", []).append(r)
    for name, points in series.items():
        points.sort(key=lambda r: r["kv_bytes_per_token"])
        ax.plot([r["kv_bytes_per_token"] / 1024 for r in points], [max(r["mean_kl"], 1e-7) for r in points],
                marker="o", label=name)
        for r in points:
            ax.annotate(r["ctk"], (r["kv_bytes_per_token"] / 1024, max(r["mean_kl"], 1e-7)), fontsize=7)
    ax.set_yscale("log")
    ax.set_xlabel("KV KiB per token (K+V, all layers)")
    ax.set_ylabel("mean KL vs f16 (nats)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def plot(result: dict[str, Any], path: Path) -> bool:
    """Mean KL against bytes per token, one series per path and phase; False without matplotlib."""
    plt = pyplot()
    if plt is None:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    quality_panel(ax, result["rows"])
    ax.set_title(f"{Path(result['model']).name}: KV quality against bytes", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def run(model_path: Path, cache_types: Sequence[tuple[str, str]], paths: Sequence[str], phases: Sequence[str],
        n_ctx: int, n_chunks: int, n_threads: int | None, progress: TextIO = sys.stderr) -> dict[str, Any]:
    """The measurement with what names it (machine, model, text, date), as the bench's JSON holds it."""
    total = len(paths) * len(phases) * len(cache_types)
    done = iter(range(1, total + 1))
    t0 = time.perf_counter()

    def report(what: str) -> None:
        print(f"[{next(done)}/{total}] {what} ({time.perf_counter() - t0:.0f} s)", file=progress, flush=True)

    rows = measure_quality(model_path, cache_types, paths, phases, n_ctx, n_chunks, n_threads, report)
    return {"machine": machine_name(), "model": str(model_path), "text": TEXT.name, "n_ctx": n_ctx,
            "chunks": rows[0].tokens // (n_ctx - n_ctx // 2), "tokens": rows[0].tokens,
            "n_threads": n_threads, "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "rows": [asdict(r) for r in rows]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyllama90a.bench quality", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="GGUF path (default: the default model)")
    ap.add_argument("--types", nargs="+", default=list(KV_TYPES),
                    help="cache types, K and V alike, or K/V pairs (default: every type)")
    ap.add_argument("--paths", nargs="+", default=list(PATHS), choices=["off", "on", "hybrid"],
                    help="flash_attn settings (default: off hybrid)")
    ap.add_argument("--phases", nargs="+", default=list(PHASES), choices=list(PHASES))
    ap.add_argument("--n-ctx", type=int, default=512, help="tokens per chunk; the second half is scored")
    ap.add_argument("--chunks", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", help="folder for quality.json, quality.md, quality.png (default: print only)")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    if args.n_ctx < 4 or args.chunks < 1:
        ap.error("--n-ctx must be >= 4 and --chunks >= 1")
    cache_types = [parse_pair(t) for t in args.types]
    from ..core.gguf.default_model import default_model

    model_path = Path(args.model) if args.model else default_model()
    result = run(model_path, cache_types, args.paths, args.phases, args.n_ctx, args.chunks, args.threads)
    table = markdown(result)
    print(table)
    if args.out:
        out = write_results(Path(args.out), "quality", result, table)
        if not plot(result, out / "quality.png"):
            print("matplotlib is not installed: no quality.png (pip install 'pyllama90a[bench]')", file=sys.stderr)
    return 0


def parse_pair(text: str) -> tuple[str, str]:
    """"q4_0" (K and V alike) or "q8_0/q4_0" (K/V), checked."""
    ctk, _, ctv = text.partition("/")
    return check_kv_type(ctk, "K"), check_kv_type(ctv or ctk, "V")
