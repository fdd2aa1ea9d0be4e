"""CPU time per thread of the server, per round of `bench server`'s N streaming clients, for checkouts side by side
(issue 35: the 8-client gap old vs new). Wall time on a shared VM drifts with other work; a thread's own CPU time
(/proc/<pid>/task/<tid>/schedstat: ns run on a CPU, ns waited runnable) moves far less, and the wait says how much
of a round went to queueing for a core.

    PYTHONPATH=. python benchmarks/cpu_per_token.py --tree old=/work/old35 --tree new=. --pairs 4 --out /tmp/cpu35

Each server runs from its tree's root (`python -c`: the tree's source first on sys.path, as with the bench's
`python -m`) under a launcher that gives each Python
thread its threading name as the OS thread name and records its native id, so the engine thread, the event loop
(MainThread), asyncio.to_thread's workers and native threads (OpenMP's, not started by Python) are told apart.
Trees alternate (old first in odd pairs, new first in even ones); each start does a warm-up round and then
--rounds rounds, each measured alone. With --count, the launcher also counts Python function calls per thread
(sys.setprofile, slow: wall and CPU time are then meaningless) over the measured rounds. OpenMP's threads spin at
barriers, so under other load their CPU time grows with it: `--env OMP_WAIT_POLICY=passive` or `--threads 1`
measure the work (benchmarks/results/cpu-layout-before-after/cpu-time-per-token.md).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyllama90a as pl
from pyllama90a.bench.server import one_round
from pyllama90a.tools.server_process import ServerProcess

LAUNCH = r"""
import ctypes, os, sys, threading, collections, json, signal, runpy
libc = ctypes.CDLL(None)
tids = os.environ["CPU35_TIDS"]
def named(name):
    libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    with open(os.path.join(tids, str(threading.get_native_id())), "w") as f:
        f.write(name)
inner = threading.Thread._bootstrap_inner
def bootstrap(self):
    named(self.name)
    inner(self)
threading.Thread._bootstrap_inner = bootstrap
named("MainThread")
if os.environ.get("CPU35_COUNT"):  # profile every thread from the start; count only between USR1 and USR2
    counts, active = collections.defaultdict(collections.Counter), [False]
    def prof(frame, event, arg):
        if active[0] and event == "call":
            counts[threading.current_thread().name][frame.f_code.co_name] += 1
        elif active[0] and event == "c_call":
            counts[threading.current_thread().name]["C:" + getattr(arg, "__qualname__", "?")] += 1
    def start(*_):
        counts.clear(); active[0] = True
    def dump(*_):
        active[0] = False
        with open(os.environ["CPU35_COUNT"], "w") as f:
            json.dump({k: dict(v) for k, v in counts.items()}, f)
    threading.setprofile(prof); sys.setprofile(prof)
    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, dump)
import pyllama90a
sys.stderr.write("package from " + pyllama90a.__file__ + "\n")
sys.argv[0] = "pyllama90a.server"
runpy.run_module("pyllama90a.server", run_name="__main__", alter_sys=True)
"""


def threads(pid: int, tids: Path) -> dict[int, tuple[str, int, int, int]]:
    """{tid: (name, ns on a CPU, ns waited runnable, context switches)} of each thread of the process."""
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            run_ns, wait_ns, _ = (int(x) for x in (task / "schedstat").read_text().split())
            comm = (task / "comm").read_text().strip()
            status = dict(line.split(":", 1) for line in (task / "status").read_text().splitlines())
            switches = int(status["voluntary_ctxt_switches"]) + int(status["nonvoluntary_ctxt_switches"])
        except (FileNotFoundError, ProcessLookupError):
            continue
        name_file = tids / task.name
        name = name_file.read_text() if name_file.exists() else f"native:{comm}"
        out[int(task.name)] = (name, run_ns, wait_ns, switches)
    return out


def group(name: str) -> str:
    """asyncio_3 -> asyncio_*, pyllama90a-embeddings_0 -> pyllama90a-embeddings_*: pools summed."""
    head, _, tail = name.rpartition("_")
    return f"{head}_*" if head and tail.isdigit() else name


def measure(tree: Path, args: argparse.Namespace, model: Path) -> list[dict]:
    flags = ["--model", str(model), "--ctk", "q8_0", "--ctv", "q8_0", "--flash-attn", "off", "--parallel",
             str(args.clients), "--n-ctx", "8192", "--n-batch", "512", "--threads", str(args.threads)]
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        tids, counts = Path(tmp) / "tids", Path(tmp) / "counts.json"
        tids.mkdir()
        env = {"CPU35_TIDS": str(tids), **({"CPU35_COUNT": str(counts)} if args.count else {}),
               **dict(e.split("=", 1) for e in args.env)}
        with ServerProcess(flags, command=[sys.executable, "-c", LAUNCH], env=env, cwd=str(tree),
                           timeout=300) as srv:
            pid = srv.proc.pid  # type: ignore[union-attr]
            one_round(srv.base_url, 1, 8)  # warm-up, as the bench does
            one_round(srv.base_url, args.clients, 16)  # (every slot's first use)
            for _ in range(args.rounds):
                if args.count:
                    os.kill(pid, signal.SIGUSR1)
                    time.sleep(0.5)
                before, load0, t0 = threads(pid, tids), os.getloadavg()[0], time.perf_counter()
                got = one_round(srv.base_url, args.clients, args.max_tokens)
                after, wall = threads(pid, tids), time.perf_counter() - t0
                per: dict[str, list[float]] = {}
                for tid, (name, run_ns, wait_ns, switches) in after.items():
                    r0, w0, s0 = before.get(tid, (name, 0, 0, 0))[1:]
                    acc = per.setdefault(group(name), [0.0, 0.0, 0.0])
                    acc[0] += (run_ns - r0) / 1e9
                    acc[1] += (wait_ns - w0) / 1e9
                    acc[2] += switches - s0
                tokens = args.clients * args.max_tokens
                row = {"tok_s": got["tok_s"], "wall_s": wall, "load": load0, "tokens": tokens,
                       "cpu_s": {k: round(v[0], 4) for k, v in per.items()},
                       "wait_s": {k: round(v[1], 4) for k, v in per.items()},
                       "switches": {k: int(v[2]) for k, v in per.items()}}
                if args.count:
                    os.kill(pid, signal.SIGUSR2)
                    time.sleep(1.0)
                    row["calls"] = json.loads(counts.read_text())
                rounds.append(row)
    return rounds


def table(out: Path, labels: list[str], pairs: int) -> str:
    """Markdown: per tree, the median [range] over all rounds of CPU ms per generated token by thread group and
    of tok/s; then each pair's ratio of medians (second label / first) of all threads' CPU per token."""
    rows = {label: [r for p in range(1, pairs + 1) for r in json.loads((out / f"{label}-{p}.json").read_text())]
            for label in labels}
    groups = sorted({g for got in rows.values() for r in got for g, v in r["cpu_s"].items() if v > 0.01})

    def cell(values: list[float], fmt: str = ".3f") -> str:
        return f"{statistics.median(values):{fmt}} [{min(values):{fmt}}-{max(values):{fmt}}]"

    lines = ["| per round | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(labels)]
    lines.append("| tok/s (wall) | " + " | ".join(cell([r["tok_s"] for r in rows[lb]], ".1f") for lb in labels) + " |")
    lines.append("| CPU ms / token, all threads | " + " | ".join(
        cell([sum(r["cpu_s"].values()) / r["tokens"] * 1e3 for r in rows[lb]]) for lb in labels) + " |")
    for g in groups:
        lines.append(f"| CPU ms / token, {g} | " + " | ".join(
            cell([r["cpu_s"].get(g, 0.0) / r["tokens"] * 1e3 for r in rows[lb]]) for lb in labels) + " |")
    ratios = []
    for p in range(1, pairs + 1):
        a, b = ([sum(r["cpu_s"].values()) / r["tokens"] for r in json.loads((out / f"{lb}-{p}.json").read_text())]
                for lb in labels[:2])
        ratios.append(statistics.median(b) / statistics.median(a))
    engine = "pyllama90a-engine"  # off a CPU and not runnable: waiting for the GIL, OpenMP's barriers, or work
    lines.append(f"| % of wall, {engine} blocked | " + " | ".join(cell(
        [100 * (r["wall_s"] - r["cpu_s"][engine] - r["wait_s"][engine]) / r["wall_s"] for r in rows[lb]], ".1f")
        for lb in labels) + " |")
    lines.append("| context switches / token, MainThread | " + " | ".join(
        cell([r["switches"]["MainThread"] / r["tokens"] for r in rows[lb]], ".2f") for lb in labels) + " |")
    if "calls" in rows[labels[0]][0]:  # --count: Python calls (and C calls from Python) per generated token
        for g in sorted({group(t) for lb in labels for r in rows[lb] for t in r["calls"]}):
            lines.append(f"| Python calls / token, {g} | " + " | ".join(cell(
                [sum(sum(c.values()) for t, c in r["calls"].items() if group(t) == g) / r["tokens"] for r in rows[lb]],
                ".1f") for lb in labels) + " |")
    return "\n".join(lines) + f"\n\n{labels[1]} / {labels[0]}, CPU per token, pair by pair: " + ", ".join(
        f"{x:.3f}" for x in ratios) + f" (median {statistics.median(ratios):.3f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", action="append", required=True, help="label=path of a checkout (two)")
    ap.add_argument("--pairs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--env", action="append", default=[], help="KEY=VALUE for both servers (OMP_WAIT_POLICY=passive)")
    ap.add_argument("--count", action="store_true", help="count Python calls per thread (slow)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--table", action="store_true", help="only print the table of the runs in --out")
    args = ap.parse_args()
    trees = [(label, Path(path).resolve()) for label, path in (t.split("=", 1) for t in args.tree)]
    if args.table:
        print(table(args.out, [label for label, _ in trees], args.pairs))
        return 0
    model = pl.default_model()
    args.out.mkdir(parents=True, exist_ok=True)
    for pair in range(1, args.pairs + 1):
        for label, tree in trees if pair % 2 else trees[::-1]:
            rounds = measure(tree, args, model)
            (args.out / f"{label}-{pair}.json").write_text(json.dumps(rounds, indent=1))
            for r in rounds:
                cpu = r["cpu_s"]
                print(f"pair {pair} {label:4} {r['tok_s']:6.1f} tok/s load {r['load']:.2f} cpu/token ms: "
                      f"all {sum(cpu.values()) / r['tokens'] * 1e3:.3f} "
                      + " ".join(f"{k} {v / r['tokens'] * 1e3:.3f}" for k, v in sorted(cpu.items()) if v > 0.01)
                      + f" | waited {sum(r['wait_s'].values()):.2f} s", flush=True)
    print(table(args.out, [label for label, _ in trees], args.pairs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
