"""One fuzz case in the child: write the mutated GGUF, then use it the way an application would.

Many bad values load fine and only fail at the first decode (e.g. a NaN epsilon), so a case goes on past
the load: tokenize, a short greedy generation, and the chat template when the file has one.
"""
from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from .bases import load_base
from .gguf_mutations import write_case
from .runner import Stage

N_CTX = 256


def _show_native_log() -> None:
    """llama.cpp's warnings and errors to stderr, so that a crash report has what it said just before."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("llama.cpp: %(message)s"))
    native = logging.getLogger("pyllama90a.native")
    native.setLevel(logging.WARNING)
    native.addHandler(handler)


def exercise(path: str | os.PathLike[str], stage: Stage, model_args: dict | None = None) -> None:
    """Load `path` (with `model_args` for Model) and use it; exceptions propagate to the runner, which
    classifies them."""
    import pyllama90a as pl

    _show_native_log()
    stage("load")
    with pl.Model(path, n_ctx=N_CTX, n_threads=1, **(model_args or {})) as model:
        if model.embedding:
            stage("embed")
            model.embed(["Hello", "world"])
            return
        stage("tokenize")
        tokens = model.tokenize("Hello, world! \u00e9\u4e2d 123")
        model.detokenize(tokens)
        stage("generate")
        model.generate("Hello", max_tokens=4, temperature=0)
        if model.metadata("tokenizer.chat_template") is not None:
            stage("chat")
            model.chat([{"role": "user", "content": "hi"}], max_tokens=2, temperature=0)
        stage("close")


def _run_case(spec: dict, path: Path, stage: Stage) -> None:
    stage("build")
    write_case(load_base(spec["base"]), spec["mutations"], path)
    try:
        exercise(path, stage, spec.get("model_args"))
    finally:
        path.unlink(missing_ok=True)


def case_job(spec: dict, path: Path) -> Callable[[Stage], None]:  # a runner job function (picklable)
    """The child function for `spec` (base, mutations, optional model_args): build the file at `path`
    (stage "build"), exercise it, remove it."""
    return functools.partial(_run_case, spec, path)
