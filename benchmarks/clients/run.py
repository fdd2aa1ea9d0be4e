"""Real clients against this package's server: each client x API x check, pass/fail with the error's first line.

    python benchmarks/clients/run.py --server-python PATH/TO/venv/bin/python --out DIR [--only CLIENT ...]

Run it with a Python that has the clients (they are not test dependencies: openai, anthropic, langchain-openai,
langchain-anthropic, litellm, instructor, pydantic-ai-slim[openai,anthropic], llama-index-llms-openai(-like),
llama-index-llms-anthropic). `--server-python` runs `python -m pyllama90a.server` (default model, 127.0.0.1) from
this checkout. The clients talk to it through a small logging proxy, so a failing check's report carries the exact
request bodies the client sent and our answers. APIs: Chat Completions (`chat`), Responses (`responses`),
Anthropic Messages (`messages`). Checks: `chat`, `stream`, `tools` (a forced call of one function, then its result
sent back and the model's answer read), `structured` (temperature 0, 5 requests, each parsed into a pydantic model).
Each client x API runs in a subprocess; each check has its own time limit. Writes results.json and results.md.

Modules: checks.py (the checks' prompts, model and tool), clients.py (one function per client), proxy.py (the
logging proxy), report.py (versions, the table, --combine); this one starts the server and runs the matrix."""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

from checks import APIS, CHECKS, NotOffered
from clients import CLIENTS
from proxy import Proxy, free_port
from report import combine, table, versions

REPO = Path(__file__).resolve().parents[2]


# ---- child: one client x API, each check under its own alarm; marks each check at the proxy ----

def child(client: str, api: str, base: str, model: str, limit: int) -> None:
    def alarm(*_: object) -> None:
        raise TimeoutError(f"no answer in {limit} s")
    signal.signal(signal.SIGALRM, alarm)
    try:
        checks = CLIENTS[client](api, base, model)
    except Exception as e:  # noqa: BLE001 - the client's own set-up failing is a result too
        checks = {c: (lambda e=e: (_ for _ in ()).throw(e)) for c in CHECKS}
    for check in CHECKS:
        urllib.request.urlopen(f"{base}/__check/{client}/{api}/{check}").read()
        signal.alarm(limit)
        start = time.monotonic()
        try:
            row = {"status": "pass", "detail": checks[check]()}
        except NotOffered as e:
            row = {"status": "n/a", "detail": str(e)}
        except BaseException as e:  # noqa: BLE001 - each failure is reported, never stops the matrix
            lines = (f"{type(e).__name__}: {e}".strip().splitlines() or [type(e).__name__])
            row = {"status": "fail", "detail": lines[0][:300]}
        finally:
            signal.alarm(0)
        row["seconds"] = round(time.monotonic() - start, 1)
        print(json.dumps({"client": client, "api": api, "check": check, **row}), flush=True)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--server-python", default=sys.executable, help="a Python with pyllama90a installed")
    p.add_argument("--out", type=Path, help="where results.json, results.md and server.log go")
    p.add_argument("--only", nargs="*", default=list(CLIENTS), help="clients to run")
    p.add_argument("--apis", nargs="*", default=list(APIS))
    p.add_argument("--limit", type=int, default=180, help="seconds per check")
    p.add_argument("--combine", nargs="+", type=Path, help="join these results.json files into --out (a later "
                   "file's rows replace an earlier one's for the same client, API and check)")
    p.add_argument("--child", nargs=4, metavar=("CLIENT", "API", "BASE", "MODEL"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(*args.child, args.limit)
        return 0
    if args.out is None:
        p.error("--out is required")
    if args.combine:
        return combine(args.combine, args.out)
    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    server = subprocess.Popen([args.server_python, "-m", "pyllama90a.server", "--port", str(port)], cwd=REPO,
                              stdout=(args.out / "server.log").open("w"), stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        for _ in range(240):
            try:
                models = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models"))
                break
            except OSError:
                if server.poll() is not None:
                    raise SystemExit(f"the server stopped: see {args.out / 'server.log'}") from None
                time.sleep(0.5)
        else:
            raise SystemExit("the server did not start in 120 s")
        model = models["data"][0]["id"]
        Proxy.upstream = ("127.0.0.1", port)
        proxy = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        base = f"http://127.0.0.1:{proxy.server_address[1]}"
        rows: list[dict[str, Any]] = []
        for client in args.only:
            for api in args.apis:
                run = subprocess.run([sys.executable, __file__, "--limit", str(args.limit), "--child", client, api,
                                      base, model], capture_output=True, text=True,
                                     timeout=args.limit * len(CHECKS) + 120)
                got = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
                done = {r["check"] for r in got}
                got += [{"client": client, "api": api, "check": c, "status": "fail",
                         "detail": (run.stderr.strip().splitlines() or ["no result"])[-1][:300]}
                        for c in CHECKS if c not in done]
                for r in got:
                    if r["status"] == "fail":
                        r["exchanges"] = Proxy.log.get(f"{client}/{api}/{r['check']}", [])
                    print(f"{client:12} {api:10} {r['check']:10} {r['status']:5} {r.get('seconds', '-')!s:>6} s "
                          f"{r['detail'][:100]}", flush=True)
                rows += got
                # written after each client x API: a run stopped early keeps what it measured
                (args.out / "results.json").write_text(json.dumps(
                    {"model": model, "versions": versions(), "python": sys.version.split()[0], "rows": rows},
                    indent=1))
                (args.out / "results.md").write_text(table(rows))
        print(table(rows))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
