"""What the benchmarks and the selftest write besides their numbers: the machine's name and the result files.

Shared by `python -m pyllama90a.bench`, its `server` load benchmark (bench_server.py) and the selftest,
so that none of them imports another for it.
"""
from __future__ import annotations

import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

from ..core.model.attention_policy import attention_device


def machine_name() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    name = f"{platform.node()} ({cpu}, {os.cpu_count()} cpus; {cpu_backend_line()})"
    kind, gpu = attention_device(n_gpu_layers=-1)
    return name if kind == "cpu" else f"{name} + {gpu}"


def cpu_backend_line() -> str:
    """Which ggml CPU backend runs (the variant a portable build chose) and the CPU features it uses and leaves."""
    from ..native.ggml import cpu_build_features, loaded_cpu_backend
    from . import cpu_features

    return f"{loaded_cpu_backend()}: {cpu_features.describe(cpu_build_features())}"


def write_results(out: Path, stem: str, result: dict, table: str) -> Path:
    """`out`/STEM.json and STEM.md (the folder is made if needed); returns `out`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1))
    (out / f"{stem}.md").write_text(table)
    print(f"wrote {out}/{stem}.json, {stem}.md", file=sys.stderr)
    return out


def pyplot() -> Any:
    """matplotlib.pyplot drawing to files (Agg), or None without matplotlib (the `bench` extra): the one loader
    of every bench's PNG."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt
