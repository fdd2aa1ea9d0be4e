"""ggml's AMX tile configuration survives the compiler (patch 0010).

GCC 12 dropped the stores into ggml's stack copy of the tile configuration (it does not treat
_tile_loadconfig as a read of its operand), so every tile got 0 rows and the first tile instruction
raised SIGILL on Intel Xeons with AMX. The patch loads the configuration from constant data.

This checks the machine code, so it runs on any x86-64 machine, AMX or not: the AMX kernels of the
patched tree are compiled for Sapphire Rapids with every C++ compiler found here, and every AMX build
of ggml's CPU backend installed in the package is read too. Each `ldtilecfg` must load a 64-byte
object from read-only data whose bytes are the configuration the kernels use. The run-time check on an
AMX CPU is tests/native/test_amx.py.
"""
from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# palette 1, start row 0; tiles 0-1 hold B (8 rows of 64 bytes), 2-3 A (16 x 32), 4-7 C (16 x 64)
TILE_ROWS = [8, 8, 16, 16, 16, 16, 16, 16] + [0] * 8
TILE_COLSB = [64, 64, 32, 32, 64, 64, 64, 64] + [0] * 8
EXPECTED_CONFIG = bytes([1, 0]) + bytes(14) + struct.pack("<16H", *TILE_COLSB) + bytes(TILE_ROWS)

pytestmark = pytest.mark.skipif(shutil.which("objdump") is None or sys.platform != "linux",
                                reason="needs binutils' objdump on Linux to read the machine code")

# "  1234:	c4 e2 78 49 05 ..	ldtilecfg 0x5d2(%rip)        # 1a00 <symbol>"
LDTILECFG = re.compile(r"ldtilecfg\s+(?P<operand>\S+)(?:\s+#\s+(?P<target>[0-9a-f]+))?")


def tile_config_loads(lib: Path) -> list[tuple[str, int | None]]:
    """(operand, target address or None) of every ldtilecfg in lib."""
    text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(lib)], capture_output=True, text=True,
                          check=True).stdout
    return [(m["operand"], int(m["target"], 16) if m["target"] else None) for m in LDTILECFG.finditer(text)]


def bytes_at(lib: Path, address: int, size: int) -> bytes:
    dump = subprocess.run(["objdump", "-s", f"--start-address={address:#x}", f"--stop-address={address + size:#x}",
                           str(lib)], capture_output=True, text=True, check=True).stdout
    data = b""
    for line in dump.splitlines():
        m = re.match(r"^\s*([0-9a-f]+)\s((?:[0-9a-f]{2,8}\s){1,4})", line + " ")
        if m and int(m[1], 16) >= address - 16:
            data += bytes.fromhex("".join(m[2].split()))
    return data[:size]


def assert_constant_tile_config(lib: Path) -> None:
    loads = tile_config_loads(lib)
    assert loads, f"{lib.name}: no ldtilecfg at all (the AMX kernels were not compiled in)"
    for operand, target in loads:
        assert operand.endswith("(%rip)") and target is not None, (
            f"{lib.name}: ldtilecfg {operand} loads the tile configuration from the stack or a register, "
            "not from constant data: a compiler may drop the stores that fill it (GCC 12 did: SIGILL)")
        assert bytes_at(lib, target, 64) == EXPECTED_CONFIG, (
            f"{lib.name}: the tile configuration at {target:#x} is {bytes_at(lib, target, 64).hex()}, "
            f"expected {EXPECTED_CONFIG.hex()}")


def compilers() -> list[str]:
    found = [c for c in ("g++", "clang++", "clang++-16", "clang++-19", "clang++-21") if shutil.which(c)]
    return found or ["g++"]


@pytest.fixture(scope="module")
def tree() -> Path:
    out = subprocess.run([sys.executable, str(ROOT / "vendor" / "prepare_source.py")], capture_output=True,
                         text=True, timeout=1800)
    if out.returncode != 0:
        pytest.skip("patched llama.cpp source not available:\n" + out.stderr[-2000:])
    return Path(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("cxx", compilers())
def test_amx_kernels_load_a_constant_tile_config(cxx, tree, tmp_path):
    if shutil.which(cxx) is None:
        pytest.skip(f"{cxx} not installed")
    ggml = tree / "ggml"
    lib = tmp_path / "amx-mmq.so"
    # a shared object (undefined symbols allowed) so that objdump resolves each rip-relative operand
    cmd = [cxx, "-std=c++17", "-O3", "-march=sapphirerapids", "-fPIC", "-shared", "-DNDEBUG",
           f"-I{ggml / 'include'}", f"-I{ggml / 'src'}", f"-I{ggml / 'src' / 'ggml-cpu'}",
           str(ggml / "src" / "ggml-cpu" / "amx" / "mmq.cpp"), "-o", str(lib)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if out.returncode != 0 and "sapphirerapids" in out.stderr:
        pytest.skip(f"{cxx} does not know -march=sapphirerapids")
    assert out.returncode == 0, out.stderr[-3000:]
    assert_constant_tile_config(lib)


def test_installed_amx_builds_load_a_constant_tile_config():
    # the libraries lie beside the cffi module (in an editable install that is not the source folder)
    from pyllama90a import _native

    package = Path(_native.__file__).resolve().parent
    amx_builds = [lib for lib in sorted(package.glob("libggml-cpu*.so")) if tile_config_loads(lib)]
    if not amx_builds:
        pytest.skip("no ggml CPU backend with AMX kernels in the package (a native build on a CPU without AMX)")
    for lib in amx_builds:
        assert_constant_tile_config(lib)
