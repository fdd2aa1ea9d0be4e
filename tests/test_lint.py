"""ruff over the repository's Python and mypy over the package (their settings are pyproject.toml's
[tool.ruff] and [tool.mypy]): a finding fails the run with the tool's own report. Skipped only where the tool
is not installed (both are in the `test` extra)."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ruff() -> list[str]:
    try:
        import ruff  # the pip package: its binary sits next to the interpreter's scripts
    except ImportError:
        ruff = None
    if ruff is not None:
        return [sys.executable, "-m", "ruff"]
    if shutil.which("ruff"):
        return ["ruff"]
    pytest.skip("ruff is not installed (pip install '.[test]')")


def test_ruff_finds_nothing() -> None:
    out = subprocess.run([*_ruff(), "check", "--no-cache", "--output-format", "concise", "."], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, f"ruff check found problems:\n{out.stdout}{out.stderr}"


def test_ruff_reads_the_projects_rules(tmp_path: Path) -> None:
    """The check above means something: with the project's configuration, ruff reports a planted defect."""
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nimport os\nfrom typing import Callable\n\nPAIRS = list(zip([1], [2]))\n\n\n"
                   "def f(g: Callable[[], int]):  # noqa: ANN201\n    try:\n        return g()\n    except Exception:\n"
                   "        return dict(two=eval('2'))\n")
    out = subprocess.run([*_ruff(), "check", "--no-cache", "--output-format", "concise",
                          "--config", str(ROOT / "pyproject.toml"), str(bad)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1, out.stdout + out.stderr
    # RUF100: a noqa for a rule that is not selected; I001: imports out of order; UP035: Callable from typing;
    # C408: dict() where a literal would do; B905: zip() that says nothing of unequal lengths
    for code in ("F401", "BLE001", "S307", "RUF100", "I001", "UP035", "C408", "B905"):
        assert code in out.stdout, out.stdout


def _mypy() -> list[str]:
    pytest.importorskip("mypy", reason="mypy is not installed (pip install '.[test]')")
    return [sys.executable, "-m", "mypy"]


def test_mypy_finds_nothing(tmp_path: Path) -> None:
    out = subprocess.run([*_mypy(), "--cache-dir", str(tmp_path / "cache")], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, f"mypy found problems:\n{out.stdout}{out.stderr}"


def test_mypy_reads_the_projects_settings(tmp_path: Path) -> None:
    """The check above means something: with the project's settings, mypy reports a planted type error."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f(x: int) -> str:\n    return x\n")
    out = subprocess.run([*_mypy(), "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir",
                          str(tmp_path / "cache"), str(bad)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "Incompatible return value type" in out.stdout, out.stdout + out.stderr


def test_mypy_is_strict_on_the_library_and_not_on_the_tooling(tmp_path: Path) -> None:
    """The per-module strict flags reach every library module (pyllama90a itself, its top-level modules and
    subpackages) and no tooling module: an unannotated function and a bare `dict` are errors in the first, not
    in the second."""
    code = "def f(x):\n    return x\n\n\ndef g() -> dict:\n    return {}\n"
    package = tmp_path / "pyllama90a"
    for folder in ("core", "core/model", "server", "server/routes", "native", "bench", "tools", "fuzz", "selftest"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
        (package / folder / "planted.py").write_text(code)
    (package / "__init__.py").write_text(code)
    for module in ("planted", "bench/depths", "bench/server", "bench/constrained", "bench/report"):
        (package / f"{module}.py").write_text(code)
    out = subprocess.run([*_mypy(), "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir",
                          str(tmp_path / "cache"), "-p", "pyllama90a"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 1, out.stdout + out.stderr
    for strict in ("__init__.py", "planted.py", "core/planted.py", "core/model/planted.py", "server/planted.py",
                   "server/routes/planted.py", "native/planted.py", "bench/planted.py"):
        for code_name in ("no-untyped-def", "type-arg"):
            assert any(line.startswith(f"pyllama90a/{strict}:") and f"[{code_name}]" in line
                       for line in out.stdout.splitlines()), (strict, out.stdout)
    for tooling in ("tools/", "fuzz/", "selftest/", "bench/depths.py", "bench/server.py", "bench/constrained.py",
                    "bench/report.py"):
        assert f"pyllama90a/{tooling}" not in out.stdout, out.stdout


def test_the_keyword_typeddicts_name_what_they_stand_for() -> None:
    """SamplingOptions and RequestOptions type **kwargs for mypy only (Unpack): their keys are SamplingParams'
    fields, and those with GenerationRequest.of's keywords, which BatchEngine.submit takes too."""
    import dataclasses
    import inspect

    from pyllama90a.core.engine.engine import BatchEngine
    from pyllama90a.core.generation.request import GenerationRequest, RequestOptions
    from pyllama90a.core.generation.sampling import SamplingOptions, SamplingParams

    fields = {f.name for f in dataclasses.fields(SamplingParams)}
    assert set(SamplingOptions.__annotations__) == fields
    for function in (GenerationRequest.of, BatchEngine.submit):
        keywords = {p.name for p in inspect.signature(function).parameters.values() if p.kind is p.KEYWORD_ONLY}
        assert set(RequestOptions.__annotations__) == keywords | fields, function


def test_the_installed_package_is_marked_typed() -> None:
    """py.typed (PEP 561) ships in the package, so that users' type checkers read its annotations."""
    import pyllama90a

    assert (Path(pyllama90a.__file__).parent / "py.typed").is_file()


def _lint_imports(cwd: Path, config: Path) -> subprocess.CompletedProcess[str]:
    """import-linter (the `test` extra) with the contracts of `config`, on the package found from `cwd`."""
    import importlinter  # noqa: F401  (a failure here, not a skip: the floors are checked in every run)

    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code, "--config", str(config), "--no-cache"], cwd=cwd,
                          capture_output=True, text=True, timeout=300, env={"PYTHONPATH": str(cwd), "PATH": ""})


def test_the_import_contracts_hold() -> None:
    """pyproject.toml's [tool.importlinter] contracts: the floors (services > core > native > errors), the
    library's sub-packages in their order, the server's layers, no cycle, _ffi private to native/."""
    out = _lint_imports(ROOT, ROOT / "pyproject.toml")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


@pytest.mark.parametrize(("module", "planted", "broken"), [
    # an upward import from the binding, hidden under TYPE_CHECKING: a type hint may not climb either
    ("native/batch.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..core.model import model\n",
     "floors"),
    ("core/gguf/header.py", "from ..engine import engine\n", "sub-packages"),
    ("server/protocol/body.py", "from .. import app\n", "the server"),
    ("core/model/memory_plan.py", "from . import model\n", "no import cycle"),  # model.py imports memory_plan
    ("server/app.py", "from ..native import _ffi\n", "private"),
])
def test_the_import_contracts_break_on_a_planted_import(tmp_path: Path, module: str, planted: str,
                                                        broken: str) -> None:
    """The check above means something: one import planted in a copy of the package breaks the contract named."""
    shutil.copytree(ROOT / "pyllama90a", tmp_path / "pyllama90a",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / "pyllama90a" / module
    target.write_text(target.read_text() + "\n" + planted)
    out = _lint_imports(tmp_path, tmp_path / "pyproject.toml")
    assert out.returncode != 0, out.stdout
    assert f"{broken}" in out.stdout.split("Broken contracts")[-1], out.stdout
