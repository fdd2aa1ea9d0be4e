"""The portable build's CPU variants are compiled without -march, so GCC tunes them "generic" and zeroed small
fixed-size arrays with `rep stos` (llamafile's f16 gemm tile accumulators: 10 % of f16 prefill on Zen 3, 0.94x a
native build). CMakeLists.txt gives GCC a memset/memcpy strategy of vector stores up to 4 KiB: no `rep stos` or
`rep movs` is left in a variant that GCC compiled (a native build tunes them away the same way)."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

import pyllama90a

VARIANTS = sorted(p for folder in pyllama90a.__path__ for p in Path(folder).glob("libggml-cpu-*.so"))

pytestmark = [
    pytest.mark.skipif(not VARIANTS, reason="not a portable build (no libggml-cpu-<variant>.so in the package)"),
    pytest.mark.skipif(shutil.which("objdump") is None or shutil.which("readelf") is None,
                       reason="binutils (objdump, readelf) not installed"),
]


def _compiled_by_gcc(library: Path) -> bool:
    comment = subprocess.run(["readelf", "-p", ".comment", str(library)], capture_output=True, text=True).stdout
    return "GCC:" in comment and "clang" not in comment


@pytest.mark.parametrize("library", VARIANTS, ids=lambda p: p.name)
def test_gcc_compiled_variants_have_no_rep_string_instructions(library: Path) -> None:
    if not _compiled_by_gcc(library):
        pytest.skip(f"{library.name} was not compiled by GCC")
    disassembly = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(library)], capture_output=True,
                                 text=True, check=True).stdout
    rep = [line for line in disassembly.splitlines() if "rep stos" in line or "rep movs" in line]
    assert not rep, f"{library.name}: {len(rep)} rep stos/movs, e.g. {rep[:3]}"
