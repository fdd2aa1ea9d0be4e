"""Write pyllama90a/_native.pyi, the typed stub of the cffi extension, from the declarations build_ffi.py
compiles (src/decl/*.h): every function of `lib` with its parameter and result types, every constant as an int,
and the parts of `ffi` the binding uses. C types map to Python ones as cffi converts them: integers and enums
to int, floating point to float, _Bool to bool, pointers and structs to CData (a char pointer parameter also
takes bytes; any pointer parameter takes None, cffi's NULL). tests/native/test_native_stub.py checks the stub is
current. Usage: python src/native_stub.py (from the repository root)
"""
from __future__ import annotations

import sys
from pathlib import Path

from cffi import model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_ffi import make_ffi

ROOT = Path(__file__).resolve().parents[1]
STUB = ROOT / "pyllama90a" / "_native.pyi"

HEADER = '''"""Typed stub of the cffi extension pyllama90a._native, written by src/native_stub.py from src/decl/*.h:
regenerate it rather than editing it."""
from collections.abc import Callable
from typing import Any, TypeVar

_F = TypeVar("_F", bound=Callable[..., Any])

class CData:
    """A C value of cffi: a pointer, an array, a struct (fields and items are read and written as Python
    values) or a function pointer (called with Python values, e.g. one ffi.cast from a proc address)."""
    def __call__(self, *args: Any) -> Any: ...
    def __getattr__(self, name: str) -> Any: ...
    def __setattr__(self, name: str, value: Any) -> None: ...
    def __getitem__(self, index: Any) -> Any: ...
    def __setitem__(self, index: Any, value: Any) -> None: ...
    def __add__(self, offset: int) -> CData: ...
    def __len__(self) -> int: ...
    def __bool__(self) -> bool: ...

class CBuffer:
    """ffi.buffer's view of C memory: a buffer (memoryview, numpy.frombuffer take it) of bytes."""
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __getitem__(self, index: int | slice) -> bytes: ...
    def __setitem__(self, index: int | slice, value: bytes) -> None: ...
    def __len__(self) -> int: ...

class _FFI:
    NULL: CData
    def new(self, cdecl: str, init: Any = ...) -> CData: ...
    def cast(self, cdecl: str, value: Any) -> CData: ...
    def string(self, cdata: CData, maxlen: int = ...) -> bytes: ...
    def unpack(self, cdata: CData, length: int) -> Any: ...
    def buffer(self, cdata: CData, size: int = ...) -> CBuffer: ...
    def from_buffer(self, cdecl: Any, python_buffer: Any = ..., require_writable: bool = ...) -> CData: ...
    def gc(self, cdata: CData, destructor: Callable[[CData], object] | None, size: int = ...) -> CData: ...
    def def_extern(self, name: str = ..., error: Any = ..., onerror: Any = ...) -> Callable[[_F], _F]: ...
    def sizeof(self, cdecl: str | CData) -> int: ...
    def typeof(self, cdecl: str | CData) -> Any: ...
    def addressof(self, cdata: CData, *fields: str | int) -> CData: ...

'''


def _python_type(t: model.BaseTypeByIdentity, parameter: bool) -> str:
    if isinstance(t, model.VoidType):
        return "None"
    if isinstance(t, model.EnumType):
        return "int"
    if isinstance(t, model.PrimitiveType):
        if t.name == "_Bool":
            return "bool"
        if t.is_float_type():
            return "float"
        if t.name == "char":
            return "bytes"
        return "int"
    if isinstance(t, model.PointerType):
        if not parameter:
            return "CData"
        char = isinstance(t.totype, model.PrimitiveType) and t.totype.name == "char"
        return "bytes | CData | None" if char else "CData | None"
    if isinstance(t, model.StructOrUnion) and parameter:
        return "CData | dict[str, Any]"  # a struct by value: cffi also takes a dict of its fields
    return "CData"  # structs, arrays, function pointers


def stub_text() -> str:
    declarations = make_ffi()._parser._declarations
    functions, constants = [], set()
    for key, (ctype, _quals) in declarations.items():
        kind, _, name = key.partition(" ")
        if kind in ("function", "extern_python_plus_c"):
            params = ", ".join(f"a{i}: {_python_type(a, True)}" for i, a in enumerate(ctype.args))
            params = "self" + (f", {params}" if params else "") + (", *args: Any" if ctype.ellipsis else "")
            functions.append(f"    def {name}({params}) -> {_python_type(ctype.result, False)}: ...")
        elif kind == "macro":
            constants.add(name)
        elif isinstance(ctype, model.EnumType):  # `enum x {...}` and `typedef enum {...} x` alike
            constants.update(ctype.enumerators)
    lines = [HEADER, "class _Lib:"]
    lines += [f"    {name}: int" for name in sorted(constants)]
    lines += sorted(functions)
    return "\n".join(lines) + "\n\nffi: _FFI\nlib: _Lib\n"


if __name__ == "__main__":
    STUB.write_text(stub_text())
