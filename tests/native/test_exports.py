"""Our shared libraries export their C API only (src/exports.map): no libstdc++ or other runtime symbols.

A library that exports its copies of libstdc++ members (template instantiations, stream and codecvt
members) can win symbol resolution over libstdc++ itself: the CUDA build crashed at model load when
numpy was imported first. `nm -D --defined-only` lists what each library exports.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

API_PREFIXES = ("ggml_", "gguf_", "llama_", "quantize_", "dequantize_", "PyInit_", "pyllama90a_")
# defined by the linker in every shared object, not by code
LINKER_SYMBOLS = {"_init", "_fini", "_edata", "_end", "__bss_start"}


def _library_dir() -> Path:
    # the libraries lie beside the cffi module (in an editable install that is not the source folder)
    from pyllama90a import _native

    return Path(_native.__file__).resolve().parent


def _shipped_libraries() -> list[Path]:
    libs = sorted(p for p in _library_dir().glob("*.so*") if p.is_file())
    assert any(p.name.startswith("libllama") for p in libs), f"no libllama in {_library_dir()}"
    return libs


def _exports(lib: Path) -> list[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True)
    return [line.split()[-1].split("@")[0] for line in out.stdout.splitlines() if line.strip()]


@pytest.mark.skipif(shutil.which("nm") is None, reason="binutils' nm is not installed")
@pytest.mark.parametrize("lib", _shipped_libraries(), ids=lambda p: p.name)
def test_library_exports_only_its_c_api(lib: Path) -> None:
    foreign = [s for s in _exports(lib) if not s.startswith(API_PREFIXES) and s not in LINKER_SYMBOLS]
    assert not foreign, f"{lib.name} exports {len(foreign)} symbols outside its C API, e.g. {foreign[:5]}"


@pytest.mark.skipif(shutil.which("nm") is None, reason="binutils' nm is not installed")
def test_no_library_exports_cxx_runtime_symbols() -> None:
    # mangled names of namespace std (St...), its streams (So, Si) and their typeinfo/vtables
    std = re.compile(r"^_Z(N|NK|T[VIS])?S[tdiosa]")
    leaked = {lib.name: [s for s in _exports(lib) if std.match(s)][:3] for lib in _shipped_libraries()}
    assert not any(leaked.values()), f"C++ runtime symbols exported: {leaked}"
