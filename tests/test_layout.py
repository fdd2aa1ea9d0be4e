"""The layout's rules that are not about imports (those are pyproject.toml's import-linter contracts, run by
tests/test_lint.py): a small package root, every package's modules listed in its docstring, the size rule, and
the compiled extension touched by the binding alone."""
from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pyllama90a"
BINDING = PACKAGE / "native"


def _packages() -> list[Path]:
    return sorted(p.parent for p in PACKAGE.rglob("__init__.py") if "__pycache__" not in p.parts)


def test_the_package_root_holds_the_public_face_and_the_entry_points_only() -> None:
    root = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert root == ["__init__.py", "__main__.py", "errors.py", "worker.py"], root


def test_every_package_lists_its_modules_in_its_docstring() -> None:
    """Each package's __init__ docstring names each of its modules and sub-packages on a line of its own
    (`    name: what it is` or `    name/: ...`), and names nothing that is not there: the folder's table of
    contents, kept true."""
    assert len(_packages()) > 15
    wrong = {}
    for package in _packages():
        first = ast.parse((package / "__init__.py").read_text()).body[0]
        assert isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant), package
        doc = str(first.value.value)  # (as written: ast.get_docstring would strip the indentation)
        listed = set(re.findall(r"^ {4}([A-Za-z_][A-Za-z0-9_]*/?):", doc, re.MULTILINE))
        present = {p.stem for p in package.glob("*.py") if p.name != "__init__.py"} | \
                  {f"{d.name}/" for d in package.iterdir() if (d / "__init__.py").is_file()}
        if listed != present:
            wrong[str(package.relative_to(PACKAGE.parent))] = {"not listed": sorted(present - listed),
                                                               "listed, absent": sorted(listed - present)}
    assert not wrong, wrong


def test_no_module_above_the_binding_exceeds_500_lines() -> None:
    """The project's size rule (issue 20): past 500 lines a module holds more than one concern. The binding
    (native/) mirrors llama.cpp's C API and is exempt; the generated stub _native.pyi is not a module."""
    sizes = {p: len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    over = {str(p.relative_to(PACKAGE)): n for p, n in sizes.items() if n > 500 and BINDING not in p.parents}
    assert sizes[PACKAGE / "core" / "model" / "model.py"] > 100  # (the walk found the package)
    assert not over, over


def test_only_the_binding_imports_the_compiled_extension() -> None:
    """`_native` is a compiled module, which import-linter cannot see (pyproject.toml says so): only native/
    may import it."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
            module = (node.module or "") if isinstance(node, ast.ImportFrom) else ""
            if any("_native" in n.split(".") for n in [*names, *module.split(".")]) and BINDING not in path.parents:
                offenders.append(str(path.relative_to(PACKAGE)))
    assert not offenders
