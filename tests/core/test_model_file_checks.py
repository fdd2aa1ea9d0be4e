"""A model file is untrusted input: bad hyperparameter values give a pyllama90a error naming the key.

Each case edits one value of the tiny synthetic model in place and loads it in a child process, so
that a regression (llama.cpp aborting the process) fails the test instead of ending the test run.
Before patch 0008 every one of these aborted the process, at load or at the first decode.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pyllama90a.tools.synthetic import import_gguf, synthetic_model

CHILD = r"""
import json, sys
import pyllama90a as pl
try:
    with pl.Model(sys.argv[1], n_ctx=256) as m:
        m.generate("hello", max_tokens=4, temperature=0)
    print(json.dumps({"outcome": "loaded"}))
except pl.errors.LlamaError as e:
    print(json.dumps({"outcome": type(e).__name__, "message": str(e)}))
"""


def _edited_copy(tmp_path: Path, key: str, value: float, index: int = 0) -> Path:
    """The tiny model with element `index` of metadata `key` set to `value` (same type: size unchanged)."""
    path = tmp_path / "edited.gguf"
    shutil.copy(synthetic_model("tiny"), path)
    reader = import_gguf().GGUFReader(path, "r+")
    field = reader.fields[key]
    part = field.parts[field.data[index]]
    part[0] = np.array(value).astype(part.dtype)
    reader.data.flush()
    del reader
    return path


def _load_in_child(path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"the process died (rc {out.returncode}):\n{out.stderr[-2000:]}"
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(("key", "value", "named"), [
    ("llama.block_count", 0, "n_layer_all > 0"),
    ("llama.block_count", 100_000, "LLAMA_MAX_LAYERS"),
    ("llama.attention.layer_norm_rms_epsilon", float("nan"), "llama.attention.layer_norm_rms_epsilon = nan"),
    ("llama.attention.layer_norm_rms_epsilon", -1e-5, "llama.attention.layer_norm_rms_epsilon = -1e-05"),
    ("llama.attention.head_count_kv", 0, "llama.attention.head_count_kv (layer 0) = 0"),
    ("llama.attention.head_count_kv", 3, "must be > 0 and divide llama.attention.head_count = 4"),
    ("llama.rope.dimension_count", 63, "invalid n_rot: 63"),
    ("llama.rope.freq_base", float("inf"), "llama.rope.freq_base = inf"),
])
def test_bad_value_is_a_load_error_naming_it(tmp_path: Path, key: str, value: float, named: str) -> None:
    result = _load_in_child(_edited_copy(tmp_path, key, value))
    assert result["outcome"] == "ModelLoadError", result
    assert named in result["message"].splitlines()[0], result["message"]  # the first line says why


def test_unedited_copy_loads(tmp_path: Path) -> None:
    """The editing itself keeps a loadable file: the cases above fail because of their value."""
    eps = float(np.float32(1e-5))
    assert _load_in_child(_edited_copy(tmp_path, "llama.attention.layer_norm_rms_epsilon", eps)) == {
        "outcome": "loaded"}
