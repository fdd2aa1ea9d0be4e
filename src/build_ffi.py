"""Generate the C source of the cffi extension `pyllama90a._native` (API mode).

The declarations live as data in src/decl/*.h; CMake compiles the emitted C file against the
patched llama.h, so every struct layout and constant is checked by the C compiler.
Usage: python build_ffi.py OUTPUT.c
"""
import sys
from pathlib import Path

import cffi

DECL_DIR = Path(__file__).resolve().parent / "decl"
DECL_ORDER = ("ggml_decl.h", "llama_decl.h", "pyllama90a_decl.h", "rpc_decl.h", "native_helpers_decl.h")


def make_ffi() -> cffi.FFI:
    ffi = cffi.FFI()
    for name in DECL_ORDER:
        ffi.cdef((DECL_DIR / name).read_text())
    ffi.set_source(
        "pyllama90a._native",
        '#include "ggml.h"\n#include "ggml-alloc.h"\n#include "ggml-backend.h"\n#include "ggml-rpc.h"\n'
        '#include "llama.h"\n#include "llama-pyllama90a.h"\n#include "ggml-pyllama90a.h"\n'
        '#include "native_helpers.h"\n',
    )
    return ffi


if __name__ == "__main__":
    make_ffi().emit_c_code(sys.argv[1])
