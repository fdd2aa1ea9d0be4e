"""ggml-level facts: a KV type's ggml number and row size, the backend devices, llama.cpp's system info."""
from __future__ import annotations

from dataclasses import dataclass

from .._ffi import ffi, lib
from ..kv_types import KV_TYPES


@dataclass(frozen=True)
class Device:
    name: str          # e.g. "CPU", "CUDA0"
    description: str   # e.g. "NVIDIA H200"
    is_gpu: bool


def ggml_type(kv_type: str) -> int:
    """ggml's number of a KV type name (kv_types.KV_TYPES)."""
    return getattr(lib, KV_TYPES[kv_type][0])


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
