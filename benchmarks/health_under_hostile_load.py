"""/health latency while a 15 MB prompt, a 5,000-rule GBNF chain, 1,000 chained $refs and a 20,000-property schema
are handled at once (issue 18's targets: p99 under 100 ms, no 5xx). Prints one JSON line.

    python benchmarks/health_under_hostile_load.py
"""
from __future__ import annotations

import json
import statistics
import threading
import time

import httpx

import pyllama90a as pl
from pyllama90a.tools.server_process import ServerProcess


def hostile_bodies() -> dict[str, dict]:
    chain = "root ::= r0\n" + "".join(f"r{i} ::= r{i + 1}\n" for i in range(5000)) + 'r5000 ::= "a"\n'
    defs: dict = {f"d{i}": {"type": "object", "properties": {"x": {"$ref": f"#/$defs/d{i + 1}"}}} for i in range(1000)}
    defs["d1000"] = {"type": "string"}
    wide = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(20000)}}
    return {"15 MB prompt": {"prompt": "word " * 3_000_000, "max_tokens": 1},
            "5,000-rule grammar": {"prompt": "x", "max_tokens": 4, "grammar": chain},
            "1,000 chained $refs": {"prompt": "x", "max_tokens": 4,
                                    "json_schema": {"$ref": "#/$defs/d0", "$defs": defs}},
            "20,000 properties": {"prompt": "x", "max_tokens": 4, "json_schema": wide}}


def main() -> None:
    flags = ["--model", str(pl.default_model()), "--parallel", "2", "--n-ctx", "2048", "--threads", "2"]
    with ServerProcess(flags) as srv:
        latencies: list[float] = []
        statuses: dict[str, int] = {}
        stop = threading.Event()

        def poll() -> None:
            with httpx.Client() as client:
                while not stop.is_set():
                    start = time.perf_counter()
                    client.get(srv.base_url + "/health", timeout=30)
                    latencies.append(time.perf_counter() - start)
                    time.sleep(0.01)

        def send(what: str, body: dict) -> None:
            statuses[what] = httpx.post(srv.base_url + "/v1/completions", json=body, timeout=300).status_code

        poller = threading.Thread(target=poll)
        poller.start()
        time.sleep(1)
        senders = [threading.Thread(target=send, args=item) for item in hostile_bodies().items()]
        for t in senders:
            t.start()
        for t in senders:
            t.join()
        stop.set()
        poller.join()
    latencies.sort()
    print(json.dumps({"health_requests": len(latencies), "p50_ms": round(1000 * statistics.median(latencies), 1),
                      "p99_ms": round(1000 * latencies[int(0.99 * (len(latencies) - 1))], 1),
                      "max_ms": round(1000 * latencies[-1], 1), "statuses": statuses}))


if __name__ == "__main__":
    main()
