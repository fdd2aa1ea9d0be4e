"""The GPU the package was built for, if one is present: CUDA/HIP-only tests are skipped without it."""
from __future__ import annotations

import pytest

from pyllama90a.native._ffi import ffi, lib


def gpu_device() -> str | None:
    for i in range(lib.ggml_backend_dev_count()):
        name = ffi.string(lib.ggml_backend_dev_name(lib.ggml_backend_dev_get(i))).decode()
        if name.startswith(("CUDA", "ROCm", "HIP")):
            return name
    return None


# the cuda tier (tests/conftest.py): a module that sets `pytestmark = requires_gpu` is in it
requires_gpu = [pytest.mark.cuda, pytest.mark.skipif(gpu_device() is None, reason="needs a CUDA or HIP device")]


def on_gpu(test):
    """requires_gpu for one test function of a module whose other tests run anywhere."""
    for mark in requires_gpu:
        test = mark(test)
    return test
