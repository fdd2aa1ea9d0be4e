"""README's four floors, enforced on the source: each module imports only from its floor and those below."""
from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pyllama90a"

NATIVE = {"pyllama90a._native", "pyllama90a._ffi"}
BINDING = ("pyllama90a._ffi", "pyllama90a._log", "pyllama90a.native")
SERVICES = ("pyllama90a.server", "pyllama90a.tools", "pyllama90a.bench", "pyllama90a.bench_server",
            "pyllama90a.bench_constrained", "pyllama90a.bench_report", "pyllama90a.bench_batched",
            "pyllama90a.bench_modes", "pyllama90a.selftest", "pyllama90a.fuzz",
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
    offenders = {m for m, imports in _modules().items()
                 if not _under(m, BINDING) and any(_under(i, NATIVE) for i in imports)}
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


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            step = next(successors, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(graph[step]))))
                elif step in on_stack:
                    low[node] = min(low[node], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_even_under_type_checking() -> None:
    """ast.walk sees imports under `if TYPE_CHECKING:` too: a type hint may not close a circle either (take a
    Protocol, as chat.ChatModel and constrained.vocab.HasWeights do). An import of an enclosing package is not
    an edge: `from . import sibling` names the sibling module, which _imports records on its own."""
    modules = _modules()
    graph = {m: {i for i in imports if i in modules and i != m and not m.startswith(i + ".") and i != "pyllama90a"}
             for m, imports in modules.items()}
    assert _cycles(graph) == []
    # sampling.py imported native/sampler.py for one constant, and the sampler imports sampling.py back for a hint:
    # the check finds that circle
    graph["pyllama90a.sampling"].add("pyllama90a.native.sampler")
    assert _cycles(graph) == [["pyllama90a.native.sampler", "pyllama90a.sampling"]]


def test_no_module_above_the_binding_exceeds_500_lines() -> None:
    """The project's size rule (issue 20): past 500 lines a module holds more than one concern. The binding floor
    (native/, _ffi) mirrors llama.cpp's C API and is exempt; the generated stub _native.pyi is not a module."""
    sizes = {_module_name(p): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    over = {name: n for name, n in sizes.items() if n > 500 and not _under(name, BINDING)}
    assert sizes["pyllama90a.model"] > 100  # (the walk found the package)
    assert not over, over
