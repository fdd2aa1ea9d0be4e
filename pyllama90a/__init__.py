"""pyllama90a: a patched llama.cpp whose standard attention path reads quantized K and V, through cffi.

The package, floor by floor (docs/architecture.md; pyproject.toml's import-linter contracts keep the order):
    errors: the exceptions pyllama90a raises, and the argument checkers that turn bad input into them
    native/: the binding: one Python object per llama.cpp object
    core/: the library: Model, BatchEngine and what they are made of
    server/: the OpenAI- and llama-server-compatible HTTP server (`python -m pyllama90a.server`)
    worker: `python -m pyllama90a.worker`, this machine's devices served over ggml-rpc
    bench/: `python -m pyllama90a.bench`, the benchmarks
    selftest/: `python -m pyllama90a.selftest`, every attention path of this build against a CPU reference
    fuzz/: `python -m pyllama90a.fuzz`, untrusted input (GGUF, API, RPC, state files) in child processes
    tools/: developer tools that drive a server or a worker from outside, and synthetic models
    __main__: `python -m pyllama90a pull|run`, the command line
"""
from __future__ import annotations


def _use_installed_native_module() -> None:
    """Run from a source checkout (e.g. `python -m pyllama90a` in the repository root), the compiled part
    is not next to these files: take it from the installed copy of the package."""
    from importlib.machinery import EXTENSION_SUFFIXES
    from pathlib import Path

    def compiled(folder: Path) -> bool:  # (not _native.pyi, the stub that every checkout has)
        return any((folder / f"_native{suffix}").is_file() for suffix in EXTENSION_SUFFIXES)

    here = Path(__file__).resolve().parent
    if compiled(here):
        return
    from importlib import metadata

    try:
        installed = Path(str(metadata.distribution("pyllama90a").locate_file("pyllama90a"))).resolve()
    except metadata.PackageNotFoundError:
        return
    if installed != here and compiled(installed):
        __path__.append(str(installed))


_use_installed_native_module()

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .core.engine.engine import BatchEngine, Chunk
from .core.generation.outputs import Completion, Piece, Timings, Usage
from .core.generation.sequence import TokenLogprob
from .core.generation.speculative import Speculation
from .core.gguf.default_model import default_model, pull_default_model
from .core.model.attention_paths import AttentionPaths
from .core.model.attention_policy import AttentionChoice
from .core.model.kv_budget import KVBytes, kv_bytes, max_n_ctx
from .core.model.memory_plan import KVCacheInfo, MemoryPlan, MemoryPlanner, plan_memory
from .core.model.model import Model
from .errors import (
    BusyError,
    ChatTemplateError,
    ClosedError,
    ConstraintError,
    ContextError,
    ContextOverflowError,
    DecodeError,
    DraftModelError,
    EngineStoppedError,
    InfillUnsupportedError,
    InvalidArgumentError,
    LlamaError,
    LoraAdapterError,
    ModelFormatError,
    ModelLoadError,
    NonFiniteOutputError,
    QueueFullError,
    StateFileError,
)
from .native.kv_types import KV_TYPES, QUANTIZED_KV_TYPES
from .native.log import set_native_log_level

__version__ = "0.1.0"


def calibrate(path: str | os.PathLike[str] | None = None, **options: Any) -> Path:
    """Measure speed, memory and KV quality on this device for a model and write the calibration file that
    flash_attn="auto" follows; returns its path (pyllama90a.bench.calibrate.calibrate: quick=, n_ctx=, ...). The
    bench is a service above the library: imported by name when called, so the library never imports it."""
    from importlib import import_module

    measure: Callable[..., Path] = import_module(".bench.calibrate", __name__).calibrate
    return measure(path, **options)


__all__ = [
    "KV_TYPES",
    "QUANTIZED_KV_TYPES",
    "AttentionChoice",
    "AttentionPaths",
    "BatchEngine",
    "BusyError",
    "ChatTemplateError",
    "Chunk",
    "ClosedError",
    "Completion",
    "ConstraintError",
    "ContextError",
    "ContextOverflowError",
    "DecodeError",
    "DraftModelError",
    "EngineStoppedError",
    "InfillUnsupportedError",
    "InvalidArgumentError",
    "KVBytes",
    "KVCacheInfo",
    "LlamaError",
    "LoraAdapterError",
    "MemoryPlan",
    "MemoryPlanner",
    "Model",
    "ModelFormatError",
    "ModelLoadError",
    "NonFiniteOutputError",
    "Piece",
    "QueueFullError",
    "Speculation",
    "StateFileError",
    "Timings",
    "TokenLogprob",
    "Usage",
    "calibrate",
    "default_model",
    "kv_bytes",
    "max_n_ctx",
    "plan_memory",
    "pull_default_model",
    "set_native_log_level",
]
