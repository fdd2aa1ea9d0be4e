"""The CK fmha mapping (src/ck_fa/fmha_mapping.cpp) as a tiny shared library for the tests.

Compiled here with the system C++ compiler against the pinned llama.cpp's ggml.h and loaded with cffi in
ABI mode. Why not in the cffi module: the mapping belongs to the HIP build (patch 0009 links it into
ggml-hip); compiling it into pyllama90a._native would ship a test-only surface in every wheel, while
this way the tests exercise the very source file the HIP build compiles, without HIP.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import cffi
import pytest

from pyllama90a.native._ffi import ffi as native_ffi
from support.repo_scripts import script_module

REPO = Path(__file__).resolve().parents[2]
CK_FA_SRC = REPO / "src" / "ck_fa"


def cdef_text(header: Path) -> str:
    """A header's C declarations for cffi: preprocessor lines and the C++-only extern "C" lines dropped."""
    kept, in_cplusplus = [], False
    for line in header.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#ifdef __cplusplus"):
            in_cplusplus = True
        elif in_cplusplus and stripped.startswith("#endif"):
            in_cplusplus = False
        elif not in_cplusplus and not stripped.startswith("#"):
            kept.append(line)
    return "\n".join(kept)


def struct_fields(header: str, name: str) -> list[tuple[str, str]]:
    """(type, field) of a struct in CK's header or in our mirror, comments and default values dropped."""
    body = re.search(rf"struct {name}\s*\{{(.*?)\n\}};", header, re.S).group(1)
    body = re.sub(r"//[^\n]*|/\*.*?\*/", "", body, flags=re.S)
    fields = []
    for declaration in body.split(";"):
        declaration = " ".join(declaration.split()).split("=")[0].strip()
        if declaration:
            ctype, field = re.fullmatch(r"(.+?)\s*\b(\w+)", declaration).groups()
            fields.append((ctype.replace(" *", "*").replace("* ", "*"), field))
    return fields


def llama_cpp_source() -> Path:
    """The patched llama.cpp tree the package was built from (for ggml.h)."""
    return script_module("prepare_source").prepare()


def build_library(out_dir: Path) -> Path:
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if compiler is None:
        pytest.fail("no C++ compiler: the package itself cannot have been built here")
    library = out_dir / "libpyllama90a_ck_fa_mapping.so"
    ggml_include = llama_cpp_source() / "ggml" / "include"
    subprocess.run([compiler, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
                    f"-I{ggml_include}", str(CK_FA_SRC / "fmha_mapping.cpp"), "-o", str(library)],
                   check=True, capture_output=True, text=True)
    return library


class Mapping:
    """The compiled mapping: .ffi (its own cffi instance), .lib, and helpers taking pyllama90a tensors."""

    def __init__(self, library: Path):
        self.ffi = cffi.FFI()
        self.ffi.cdef(cdef_text(CK_FA_SRC / "fmha_args.h"))
        self.ffi.cdef(cdef_text(CK_FA_SRC / "fmha_mapping.h"))
        self.lib = self.ffi.dlopen(str(library))

    def node(self, tensor):
        """A pyllama90a.native._ffi ggml_tensor pointer as this library's (the same memory)."""
        return self.ffi.cast("struct ggml_tensor *", int(native_ffi.cast("uintptr_t", tensor)))

    def options(self, *, min_queries: int | None = None, causal_offset: int | None = None,
                max_staging_bytes: int | None = None):
        opts = self.ffi.new("struct pyllama90a_ck_fa_options *")
        opts.min_queries = self.lib.pyllama90a_ck_fa_default_min_queries() if min_queries is None else min_queries
        opts.max_staging_bytes = (self.lib.pyllama90a_ck_fa_default_max_staging_bytes()
                                  if max_staging_bytes is None else max_staging_bytes)
        opts.causal = causal_offset is not None
        opts.causal_offset = causal_offset or 0
        return opts

    def check(self, node, **options) -> str:
        verdict = self.lib.pyllama90a_ck_fa_check(self.node(node), self.options(**options))
        return self.ffi.string(self.lib.pyllama90a_ck_fa_verdict_name(verdict)).decode()

    def map(self, node, q: int, k: int, v: int, o: int, **options):
        """(args, traits) for the node with F16 operands at the given addresses; fails unless eligible."""
        buffers = self.ffi.new("struct pyllama90a_ck_fa_buffers *", {
            "q": self.ffi.cast("void *", q), "k": self.ffi.cast("void *", k),
            "v": self.ffi.cast("void *", v), "o": self.ffi.cast("void *", o)})
        args = self.ffi.new("struct pyllama90a_fmha_fwd_args *")
        traits = self.ffi.new("struct pyllama90a_fmha_fwd_traits *")
        verdict = self.lib.pyllama90a_ck_fa_map(self.node(node), self.options(**options), buffers, args, traits)
        assert verdict == self.lib.PYLLAMA90A_CK_FA_OK, self.ffi.string(self.lib.pyllama90a_ck_fa_verdict_name(verdict))
        return args, traits

    def needs_f16_copy(self, tensor) -> bool:
        return bool(self.lib.pyllama90a_ck_fa_needs_f16_copy(self.node(tensor)))


@pytest.fixture(scope="session")
def ck_mapping(tmp_path_factory: pytest.TempPathFactory) -> Mapping:
    try:
        library = build_library(tmp_path_factory.mktemp("ck_fa"))
    except subprocess.CalledProcessError as e:
        pytest.fail(f"src/ck_fa/fmha_mapping.cpp does not compile:\n{e.stderr}")
    return Mapping(library)


@pytest.fixture
def ggml_ctx():
    """A ggml context with its own memory, for building FLASH_ATTN_EXT nodes and computing them on the CPU."""
    from pyllama90a.native._ffi import lib
    ctx = lib.ggml_init({"mem_size": 256 << 20, "mem_buffer": native_ffi.NULL, "no_alloc": False})
    assert ctx != native_ffi.NULL
    yield ctx
    lib.ggml_free(ctx)


