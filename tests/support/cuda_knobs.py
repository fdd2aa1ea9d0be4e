"""The CUDA backend's test knobs (ggml-cuda/pyl-test-knobs.cuh): smaller chunks and groups, or MMVQ instead of
the short-rows kernel, so that tests reach those code paths at sizes they can afford. Reached through the
backend registry (production code never sets them); reset to production behaviour on leaving the block."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

from pyllama90a.native._ffi import ffi, lib


def _setter():  # a cffi function pointer
    reg = lib.ggml_backend_reg_by_name(b"CUDA")
    assert reg != ffi.NULL, "no CUDA backend in this build"
    address = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_cuda_pyl_set_test_knobs")
    assert address != ffi.NULL, "the CUDA backend has no pyllama90a test knobs (patch 0004 missing?)"
    return ffi.cast("void (*)(int64_t, int64_t, int32_t)", address)


@contextlib.contextmanager
def cuda_test_knobs(*, out_prod_chunk_rows: int = 0, kv_cublas_heads: int = 0,
                    mmvq_short_rows_off: bool = False) -> Iterator[None]:
    setter = _setter()
    setter(out_prod_chunk_rows, kv_cublas_heads, int(mmvq_short_rows_off))
    try:
        yield
    finally:
        setter(0, 0, 0)
