"""The one import point of the native module: `ffi` and `lib`. Importing it initialises llama.cpp once."""
from __future__ import annotations

import logging
from pathlib import Path

from .. import _native
from .._native import ffi, lib  # (re-exported: __all__)
from . import log

log.attach()  # first: loading the backends logs
# A portable build (GGML_BACKEND_DL) registers no backend by itself: load them from the folder of the compiled
# module, where the build put them (in a source checkout that is the installed copy, not this folder), and let
# ggml choose the best CPU variant for this CPU. llama_backend_init would otherwise search the Python
# executable's folder and the current directory. A native build has its backends linked in already.
_BACKEND_DIR = Path(_native.__file__).resolve().parent
if lib.ggml_backend_reg_count() == 0:
    lib.ggml_backend_load_all_from_path(str(_BACKEND_DIR).encode())
lib.llama_backend_init()

# GPU backend modules by file name -> the name their registry has once loaded
_GPU_MODULES = {"cuda": "CUDA", "hip": "ROCm", "vulkan": "Vulkan", "musa": "MUSA", "sycl": "SYCL"}


def gpu_backend_devices() -> dict[str, int | None]:
    """The GPU backends this build carries (libggml-<name>.so beside the compiled module) -> the devices each
    found here: 0 for e.g. a HIP build on a machine without an AMD GPU, None when it did not load (its runtime
    libraries are missing; ggml's log says which)."""
    registries = {}
    for i in range(lib.ggml_backend_reg_count()):
        reg = lib.ggml_backend_reg_get(i)
        registries[ffi.string(lib.ggml_backend_reg_name(reg)).decode()] = int(lib.ggml_backend_reg_dev_count(reg))
    return {module: registries.get(registry) for module, registry in _GPU_MODULES.items()
            if (_BACKEND_DIR / f"libggml-{module}.so").is_file()}


for _module, _n in gpu_backend_devices().items():
    if not _n:
        logging.getLogger("pyllama90a").warning(
            "this build has the %s backend, but it found %s here: llama.cpp runs on the CPU",
            _module.upper(), "no device" if _n == 0 else "its runtime libraries missing (not loaded)")

__all__ = ["ffi", "gpu_backend_devices", "lib"]
