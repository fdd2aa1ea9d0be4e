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


def _declared(statements: list[ast.stmt]) -> list[str]:
    """The names a class body's statements declare: annotated or assigned attributes, methods."""
    names = []
    for node in statements:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
    return names


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_no_class_declares_another_class_s_private_members() -> None:
    """Issue 35: pieces split off a host by line count reached back into it (a mixin re-declared Model's private
    members under TYPE_CHECKING and ran on them; Protocols stood in for the engine's private classes). What a
    class uses of another is the other's public face: a TYPE_CHECKING block in a class body declares dunders only
    (e.g. __dataclass_fields__), and a Protocol declares no private member."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        for cls in (n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.ClassDef)):
            protocol = any(ast.unparse(base).split("[")[0].split(".")[-1] == "Protocol" for base in cls.bases)
            borrowed = [n for n in _declared(cls.body) if protocol and _private(n)]
            for node in cls.body:
                if isinstance(node, ast.If) and ast.unparse(node.test).split(".")[-1] == "TYPE_CHECKING":
                    borrowed += [n for n in _declared(node.body) if _private(n)]
            if borrowed:
                offenders.append(f"{path.relative_to(PACKAGE)}: {cls.name} declares {', '.join(borrowed)}")
    assert not offenders, offenders
