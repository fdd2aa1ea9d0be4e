"""Job functions with a known outcome, for tests of the fuzz runner (tests/services/test_fuzz.py).

They live in a module of their own, importable by name, because the runner's children come from a fork
server: a job function is pickled by reference and imported there.
"""
from __future__ import annotations

import time


def native_abort(stage) -> None:
    """A GGML_ASSERT that fails on purpose: ggml refuses to multiply matrices of mismatched shapes."""
    from pyllama90a.native._ffi import ffi, lib

    stage("abort")
    ctx = lib.ggml_init({"mem_size": 1 << 20, "mem_buffer": ffi.NULL, "no_alloc": True})
    a = lib.ggml_new_tensor_4d(ctx, 0, 64, 8, 1, 1)
    b = lib.ggml_new_tensor_4d(ctx, 0, 32, 8, 1, 1)
    lib.ggml_mul_mat(ctx, a, b)


def leak(stage) -> None:
    stage("lookup")
    raise KeyError("not a pyllama90a error")


def sleep_long(stage) -> None:
    stage("sleeping")
    time.sleep(60)


def grow(stage) -> None:
    stage("allocating")
    blocks = []
    while True:
        blocks.append(bytearray(64 << 20))  # zero-filled: the pages are touched
        time.sleep(0.005)
