"""A fuzz run: generate cases, run them, keep the smallest reproducer of each distinct failure, report.

Cases run in batches; after each batch the new failures are shrunk and saved, and the findings file is
rewritten, so a long run reports as it goes. Shrinking removes one mutation (or one op of a mutation)
at a time for as long as the same failure (same `Outcome.signature()`) still happens.
"""
from __future__ import annotations

import collections
import hashlib
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .adapter_cases import adapter_job, generate_adapter_case, load_adapter_base
from .api_cases import api_job, generate_api_case, generate_untrusted_case
from .bases import available_bases, load_base
from .gguf_generator import generate_case
from .gguf_mutations import describe, write_case
from .model_case import case_job
from .rpc_cases import describe_rpc, generate_rpc_case
from .rpc_replay import corpus_sessions, rpc_job
from .rpc_sessions import ensure_corpus
from .runner import DEFECTS, OUTCOMES, Outcome, run_jobs
from .state_cases import generate_state_case, state_job


@dataclass
class Limits:
    n_jobs: int = 2
    timeout: float = 20.0
    mem_limit_mb: float = 4096.0


@dataclass
class Finding:
    """One distinct failure: its smallest reproducer so far and how many cases hit it."""

    signature: str
    spec: dict
    outcome: Outcome
    count: int = 0
    mutation_classes: collections.Counter = field(default_factory=collections.Counter)

    @property
    def name(self) -> str:
        return f"{self.outcome.kind}-{hashlib.sha256(self.signature.encode()).hexdigest()[:10]}"


def job_for(spec: dict, work: Path, i: int):  # a runner job function
    if spec.get("target") == "api":
        return api_job(spec, work / f"api-{i}")
    if spec.get("target") == "adapter":
        return adapter_job(spec, work / f"adapter-{i}")
    if spec.get("target") == "state":
        return state_job(spec, work / f"state-{i}")
    if spec.get("target") == "rpc":
        return rpc_job(spec, work / f"rpc-{i}")
    return case_job(spec, work / f"case-{i}.gguf")


def run_specs(specs: Iterable[tuple[Any, dict]], limits: Limits, work: Path) -> Iterable[tuple[Any, Outcome]]:
    """Run (key, spec) pairs; the case files are written in the children, under `work`."""
    jobs = ((key, job_for(spec, work, i)) for i, (key, spec) in enumerate(specs))
    return run_jobs(jobs, n_jobs=limits.n_jobs, timeout=limits.timeout, mem_limit_mb=limits.mem_limit_mb,
                    work_dir=work)


SPEC_KEYS = ("target", "base", "model_args", "mutations")


def describe_spec(spec: dict) -> str:
    if spec.get("target") == "rpc":
        worker = "".join(f", {k}={v!r}" for k, v in spec.get("model_args", {}).items())
        return f"rpc on {spec['base']}{worker}: {describe_rpc(spec['mutations'])}"
    args = "".join(f", {k}={v!r}" for k, v in spec.get("model_args", {}).items())
    return f"{spec.get('target', 'gguf')} on {spec['base']}{args}: {describe(spec['mutations'])}"


def _smaller(spec: dict) -> list[dict]:
    """Every spec with one mutation, or one op of a many-op mutation, left out."""
    muts = spec["mutations"]
    out = [{k: v for k, v in spec.items() if k != "model_args"}] if spec.get("model_args") else []
    if len(muts) > 1:
        out += [{**spec, "mutations": muts[:i] + muts[i + 1:]} for i in range(len(muts))]
    for i, m in enumerate(muts):
        for j in range(len(m["ops"]) if len(m["ops"]) > 1 else 0):
            fewer = {**m, "ops": m["ops"][:j] + m["ops"][j + 1:]}
            out.append({**spec, "mutations": [*muts[:i], fewer, *muts[i + 1:]]})
    return out


def shrink(findings: list[Finding], limits: Limits, work: Path) -> None:
    """Shrink the findings' specs in place, all of them in parallel, one removal per round."""
    active = list(findings)
    while active:
        trials = [((k, j), cand) for k, f in enumerate(active) for j, cand in enumerate(_smaller(f.spec))]
        if not trials:
            return
        best: dict[int, tuple[int, dict, Outcome]] = {}
        by_key = dict(trials)
        for (k, j), outcome in run_specs(trials, limits, work):
            if outcome.signature() == active[k].signature and (k not in best or j < best[k][0]):
                best[k] = (j, by_key[(k, j)], outcome)
        for k, (_, spec, outcome) in best.items():
            active[k].spec, active[k].outcome = spec, outcome
        active = [active[k] for k in sorted(best)]


class Campaign:
    def __init__(self, out: Path, limits: Limits, findings_path: Path | None = None,
                 log: Callable[[str], None] = print) -> None:
        self.out, self.limits, self.log = out, limits, log
        self.repro_dir = out / "repro"
        self.work = out / "work"
        self.findings_path = findings_path or out / "findings.md"
        self.findings: dict[str, Finding] = {}
        self.outcomes: collections.Counter = collections.Counter()
        self.by_class: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.clean_errors: collections.Counter = collections.Counter()
        self.n_cases = 0
        self.started = time.monotonic()
        for d in (self.repro_dir, self.work):
            d.mkdir(parents=True, exist_ok=True)

    def run(self, specs: list[dict], *, batch: int = 50, do_shrink: bool = True) -> None:
        with open(self.out / "results.jsonl", "a") as results:
            for start in range(0, len(specs), batch):
                new: list[Finding] = []
                keyed = list(enumerate(specs[start:start + batch], start))
                for index, outcome in run_specs(keyed, self.limits, self.work):
                    spec = specs[index]
                    new += self._record(spec, outcome)
                    results.write(json.dumps({"case": index, "spec": spec, "outcome": outcome.to_json()}) + "\n")
                results.flush()
                if new and do_shrink:
                    shrink(new, self.limits, self.work)
                for f in new:
                    self._save(f)
                self.write_findings()
                self.log(f"{self.n_cases} cases, {time.monotonic() - self.started:.0f} s: "
                         + ", ".join(f"{k} {self.outcomes[k]}" for k in OUTCOMES if self.outcomes[k])
                         + f"; {len(self.findings)} distinct defects")

    def _record(self, spec: dict, outcome: Outcome) -> list[Finding]:
        self.n_cases += 1
        self.outcomes[outcome.kind] += 1
        classes = {m["cls"] for m in spec["mutations"]} or {"(none)"}
        for cls in classes:
            self.by_class[cls][outcome.kind] += 1
        if outcome.kind == "clean":
            self.clean_errors[outcome.error_type.rsplit(".", 1)[-1]] += 1
        if not outcome.is_defect:
            return []
        sig = outcome.signature()
        finding = self.findings.get(sig)
        is_new = finding is None
        if finding is None:
            finding = self.findings[sig] = Finding(sig, spec, outcome)
        finding.count += 1
        finding.mutation_classes.update(classes)
        return [finding] if is_new else []

    def _save(self, f: Finding) -> None:
        data = {"signature": f.signature, "description": describe_spec(f.spec), "outcome": f.outcome.to_json(),
                **f.spec}
        (self.repro_dir / f"{f.name}.json").write_text(json.dumps(data, indent=1) + "\n")
        if f.spec.get("target") not in ("api", "state", "rpc"):
            base = load_adapter_base if f.spec.get("target") == "adapter" else load_base
            write_case(base(f.spec["base"]), f.spec["mutations"], self.repro_dir / f"{f.name}.gguf")

    # -- reporting -----------------------------------------------------------------------------------

    def summary(self) -> str:
        cols = [k for k in OUTCOMES if any(c[k] for c in self.by_class.values())] or ["ok"]
        lines = [f"{self.n_cases} cases in {time.monotonic() - self.started:.0f} s: "
                 + ", ".join(f"{k} {self.outcomes[k]}" for k in OUTCOMES if self.outcomes[k]), "",
                 f"{'mutation class':<28}" + "".join(f"{c:>8}" for c in cols)]
        for cls in sorted(self.by_class):
            lines.append(f"{cls:<28}" + "".join(f"{self.by_class[cls][c]:>8}" for c in cols))
        if self.clean_errors:
            lines += ["", "clean errors: " + ", ".join(f"{k} {n}" for k, n in self.clean_errors.most_common())]
        lines += ["", f"{len(self.findings)} distinct defects (reproducers in {self.repro_dir}):"]
        for f in sorted(self.findings.values(), key=lambda f: -f.count):
            lines.append(f"  {f.count:>4}x {f.signature[:150]}")
            lines.append(f"        {f.name}: {describe_spec(f.spec)[:200]}")
        return "\n".join(lines)

    def write_findings(self) -> None:
        lines = ["# pyllama90a fuzz findings", "",
                 f"{self.n_cases} cases: " + ", ".join(f"{k} {self.outcomes[k]}" for k in OUTCOMES if self.outcomes[k])
                 + f". {len(self.findings)} distinct defects, most frequent first. Replay one with "
                 f"`python -m pyllama90a.fuzz --replay {self.repro_dir}/NAME.json`.", ""]
        for f in sorted(self.findings.values(), key=lambda f: -f.count):
            o = f.outcome
            what = o.kind + (f" ({o.signal})" if o.signal else "") + (f" (exit {o.exit_code})" if o.kind == "crash"
                                                                      and not o.signal else "")
            lines += [f"## {f.name}: {what} at {o.stage}, {f.count} cases", "",
                      f"- signature: `{f.signature}`",
                      f"- minimal reproducer: `{describe_spec(f.spec)}`",
                      "- mutation classes that hit it: "
                      + ", ".join(f"{c} {n}" for c, n in f.mutation_classes.most_common()),
                      f"- files: {self.repro_dir / f.name}.json, .gguf", ""]
            if o.stderr_tail:
                lines += ["```", *o.stderr_tail[-6:], "```", ""]
        self.findings_path.write_text("\n".join(lines) + "\n")

    @property
    def n_defects(self) -> int:
        return sum(self.outcomes[k] for k in DEFECTS)


TARGETS = ("gguf", "api", "untrusted", "adapter", "state", "rpc", "all")


def generate_specs(n_cases: int, seed: int, real_model: bool, target: str = "gguf") -> list[dict]:
    """Mutated model files ("gguf"), API misuse ("api", on the real metadata with --real-model, else the
    tiny model), or both in turn ("all"); "untrusted": hostile chat templates and constraints only; "adapter":
    mutated LoRA adapters for the default model (and the tiny one), loaded and used (adapter_cases.py); "state":
    mutated state and slot files of the default model (state_cases.py); "rpc": the RPC worker's protocol
    (sessions recorded first if missing)."""
    if target == "adapter":
        return [generate_adapter_case(seed, i) for i in range(n_cases)]
    if target == "state":
        return [generate_state_case(seed, i) for i in range(n_cases)]
    if target == "rpc":
        ensure_corpus()
        sessions = corpus_sessions()
        return [generate_rpc_case(seed, i, sessions) for i in range(n_cases)]
    bases = {name: load_base(name) for name in available_bases(real_model)}
    api_base = "real-header" if real_model else "tiny"
    if target == "untrusted":
        return [generate_untrusted_case(seed, i, api_base) for i in range(n_cases)]
    return [generate_case(seed, i, bases) if target == "gguf" or (target == "all" and i % 2 == 0)
            else generate_api_case(seed, i, api_base) for i in range(n_cases)]
