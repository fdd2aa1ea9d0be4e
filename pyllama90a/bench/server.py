"""`python -m pyllama90a.bench server`: load benchmark of the OpenAI server with N concurrent streaming clients.

For each N, N clients start together on loopback, each streaming one greedy completion of --max-tokens tokens
(ignore_eos, so every client makes exactly that many). Reported per server and N: aggregate tok/s (all
clients' tokens / wall time of the round, prefill included) and time to first token p50/p95. With
--llama-server PATH, llama.cpp's own server (benchmarks/build_llama_server.sh builds it from the same source)
runs side by side with the same model, KV types, slots and threads. Servers take turns, one at a time,
alternating order between repetitions so that drift hits both alike.

    python -m pyllama90a.bench server --clients 1 4 8 --llama-server "$(benchmarks/build_llama_server.sh)"
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

from ..tools.server_process import ServerProcess
from .report import machine_name, write_results

TOPICS = ["a lighthouse keeper", "a lost robot", "the first city on Mars", "a dragon who cannot fly",
          "an old violin", "a detective cat", "a river that flows uphill", "the last library on Earth",
          "a time-travelling chef", "a friendly ghost", "a mountain village", "a submarine crew"]


def prompts(n: int) -> list[str]:
    return [f"Write a long story about {TOPICS[i % len(TOPICS)]}. Chapter {i // len(TOPICS) + 1}:" for i in range(n)]


def one_round(base_url: str, n_clients: int, max_tokens: int) -> dict:
    """N clients at once; returns aggregate tok/s and each client's time to first token."""
    import httpx

    barrier = threading.Barrier(n_clients + 1)
    ttft: list[float] = [float("nan")] * n_clients
    errors: list[str] = []

    def client(i: int, prompt: str) -> None:
        body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "stream": True, "ignore_eos": True}
        with httpx.Client(timeout=600) as http:
            barrier.wait()
            start = time.perf_counter()
            with http.stream("POST", base_url + "/v1/completions", json=body) as r:
                if r.status_code != 200:
                    errors.append(f"HTTP {r.status_code}: {r.read()[:200]!r}")
                    return
                for line in r.iter_lines():
                    if line.startswith("data: {") and ttft[i] != ttft[i]:  # first event carrying text
                        choices = json.loads(line[6:]).get("choices") or [{}]
                        if choices[0].get("text"):
                            ttft[i] = time.perf_counter() - start

    threads = [threading.Thread(target=client, args=(i, p)) for i, p in enumerate(prompts(n_clients))]
    for t in threads:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    if errors:
        raise RuntimeError(f"{len(errors)} client(s) failed: {errors[0]}")
    return {"tok_s": n_clients * max_tokens / wall, "ttft_s": ttft}


def server_commands(args: argparse.Namespace, model: Path) -> dict[str, tuple[list[str] | None, list[str]]]:
    parallel = max(args.clients)
    ours = ["--model", str(model), "--ctk", args.ctk, "--ctv", args.ctv, "--flash-attn", args.flash_attn,
            "--parallel", str(parallel), "--n-ctx", str(args.n_ctx), "--n-batch", str(args.n_batch),
            "--threads", str(args.threads)]
    servers: dict[str, tuple[list[str] | None, list[str]]] = {"pyllama90a": (None, ours)}
    if args.llama_server:
        servers["llama-server"] = ([args.llama_server], [
            "-m", str(model), "-ctk", args.ctk, "-ctv", args.ctv, "-fa", args.flash_attn, "-np", str(parallel),
            "-c", str(args.n_ctx), "-b", str(args.n_batch), "-ub", str(args.n_batch), "-t", str(args.threads),
            "-tb", str(args.threads), "--no-kv-unified", "--no-webui", "--host", "127.0.0.1"])
    return servers


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def run(args: argparse.Namespace, model: Path) -> dict:
    servers = server_commands(args, model)
    samples: dict[tuple[str, int], list[dict]] = {(s, n): [] for s in servers for n in args.clients}
    names = list(servers)
    for rep in range(args.reps):
        for name in names if rep % 2 == 0 else names[::-1]:
            command, flags = servers[name]
            with ServerProcess(flags, command=command, timeout=300) as srv:
                one_round(srv.base_url, 1, 8)  # warm-up
                for n in args.clients:
                    print(f"rep {rep + 1}/{args.reps} {name} clients={n} ...", end=" ", file=sys.stderr, flush=True)
                    sample = one_round(srv.base_url, n, args.max_tokens)
                    samples[(name, n)].append(sample)
                    print(f"{sample['tok_s']:.1f} tok/s", file=sys.stderr, flush=True)
    rows = []
    for (name, n), got in samples.items():
        rates = [s["tok_s"] for s in got]
        ttfts = [t * 1e3 for s in got for t in s["ttft_s"]]
        rows.append({"server": name, "clients": n, "tok_s": statistics.mean(rates),
                     "tok_s_sd": statistics.stdev(rates) if len(rates) > 1 else 0.0,
                     "ttft_p50_ms": percentile(ttfts, 0.5), "ttft_p95_ms": percentile(ttfts, 0.95)})
    by = {(r["server"], r["clients"]): r for r in rows}
    lo, hi = min(args.clients), max(args.clients)
    for r in rows:
        r["vs_one_client"] = r["tok_s"] / by[(r["server"], lo)]["tok_s"]
        if "llama-server" in servers:
            r["vs_llama_server"] = r["tok_s"] / by[("llama-server", r["clients"])]["tok_s"]
    return {"machine": machine_name(), "model": model.name, "ctk": args.ctk, "ctv": args.ctv,
            "flash_attn": args.flash_attn, "parallel": hi, "n_ctx": args.n_ctx, "threads": args.threads,
            "max_tokens": args.max_tokens, "reps": args.reps, "rows": rows,
            "command": "python -m pyllama90a.bench server " + " ".join(sys.argv[2:])}


def markdown(result: dict) -> str:
    head = (f"Server load, {result['machine']}; {result['model']}, K {result['ctk']} / V {result['ctv']}, "
            f"flash_attn {result['flash_attn']}, {result['parallel']} slots, n_ctx {result['n_ctx']}, "
            f"{result['threads']} threads; each client streams {result['max_tokens']} tokens; "
            f"{result['reps']} reps.\n\n")
    cols = ["server", "clients", "aggregate tok/s", "vs 1 client", "vs llama-server", "TTFT p50 ms", "TTFT p95 ms"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in sorted(result["rows"], key=lambda r: (r["clients"], r["server"])):
        vs = f"{r['vs_llama_server']:.2f}x" if "vs_llama_server" in r else "-"
        lines.append(f"| {r['server']} | {r['clients']} | {r['tok_s']:.1f} ± {r['tok_s_sd']:.1f} | "
                     f"{r['vs_one_client']:.2f}x | {vs} | {r['ttft_p50_ms']:.0f} | {r['ttft_p95_ms']:.0f} |")
    return head + "\n".join(lines) + f"\n\n`{result['command']}`\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m pyllama90a.bench server", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="GGUF path (default: the default model)")
    ap.add_argument("--clients", nargs="+", type=int, default=[1, 4, 8])
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--ctk", default="q8_0")
    ap.add_argument("--ctv", default="q8_0")
    ap.add_argument("--flash-attn", default="off", choices=["on", "off", "auto"])
    ap.add_argument("--n-ctx", type=int, default=8192, help="KV cells in all (slots = the most clients)")
    ap.add_argument("--n-batch", type=int, default=512)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--llama-server", help="path of llama.cpp's llama-server to compare with")
    ap.add_argument("--out", help="folder for server.json and server.md")
    args = ap.parse_args(argv)
    if min(args.clients) < 1 or args.max_tokens < 1 or args.reps < 1:
        ap.error("--clients, --max-tokens and --reps must be >= 1")
    if args.llama_server and not Path(args.llama_server).is_file():
        ap.error(f"no llama-server at {args.llama_server} (benchmarks/build_llama_server.sh builds one)")
    if args.max_tokens + 64 > args.n_ctx // max(args.clients):
        ap.error("--max-tokens does not fit a slot: raise --n-ctx")
    from ..core.gguf.default_model import default_model

    model = Path(args.model) if args.model else default_model()
    result = run(args, model)
    table = markdown(result)
    print(table)
    if args.out:
        write_results(Path(args.out), "server", result, table)
    return 0

