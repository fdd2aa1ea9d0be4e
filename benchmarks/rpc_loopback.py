"""The default model with all layers local vs on 1 vs 2 pyllama90a.worker processes over loopback (ggml-rpc):
prefill and decode tok/s, and the bytes per token that crossed the links, counted by the kernel (the TCP
counters of the workers' connections, `ss -ti`). Each setting runs `--rounds` times, alternated.

    PYTHONPATH=<build with GGML_RPC> python benchmarks/rpc_loopback.py --out benchmarks/results/cpu-rpc-loopback

With --device CUDA0 each worker serves that GPU of this host (--workers 0 1: local vs one worker), and
--n-gpu-layers offloads that many layers to it, locally or through the worker (whose devices come first).

With --secret every setting with workers also runs with workers that ask for the link's secret (patch 0023), in
the same rounds, and --handshakes N times N connections (connect, HELLO, the challenge-response when there is a
secret, DEVICE_COUNT: pyllama90a.native.rpc.probe) to a worker without and one with a secret, alternated.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pyllama90a as pl
from pyllama90a.native import rpc
from pyllama90a.tools.worker_process import WorkerProcess, loopback_bytes

PROMPT_TOKENS, DECODE_TOKENS = 128, 64


def link_bytes(workers: list[WorkerProcess]) -> int:
    """Bytes the workers' links carried so far: their connections' TCP counters (`ss`), else, where `ss` is not
    installed (the H200 machine), all loopback traffic (nothing else talks over it during the bench)."""
    if shutil.which("ss"):
        return sum(w.link_bytes() for w in workers)
    return loopback_bytes()


@contextlib.contextmanager
def link_secret(on: bool) -> Iterator[tuple[str, ...]]:
    """With on: a secret file, named to this process's clients (PYLLAMA90A_RPC_SECRET_FILE); yields the workers'
    extra flags."""
    if not on:
        yield ()
        return
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "secret"
        path.write_bytes(os.urandom(32).hex().encode())
        path.chmod(0o600)
        os.environ[rpc.SECRET_FILE_ENV] = str(path)
        try:
            yield ("--secret-file", str(path))
        finally:
            del os.environ[rpc.SECRET_FILE_ENV]


def handshakes(rounds: int) -> dict:
    """Milliseconds per connection (probe) to a worker without and one with a secret, alternated: the medians."""
    times: dict[str, list[float]] = {"none": [], "secret": []}
    with WorkerProcess() as plain, link_secret(True) as extra, WorkerProcess(extra=extra) as locked:
        secret = rpc.client_secret()
        for _ in range(rounds):
            for key, worker, key_secret in (("none", plain, None), ("secret", locked, secret)):
                start = time.perf_counter()
                rpc.probe(rpc.Endpoint("127.0.0.1", worker.port), secret=key_secret)
                times[key].append((time.perf_counter() - start) * 1000)
    return {key: statistics.median(values) for key, values in times.items()}


def run(model_path: Path, n_workers: int, threads: int, settings: dict, device: str | None,
        secret: bool = False) -> dict:
    with link_secret(secret) as extra_secret:
        return _run(model_path, n_workers, threads, settings, device, extra_secret) | {"secret": secret}


def _run(model_path: Path, n_workers: int, threads: int, settings: dict, device: str | None,
         extra_secret: tuple[str, ...]) -> dict:
    extra = (("--device", device) if device else ()) + extra_secret
    workers = [WorkerProcess(threads=threads, extra=extra).start() for _ in range(n_workers)]
    placement = {"split_mode": "none", "main_gpu": 0} if device and n_workers else {}
    try:
        with pl.Model(model_path, rpc=[w.endpoint for w in workers], n_threads=threads, **settings,
                      **placement) as model:
            prompt = model.tokenize("Once upon a time, " * 40)[:PROMPT_TOKENS]
            model.generate(prompt[:8], max_tokens=2, temperature=0)  # warm-up (first graphs, allocations)
            model.truncate(0)
            before = link_bytes(workers)
            prefill = model.generate(prompt, max_tokens=1, temperature=0).timings
            middle = link_bytes(workers)
            decode = model.generate(prompt, max_tokens=DECODE_TOKENS, temperature=0, stop=()).timings
            after = link_bytes(workers)
    finally:
        for w in workers:
            w.stop()
    return {"workers": n_workers, "prefill_tok_s": prefill.prompt_tokens_per_s,
            "decode_tok_s": decode.generate_tokens_per_s,
            "prefill_bytes_per_token": (middle - before) / prefill.prompt_tokens_evaluated,
            "decode_bytes_per_token": (after - middle) / decode.completion_tokens,
            "decode_tokens": decode.completion_tokens}


def summarize(rows: list[dict]) -> list[dict]:
    """The median of every figure per number of workers (and with or without the secret)."""
    summary = []
    for n, secret in sorted({(r["workers"], r["secret"]) for r in rows}):
        mine = [r for r in rows if r["workers"] == n and r["secret"] == secret]
        summary.append({"workers": n, "secret": secret, **{key: statistics.median(r[key] for r in mine)
                                                           for key in mine[0] if key not in ("workers", "secret")}})
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="CPU threads of the local model and of each worker")
    parser.add_argument("--ctk", default="q4_0")
    parser.add_argument("--ctv", default="q4_0")
    parser.add_argument("--flash-attn", default="off")
    parser.add_argument("--synthetic",
                        help="a random-weight shape of pyllama90a.tools.synthetic instead of the default model")
    parser.add_argument("--device", help="the device each worker serves (ggml's name, e.g. CUDA0); default its CPU")
    parser.add_argument("--n-gpu-layers", type=int, default=-1)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--secret", action="store_true",
                        help="also run the settings with workers with workers that ask for the link's secret")
    parser.add_argument("--handshakes", type=int, default=0, help="connections to time without and with a secret")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.synthetic:
        from pyllama90a.tools.synthetic import synthetic_model
        model_path = synthetic_model(args.synthetic)
    else:
        model_path = pl.default_model(pull=True)
    settings = {"ctk": args.ctk, "ctv": args.ctv, "flash_attn": args.flash_attn, "n_ctx": 1024,
                "n_gpu_layers": args.n_gpu_layers}
    kinds = [(n, secret) for n in args.workers for secret in ((False, True) if args.secret and n else (False,))]
    rows = [run(model_path, n, args.threads, settings, args.device, secret)
            for _ in range(args.rounds) for n, secret in kinds]
    summary = summarize(rows)
    handshake_ms = handshakes(args.handshakes) if args.handshakes else None
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "rpc_loopback.json").write_text(json.dumps(
        {"machine": platform.processor() or platform.machine(), "settings": settings, "threads": args.threads,
         "model": args.synthetic or "default", "worker_device": args.device or "CPU",
         "prompt_tokens": PROMPT_TOKENS, "rounds": rows, "median": summary,
         "handshake_ms": handshake_ms, "handshake_rounds": args.handshakes}, indent=1))
    print("| workers | secret | prefill tok/s | decode tok/s | prefill bytes/token | decode bytes/token |")
    print("|---|---|---|---|---|---|")
    for s in summary:
        print(f"| {s['workers']} | {'yes' if s['secret'] else 'no'} | {s['prefill_tok_s']:.1f} | "
              f"{s['decode_tok_s']:.1f} | {s['prefill_bytes_per_token']:,.0f} | {s['decode_bytes_per_token']:,.0f} |")
    if handshake_ms:
        print(f"connection (probe) median over {args.handshakes}: {handshake_ms['none']:.3f} ms without a secret, "
              f"{handshake_ms['secret']:.3f} ms with one")


if __name__ == "__main__":
    main()
