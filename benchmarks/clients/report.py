"""The matrix's report: the client versions, the markdown table, and --combine's join of several runs."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from checks import APIS, CHECKS
from clients import CLIENTS


def versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version
    names = ["openai", "anthropic", "langchain-core", "langchain-openai", "langchain-anthropic", "litellm",
             "instructor", "pydantic-ai-slim", "llama-index-core", "llama-index-llms-openai",
             "llama-index-llms-openai-like", "llama-index-llms-anthropic", "pydantic", "httpx"]
    found = {}
    for name in names:
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "-"
    return found


def table(rows: list[dict[str, Any]]) -> str:
    out = ["| client | API | " + " | ".join(CHECKS) + " |", "|---|---|" + "---|" * len(CHECKS)]
    for client in CLIENTS:
        for api in APIS:
            cells = {r["check"]: r for r in rows if r["client"] == client and r["api"] == api}
            if not cells:
                continue
            out.append(f"| {client} | {api} | " + " | ".join(
                (cells[c]["status"] if cells[c]["status"] != "fail"
                 else "FAIL: " + cells[c]["detail"][:90].replace("|", "/")) if c in cells else "-"
                for c in CHECKS) + " |")
    return "\n".join(out) + "\n"


def combine(files: list[Path], out: Path) -> int:
    runs = [json.loads(f.read_text()) for f in files]
    rows = {(r["client"], r["api"], r["check"]): r for run in runs for r in run["rows"]}
    order = {name: i for i, name in enumerate(CLIENTS)}
    joined = sorted(rows.values(), key=lambda r: (order[r["client"]], APIS.index(r["api"]), CHECKS.index(r["check"])))
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps({**runs[-1], "rows": joined, "runs": [str(f) for f in files]},
                                                 indent=1))
    (out / "results.md").write_text(table(joined))
    print(table(joined))
    return 0
