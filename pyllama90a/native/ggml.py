"""ggml-level facts: a KV type's ggml number and row size, the backend devices and a copy bandwidth on one, the
CPU backend (its features, the variant a portable build loaded, a graph computed on it), llama.cpp's system info."""
from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ._ffi import ffi, lib
from ._ffi import gpu_backend_devices as gpu_backend_devices  # re-exported for the floors above the binding
from .kv_types import KV_TYPES

if TYPE_CHECKING:  # pragma: no cover
    from .._native import CData  # (only in the stub, _native.pyi)


@dataclass(frozen=True)
class Device:
    name: str          # e.g. "CPU", "CUDA0"
    description: str   # e.g. "NVIDIA H200"
    is_gpu: bool


def ggml_type(kv_type: str) -> int:
    """ggml's number of a KV type name (kv_types.KV_TYPES)."""
    return int(getattr(lib, KV_TYPES[kv_type][0]))


def row_size(kv_type: str, n_values: int) -> int:
    """Bytes of a row of `n_values` values of `kv_type` (whole quantization blocks)."""
    return lib.ggml_row_size(ggml_type(kv_type), n_values)


def devices() -> list[Device]:
    """The backend devices of this build, in ggml's order."""
    found = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        found.append(Device(ffi.string(lib.ggml_backend_dev_name(dev)).decode(),
                            ffi.string(lib.ggml_backend_dev_description(dev)).decode(),
                            lib.ggml_backend_dev_type(dev) == lib.GGML_BACKEND_DEVICE_TYPE_GPU))
    return found


def system_info() -> str:
    """llama.cpp's one-line summary of the CPU features and backends it was built with."""
    return ffi.string(lib.llama_print_system_info()).decode().strip()


def _device(gpu: bool = False) -> CData:
    """ggml's first GPU device, or its CPU device."""
    dev = lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_GPU if gpu else lib.GGML_BACKEND_DEVICE_TYPE_CPU)
    if dev == ffi.NULL:
        raise RuntimeError(f"ggml has no {'GPU' if gpu else 'CPU'} backend loaded")
    return dev


@contextmanager
def _backend(dev: CData, n_threads: int | None) -> Iterator[CData]:
    """A started backend of `dev` (n_threads applies to the CPU's), freed on exit."""
    backend = lib.ggml_backend_dev_init(dev, ffi.NULL)
    if backend == ffi.NULL:
        raise RuntimeError(f"could not start ggml's {ffi.string(lib.ggml_backend_dev_name(dev)).decode()} backend")
    try:
        set_n_threads = cpu_proc("ggml_backend_set_n_threads", "ggml_backend_set_n_threads_t") if n_threads else None
        if set_n_threads is not None and lib.ggml_backend_dev_type(dev) == lib.GGML_BACKEND_DEVICE_TYPE_CPU:
            set_n_threads(backend, n_threads)
        yield backend
    finally:
        lib.ggml_backend_free(backend)


def _compute(backend: CData, graph: CData) -> None:
    status = lib.ggml_backend_graph_compute(backend, graph)
    if status != lib.GGML_STATUS_SUCCESS:
        raise RuntimeError(f"ggml_backend_graph_compute failed (status {status})")


def cpu_proc(name: str, ctype: str) -> CData | None:
    """A function of the CPU backend by name (its module is loaded at run time in a portable build), or None."""
    address = lib.ggml_backend_reg_get_proc_address(lib.ggml_backend_dev_backend_reg(_device()), name.encode())
    return None if address == ffi.NULL else ffi.cast(ctype, address)


def cpu_build_features() -> dict[str, str]:
    """The instruction-set features the loaded CPU backend was compiled for, e.g. {"AVX2": "1", "AMX_INT8": "1"}."""
    get_features = cpu_proc("ggml_backend_get_features", "ggml_backend_get_features_t")
    found: dict[str, str] = {}
    if get_features is None:
        return found
    feature = get_features(lib.ggml_backend_dev_backend_reg(_device()))
    while feature.name != ffi.NULL:
        found[ffi.string(feature.name).decode()] = ffi.string(feature.value).decode()
        feature += 1
    return found


def loaded_cpu_backend() -> str:
    """File name of the CPU backend in use: the variant a portable build chose (e.g. libggml-cpu-haswell.so), or
    libggml-cpu.so of a native build."""
    maps = Path("/proc/self/maps")
    if maps.exists():
        for line in maps.read_text().splitlines():
            name = line.rsplit("/", 1)[-1]
            if name.startswith("libggml-cpu") and name.endswith(".so"):
                return name
    return "unknown"


def compute_on_cpu(graph: CData, n_threads: int) -> None:
    """Compute a ggml graph (tensors in host memory) on the CPU backend with n_threads threads."""
    with _backend(_device(), n_threads) as backend:
        _compute(backend, graph)


def cpu_extra_buffer_types() -> dict[str, object]:
    """The CPU's extra buffer types for weights by name (e.g. "AMX", "CPU_REPACK"): what llama.cpp puts weights in
    when weight repacking is on."""
    get_extra = cpu_proc("ggml_backend_dev_get_extra_bufts", "ggml_backend_dev_get_extra_bufts_t")
    found: dict[str, object] = {}
    if get_extra is None:
        return found
    buft = get_extra(_device())
    while buft[0] != ffi.NULL:
        found[ffi.string(lib.ggml_backend_buft_name(buft[0])).decode()] = buft[0]
        buft += 1
    return found


@dataclass(frozen=True)
class TypeInfo:
    name: str          # ggml's name, e.g. "q4_0"
    block_size: int    # values per block
    type_size: int     # bytes per block
    to_float: bool     # ggml-base can dequantize it (F32 itself has no to_float)


def type_info(type_id: int) -> TypeInfo | None:
    """ggml-base's type traits of `type_id`, or None for a number that is not a type of this build (past
    GGML_TYPE_COUNT, or a removed type, whose block size is 0)."""
    if not 0 <= type_id < lib.GGML_TYPE_COUNT or lib.ggml_blck_size(type_id) == 0:
        return None
    traits = lib.ggml_get_type_traits(type_id)
    return TypeInfo(ffi.string(traits.type_name).decode(), traits.blck_size, lib.ggml_type_size(type_id),
                    traits.to_float != ffi.NULL)


def copy_bandwidth(gpu: bool, n_bytes: int = 512 * 2**20, reps: int = 5, n_threads: int | None = None) -> float:
    """Bytes per second (read + write) of ggml's contiguous copy (CONT of an F32 tensor) on the first GPU or the
    CPU: a device-to-device copy on CUDA/HIP, a threaded memcpy on the CPU. The best of `reps`."""
    n = n_bytes // 4
    ctx = lib.ggml_init({"mem_size": 4 * 2**20, "mem_buffer": ffi.NULL, "no_alloc": True})
    if ctx == ffi.NULL:
        raise RuntimeError("ggml_init failed")
    buffer = ffi.NULL
    try:
        src = lib.ggml_new_tensor_4d(ctx, lib.GGML_TYPE_F32, n, 1, 1, 1)
        dst = lib.ggml_cont(ctx, src)  # a CONT node even of a contiguous tensor: one copy
        graph = lib.ggml_new_graph(ctx)
        lib.ggml_build_forward_expand(graph, dst)
        dev = _device(gpu)
        buffer = lib.ggml_backend_alloc_ctx_tensors_from_buft(ctx, lib.ggml_backend_dev_buffer_type(dev))
        if buffer == ffi.NULL:
            raise RuntimeError(f"could not allocate {2 * n_bytes} bytes for the copy bandwidth")
        times = []
        with _backend(dev, n_threads) as backend:
            for _ in range(reps + 1):
                t0 = time.perf_counter()
                _compute(backend, graph)
                times.append(time.perf_counter() - t0)
        return 2 * lib.ggml_nbytes(src) / min(times[1:])  # the first run pages the buffers in
    finally:
        if buffer != ffi.NULL:
            lib.ggml_backend_buffer_free(buffer)
        lib.ggml_free(ctx)
