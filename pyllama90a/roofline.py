"""How far a decode step is from the memory-bandwidth bound: the bytes one step reads, and a copy bandwidth
measured on the same device in the same process.

A one-token decode step reads every weight matrix once (the token embedding only by one row) and the K and V of
every cell in the cache, so `decode_bytes / copy_bandwidth` is the shortest a step can take; the bench reports
the fraction of that bound each mode reaches.
"""
from __future__ import annotations

import os
import time

from ._ffi import ffi, lib
from .gguf_header import read_header

_TOKEN_EMBEDDING = "token_embd.weight"
_OUTPUT = "output.weight"  # absent: the output layer reuses the token embedding, read whole


def weight_bytes_per_token(path: str | os.PathLike) -> int:
    """Bytes of the weights a one-token decode step reads: all tensors, less the token embedding when a separate
    output matrix exists (the embedding is then only read by one row)."""
    tensors = {t.name: t.nbytes or 0 for t in read_header(path).tensors}
    total = sum(tensors.values())
    if _OUTPUT in tensors:
        total -= tensors.get(_TOKEN_EMBEDDING, 0)
    return total


def decode_bytes(weight_bytes: int, kv_bytes_per_cell: float, depth: int) -> int:
    """Bytes a one-token decode step reads on top of `depth` cached tokens (and its own)."""
    return int(weight_bytes + kv_bytes_per_cell * (depth + 1))


def _device(gpu: bool):
    kind = lib.GGML_BACKEND_DEVICE_TYPE_GPU if gpu else lib.GGML_BACKEND_DEVICE_TYPE_CPU
    dev = lib.ggml_backend_dev_by_type(kind)
    if dev == ffi.NULL:
        raise RuntimeError(f"ggml has no {'GPU' if gpu else 'CPU'} device")
    return dev


def copy_bandwidth(gpu: bool, n_bytes: int = 512 * 2**20, reps: int = 5, n_threads: int | None = None) -> float:
    """Bytes per second (read + write) of ggml's contiguous copy (CONT of an F32 tensor) on the first GPU or the
    CPU: a device-to-device copy on CUDA/HIP, a threaded memcpy on the CPU. The best of `reps`."""
    n = n_bytes // 4
    ctx = lib.ggml_init({"mem_size": 4 * 2**20, "mem_buffer": ffi.NULL, "no_alloc": True})
    if ctx == ffi.NULL:
        raise RuntimeError("ggml_init failed")
    buffer = backend = ffi.NULL
    try:
        src = lib.ggml_new_tensor_4d(ctx, lib.GGML_TYPE_F32, n, 1, 1, 1)
        dst = lib.ggml_cont(ctx, src)  # a CONT node even of a contiguous tensor: one copy
        graph = lib.ggml_new_graph(ctx)
        lib.ggml_build_forward_expand(graph, dst)
        dev = _device(gpu)
        buffer = lib.ggml_backend_alloc_ctx_tensors_from_buft(ctx, lib.ggml_backend_dev_buffer_type(dev))
        if buffer == ffi.NULL:
            raise RuntimeError(f"could not allocate {2 * n_bytes} bytes for the copy bandwidth")
        backend = lib.ggml_backend_dev_init(dev, ffi.NULL)
        if backend == ffi.NULL:
            raise RuntimeError("could not start the backend for the copy bandwidth")
        if not gpu and n_threads:
            from .native.ggml import cpu_proc

            set_n_threads = cpu_proc("ggml_backend_set_n_threads", "ggml_backend_set_n_threads_t")
            if set_n_threads is not None:
                set_n_threads(backend, n_threads)
        times = []
        for _ in range(reps + 1):
            t0 = time.perf_counter()
            if lib.ggml_backend_graph_compute(backend, graph) != lib.GGML_STATUS_SUCCESS:
                raise RuntimeError("the copy bandwidth graph failed")
            times.append(time.perf_counter() - t0)
        return 2 * lib.ggml_nbytes(src) / min(times[1:])  # the first run pages the buffers in
    finally:
        if backend != ffi.NULL:
            lib.ggml_backend_free(backend)
        if buffer != ffi.NULL:
            lib.ggml_backend_buffer_free(buffer)
        lib.ggml_free(ctx)
