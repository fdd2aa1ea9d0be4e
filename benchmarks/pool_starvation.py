"""A 1-token completion, /tokenize, /detokenize, /apply-template and /props while 64 embeddings requests are held
open (issue 33 item 8; target: each within 1 s), on the server of another checkout (--before: main) and on this
one, in one run. Prints one JSON line.

    mkdir /tmp/pool-before && git archive <main's commit> | tar -x -C /tmp/pool-before
    PYTHONPATH=. python benchmarks/pool_starvation.py --before /tmp/pool-before   # (this checkout's package)

After one request of each route (first-use costs: the template's compile, the embedder's context), each round
holds `--held` embeddings requests (tools/pool_saturation.py's HOLD body: 512 short texts, ~5,000
tokens each), waits `--settle` seconds for them to arrive, then sends every probe at once and times
each answer (up to `--timeout`); then it closes the held connections and waits until a small embeddings request,
queued behind what is left of them, is answered.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import httpx

import pyllama90a as pl
from pyllama90a.tools.pool_saturation import HOLD, HeldRequests, probe, probe_all
from pyllama90a.tools.server_process import ServerProcess

ROUTES = ["completion", "tokenize", "detokenize", "apply-template", "props", "health"]


def measure(source: Path, held: int, rounds: int, settle: float, timeout: float) -> dict[str, object]:
    flags = ["--model", str(pl.default_model()), "--parallel", "2", "--n-ctx", "2048", "--threads", "2"]
    path, body = HOLD["embeddings"]
    seconds: dict[str, list[float]] = {route: [] for route in ROUTES}
    statuses: dict[str, list[int | str]] = {route: [] for route in ROUTES}
    saturated: list[object] = []
    held_answers: list[dict[str, int]] = []
    with ServerProcess(flags, cwd=str(source)) as srv, httpx.Client(base_url=srv.base_url) as client:
        warm_up = [probe(client, route, timeout)[0] for route in [*ROUTES, "embeddings"]]  # (first-use costs)
        for _ in range(rounds):
            with HeldRequests(srv.base_url) as hold:
                hold.hold(path, body, held)
                time.sleep(settle)
                for route, (status, s) in probe_all(client, ROUTES, timeout).items():
                    seconds[route].append(round(s, 3))
                    statuses[route].append(status)
                saturated.append(client.get("/health", timeout=timeout).json().get("saturated"))
                # (each held request unanswered until here: "none")
                held_answers.append({str(status): n for (_, status), n in hold.release().items()})
            # idle again: a small embeddings request, queued behind what is left of the held ones, answered
            probe(client, "embeddings", 900)
    return {"warm_up_statuses": warm_up, "seconds": seconds, "statuses": statuses,
            "health_saturated_while_held": saturated, "held_requests_answered_before_release": held_answers,
            "median_s": {route: statistics.median(v) for route, v in seconds.items()}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--before", type=Path, required=True, help="a checkout of the code to compare with (main)")
    p.add_argument("--held", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--settle", type=float, default=3.0)
    p.add_argument("--timeout", type=float, default=120.0)
    args = p.parse_args()
    after = Path(__file__).resolve().parent.parent
    result = {"held_embeddings_requests": args.held, "rounds": args.rounds,
              "before": measure(args.before, args.held, args.rounds, args.settle, args.timeout),
              "after": measure(after, args.held, args.rounds, args.settle, args.timeout)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
