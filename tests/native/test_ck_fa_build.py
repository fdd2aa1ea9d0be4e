"""The CK FlashAttention build pieces that can run without ROCm: cmake/ck_fa.cmake's configure-time step
(CK fetched, CK's codegen run, sources handed to CMake), its refusal without HIP, the HIP glue's field
copies, and patch 0009 staying inert in builds without -DPYLLAMA90A_CK_FA=ON."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from support.ck_mapping import struct_fields
from support.ck_tree import ck_root  # noqa: F401  (fixture)

pytestmark = pytest.mark.slow  # (the test tier: tests/conftest.py): it configures and builds a tree

REPO = Path(__file__).resolve().parents[2]
CMAKE = shutil.which("cmake")
needs_cmake = pytest.mark.skipif(CMAKE is None, reason="cmake is not installed")


def configure(tmp_path: Path, body: str, *defines: str) -> subprocess.CompletedProcess:
    """Configure a compiler-less CMake project that includes cmake/ck_fa.cmake, then runs body."""
    (tmp_path / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.21)\nproject(ck_fa_probe NONE)\n"
        f'set(Python_EXECUTABLE "{sys.executable}")\n'
        f'include("{REPO}/cmake/ck_fa.cmake")\n{body}\n')
    return subprocess.run([CMAKE, "-S", str(tmp_path), "-B", str(tmp_path / "build"), *defines],
                          capture_output=True, text=True, timeout=300)


@needs_cmake
def test_configure_step_generates_the_instances_for_cmake(ck_root: Path, tmp_path: Path):
    done = configure(tmp_path, 'pyllama90a_ck_fmha_generate("${CMAKE_BINARY_DIR}/gen" ck_dir sources)\n'
                               'file(WRITE "${CMAKE_BINARY_DIR}/result.txt" "${ck_dir}\\n${sources}")')
    assert done.returncode == 0, done.stderr
    ck_dir, sources = (tmp_path / "build" / "result.txt").read_text().split("\n", 1)
    assert Path(ck_dir) == ck_root
    sources = [Path(p) for p in sources.split(";")]
    assert len(sources) == 17 and all(p.is_file() and p.parent == tmp_path / "build" / "gen" for p in sources)
    assert {p.name for p in sources} >= {"fmha_fwd_api.cpp"}


@needs_cmake
def test_the_option_without_hip_stops_the_configure(tmp_path: Path):
    done = configure(tmp_path, "", "-DPYLLAMA90A_CK_FA=ON")
    assert done.returncode != 0 and "-DGGML_HIP=ON" in done.stderr


@needs_cmake
def test_the_option_off_leaves_the_build_alone(tmp_path: Path):
    done = configure(tmp_path, 'if(TARGET pyllama90a_ck_fmha)\nmessage(FATAL_ERROR "built")\nendif()')
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "build" / "ck_fmha").exists()


def mirror_fields(struct: str) -> list[str]:
    return [f for _, f in struct_fields((REPO / "src" / "ck_fa" / "fmha_args.h").read_text(), struct)]


@pytest.mark.parametrize("struct,target", [("pyllama90a_fmha_fwd_args", "a"), ("pyllama90a_fmha_fwd_traits", "t")])
def test_the_glue_copies_every_mirror_field_in_order(struct: str, target: str):
    glue = (REPO / "src" / "ck_fa" / "ck_fa_hip.cpp").read_text()
    copied = re.findall(rf"^\s*{target}\.(\w+) = .*\bm\.(\w+)\b", glue, re.M)
    assert all(dst == src for dst, src in copied)
    assert [dst for dst, _ in copied] == mirror_fields(struct)


def test_patch_0009_adds_nothing_to_ggml_outside_its_build_option():
    patch = (REPO / "vendor" / "patches" / "0009-ck-flash-attn-dispatch-gfx90a.patch").read_text()
    # its fattn.cu part (its other part only marks FLASH_ATTN_EXT nodes in src/llama-attn.cpp)
    fattn = patch[patch.index("diff --git a/ggml/src/ggml-cuda/fattn.cu"):]
    fattn = fattn[:fattn.index("\ndiff --git") if "\ndiff --git" in fattn else len(fattn)]
    hunks = fattn[fattn.index("\n@@"):]
    depth = 0
    for line in hunks.splitlines():
        if not line.startswith("+"):
            assert depth == 0  # context lines between our blocks are ggml's own
            continue
        added = line[1:].strip()
        if added.startswith("#ifdef PYLLAMA90A_CK_FA"):
            depth += 1
        elif added.startswith("#endif"):
            depth -= 1
        else:
            assert depth == 1 or added == "", added
    assert depth == 0 and fattn.count("#ifdef PYLLAMA90A_CK_FA") == 2
