"""The ggml devices a model offloads to by default and those a worker serves, by name."""
from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import InvalidArgumentError
from ._ffi import ffi, lib

if TYPE_CHECKING:  # pragma: no cover
    from .._native import CData  # (only in the stub, _native.pyi)


def device_name(dev: CData) -> str:  # dev: a ggml_backend_dev_t
    return ffi.string(lib.ggml_backend_dev_name(dev)).decode()


def device_label(dev: CData) -> str:
    """"name (description)", e.g. "CUDA0 (NVIDIA H200)", "RPC0 (10.0.0.2:50052)"."""
    return f"{device_name(dev)} ({ffi.string(lib.ggml_backend_dev_description(dev)).decode()})"


def device_memory(dev: CData) -> tuple[int, int]:
    """(free, total) bytes of a device as its backend reports them: a GPU's own memory, the CPU's the system's."""
    free, total = ffi.new("size_t *"), ffi.new("size_t *")
    lib.ggml_backend_dev_memory(dev, free, total)
    return int(free[0]), int(total[0])


def _all() -> list[CData]:
    return [lib.ggml_backend_dev_get(i) for i in range(lib.ggml_backend_dev_count())]


def local_offload_devices() -> list[CData]:
    """This machine's devices that llama.cpp offloads to by default (ggml_backend_dev_t): its GPUs, else its
    integrated GPUs (llama.cpp also skips a GPU that two backends both list; our builds have one GPU backend)."""
    found = _all()
    gpus = [d for d in found if lib.ggml_backend_dev_type(d) == lib.GGML_BACKEND_DEVICE_TYPE_GPU]
    return gpus or [d for d in found if lib.ggml_backend_dev_type(d) == lib.GGML_BACKEND_DEVICE_TYPE_IGPU]


def serving_devices(names: list[str]) -> list[CData]:
    """The devices a worker serves (ggml_backend_dev_t): those named (ggml's names, e.g. CUDA0, CPU), by default
    this machine's GPUs, else its CPU."""
    every = {device_name(d): d for d in _all()}
    if not names:
        return local_offload_devices() or [lib.ggml_backend_dev_by_type(lib.GGML_BACKEND_DEVICE_TYPE_CPU)]
    unknown = [n for n in names if n not in every]
    if unknown:
        raise InvalidArgumentError(f"no device {', '.join(unknown)} here; this build sees {', '.join(every)}",
                                   param="device")
    return [every[n] for n in names]
