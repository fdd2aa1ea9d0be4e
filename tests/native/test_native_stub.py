"""pyllama90a/_native.pyi, the typed stub through which mypy checks the binding's calls into the cffi extension,
is what src/native_stub.py writes from the declarations the extension is built from, and names exactly what the
built extension's `lib` holds."""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STUB = ROOT / "pyllama90a" / "_native.pyi"


def test_the_stub_is_current() -> None:
    sys.path.insert(0, str(ROOT / "src"))
    try:
        import native_stub
    finally:
        sys.path.remove(str(ROOT / "src"))
    assert STUB.read_text() == native_stub.stub_text(), "run: python src/native_stub.py"


def test_the_stub_names_what_lib_holds() -> None:
    from pyllama90a.native._ffi import lib

    lib_part = STUB.read_text().split("\nclass _Lib:\n", 1)[1]
    stubbed = set(re.findall(r"^    (?:def )?(\w+)", lib_part, re.M))
    assert stubbed == set(dir(lib))
