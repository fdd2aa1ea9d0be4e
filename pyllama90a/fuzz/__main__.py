"""python -m pyllama90a.fuzz: fuzz pyllama90a with mutated GGUF model files and API misuse.

    python -m pyllama90a.fuzz --cases 1000 --seed 1 --jobs 2 --timeout 20 --out DIR [--real-model]
    python -m pyllama90a.fuzz --target api --cases 500 --real-model
    python -m pyllama90a.fuzz --target adapter --cases 500
    python -m pyllama90a.fuzz --target state --cases 500 --mem-limit-mb 1500
    python -m pyllama90a.fuzz --target rpc --cases 10000 --timeout 30
    python -m pyllama90a.fuzz --replay DIR/repro/crash-0123456789.json

Exits 1 if any case crashed, hung, went over the memory limit, or leaked an exception that is not a
pyllama90a.errors exception (or if the replayed reproducer still fails), else 0.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from .campaign import SPEC_KEYS, TARGETS, Campaign, Limits, describe_spec, generate_specs, run_specs


def default_out() -> Path:
    return Path(os.environ.get("PYLLAMA90A_HOME") or Path.home() / ".cache" / "pyllama90a") / "fuzz"


def _replay(path: Path, limits: Limits, out: Path) -> int:
    data = json.loads(path.read_text())
    spec = {k: data[k] for k in SPEC_KEYS if k in data}
    print(f"replaying {path}: {describe_spec(spec)}")
    if "signature" in data:
        print(f"recorded: {data['signature']}")
    out.mkdir(parents=True, exist_ok=True)
    (_, outcome), = run_specs([(0, spec)], limits, out)
    print(f"now:      {outcome.signature()} (stage {outcome.stage}, {outcome.seconds:.1f} s)")
    for line in outcome.stderr_tail if outcome.is_defect else []:
        print(f"  | {line}")
    return 1 if outcome.is_defect else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyllama90a.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=200, help="how many mutated files (default 200)")
    parser.add_argument("--seed", type=int, default=0, help="the same seed gives the same cases")
    parser.add_argument("--jobs", type=int, default=2, help="children at a time (default 2)")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds a case may run (default 20)")
    parser.add_argument("--mem-limit-mb", type=float, default=4096.0, help="RSS limit of a case (default 4096)")
    parser.add_argument("--out", type=Path, default=None,
                        help="reproducers, results.jsonl and findings.md (default $PYLLAMA90A_HOME/fuzz)")
    parser.add_argument("--findings", type=Path, default=None, help="also write the findings here (markdown)")
    parser.add_argument("--real-model", action="store_true",
                        help="also mutate the default model: its metadata over small tensors, and a few whole files")
    parser.add_argument("--target", choices=TARGETS, default="gguf",
                        help="gguf: mutated model files; api: hostile Model arguments and calls; untrusted: hostile "
                             "chat templates and constraints; adapter: mutated LoRA adapters for the default "
                             "model, loaded and used; state: mutated state and slot files of the default model; "
                             "rpc: the RPC worker's protocol (recorded sessions, mutated, and issue 33's attacks); "
                             "all: gguf and api")
    parser.add_argument("--batch", type=int, default=50, help="cases between reports (default 50)")
    parser.add_argument("--no-shrink", action="store_true", help="keep failing cases as they are")
    parser.add_argument("--replay", type=Path, help="rerun one reproducer (.json) and report its outcome")
    args = parser.parse_args(argv)
    limits = Limits(args.jobs, args.timeout, args.mem_limit_mb)
    out = args.out or default_out()
    if args.replay:
        return _replay(args.replay, limits, out / "work")

    specs = generate_specs(args.cases, args.seed, args.real_model, args.target)
    out.mkdir(parents=True, exist_ok=True)
    campaign = Campaign(out, limits, args.findings, log=lambda line: print(line, flush=True))
    try:
        campaign.run(specs, batch=args.batch, do_shrink=not args.no_shrink)
    finally:
        shutil.rmtree(campaign.work, ignore_errors=True)
        print(campaign.summary(), flush=True)
    return 1 if campaign.n_defects else 0


if __name__ == "__main__":
    sys.exit(main())
