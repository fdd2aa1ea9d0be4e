"""README's four floors, enforced on the source: each module imports only from its floor and those below."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pyllama90a"

NATIVE = {"pyllama90a._native", "pyllama90a._ffi"}
BINDING = ("pyllama90a._ffi", "pyllama90a._log", "pyllama90a.native")
SERVICES = ("pyllama90a.server", "pyllama90a.tools", "pyllama90a.bench", "pyllama90a.bench_server",
            "pyllama90a.bench_constrained", "pyllama90a.bench_report", "pyllama90a.selftest", "pyllama90a.fuzz",
            "pyllama90a.__main__", "pyllama90a.synthetic")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Absolute names of the modules `path` imports (relative imports resolved; `from x import y` gives x.y too,
    y being possibly a submodule)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _under(name: str, prefixes: tuple[str, ...] | set[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _modules() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in PACKAGE.rglob("*.py")}


def test_only_the_binding_floor_touches_the_native_module() -> None:
    offenders = {m for m, imports in _modules().items() if not _under(m, BINDING) and any(_under(i, NATIVE) for i in imports)}
    assert not offenders


def test_the_core_imports_no_service() -> None:
    core = {m for m in _modules() if not _under(m, BINDING) and not _under(m, SERVICES) and m != "pyllama90a"}
    assert {"pyllama90a.model", "pyllama90a.engine", "pyllama90a.chat", "pyllama90a.constrained"} <= core
    assert not {m for m in core if m.startswith("pyllama90a.bench")}
    offenders = {m: sorted(i for i in _modules()[m] if _under(i, SERVICES)) for m in core}
    assert not {m: i for m, i in offenders.items() if i}


def test_the_server_imports_no_tool_and_no_bench() -> None:
    server = {m: imports for m, imports in _modules().items() if _under(m, ("pyllama90a.server",))}
    assert "pyllama90a.server.app" in server
    offenders = {m: sorted(i for i in imports if _under(i, ("pyllama90a.tools", "pyllama90a.bench")))
                 for m, imports in server.items()}
    assert not {m: i for m, i in offenders.items() if i}
