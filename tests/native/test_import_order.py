"""An app that imports numpy (or other C++ libraries) before pyllama90a can load a model.

On the CUDA build this used to segfault at load: libggml-cuda.so exported its own copies of libstdc++
members and libllama bound to them when numpy had loaded libstdc++ first (src/exports.map is the fix).
Run in a child process, so that a crash fails the test instead of ending the run; on the CUDA build
the model goes to the GPU (n_gpu_layers=-1 is the default). A synthetic model, so that it runs on the
device machines too, where the default model is not carried.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

LOAD = """
import pyllama90a as pl
from pyllama90a.tools.synthetic import synthetic_model
with pl.Model(synthetic_model("tiny"), n_ctx=256) as m:
    print(m.attention.backend, repr(m.generate("hello", max_tokens=4, temperature=0).text))
"""


@pytest.mark.parametrize("first", ["import numpy", "import os, tempfile, numpy", "import numpy, cffi, psutil"])
def test_model_loads_whatever_was_imported_first(first: str) -> None:
    out = subprocess.run([sys.executable, "-c", first + "\n" + LOAD], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"rc {out.returncode}:\n{out.stderr[-3000:]}"
    assert out.stdout.strip(), out.stderr[-3000:]
