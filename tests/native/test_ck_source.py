"""vendor/prepare_ck.py: the CK source comes from the pinned flash-attn sdist, verified, partly unpacked."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from support.ck_tree import ck_root, prepare_ck_module  # noqa: F401  (ck_root is a fixture)

prepare_ck = prepare_ck_module()
PIN = prepare_ck.load_pin()


@pytest.fixture
def pinned_sdist(ck_root: Path) -> Path:
    """The verified sdist the session's tree came from (absent when PYLLAMA90A_CK_SRC names a tree)."""
    local = os.environ.get("PYLLAMA90A_CK_SRC")
    path = Path(local) if local and Path(local).is_file() else prepare_ck.cache_root() / "downloads" / PIN["sdist"]
    if not path.is_file():
        pytest.skip("PYLLAMA90A_CK_SRC names a CK tree: no sdist to unpack")
    return path


@pytest.fixture
def clean_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PYLLAMA90A_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("PYLLAMA90A_CK_SRC", raising=False)
    return tmp_path / "cache"


def assert_only_listed_parts(root: Path) -> None:
    assert (root / "include" / "ck_tile" / "ops" / "fmha.hpp").is_file()
    for name in ("fmha_fwd.hpp", "generate.py", "mask.hpp", "bias.hpp", "codegen/ops/fmha_fwd.py"):
        assert (root / "example" / "ck_tile" / "01_fmha" / name).is_file(), name
    assert sorted(p.name for p in root.iterdir()) == [prepare_ck.MARKER, "example", "include"]
    assert [p.name for p in (root / "include").iterdir()] == ["ck_tile"]  # not the old ck/ library
    assert [p.name for p in (root / "example").iterdir()] == ["ck_tile"]
    assert [p.name for p in (root / "example" / "ck_tile").iterdir()] == ["01_fmha"]


def test_fetch_by_name_through_pip_into_a_clean_cache(clean_cache: Path):
    try:
        root = prepare_ck.prepare()
    except prepare_ck.FetchError as e:
        pytest.skip(f"the flash-attn sdist could not be fetched: {e}")
    assert root == clean_cache / f"ck-{PIN['sha256'][:12]}"
    assert prepare_ck.sha256_of(clean_cache / "downloads" / PIN["sdist"]) == PIN["sha256"]
    assert_only_listed_parts(root)
    # a second call reuses the tree: it leaves a file we drop into it alone
    (root / "sentinel").write_text("kept")
    assert prepare_ck.prepare() == root and (root / "sentinel").read_text() == "kept"


def test_a_given_sdist_is_verified_and_unpacked(pinned_sdist: Path, clean_cache: Path, monkeypatch):
    monkeypatch.setenv("PYLLAMA90A_CK_SRC", str(pinned_sdist))
    assert_only_listed_parts(prepare_ck.prepare())


def test_a_tampered_sdist_is_refused(pinned_sdist: Path, clean_cache: Path, tmp_path: Path, monkeypatch):
    tampered = tmp_path / PIN["sdist"]
    data = bytearray(pinned_sdist.read_bytes())
    data[len(data) // 2] ^= 0x01
    tampered.write_bytes(bytes(data))
    monkeypatch.setenv("PYLLAMA90A_CK_SRC", str(tampered))
    with pytest.raises(prepare_ck.PrepareError, match="sha256") as refused:
        prepare_ck.prepare()
    assert not isinstance(refused.value, prepare_ck.FetchError)  # a wrong digest is never a skip
    assert not any(clean_cache.glob("ck-*"))


def test_a_flash_attn_or_ck_tree_is_used_in_place(ck_root: Path, tmp_path: Path, monkeypatch):
    flash_attn_tree = tmp_path / "flash-attention"
    (flash_attn_tree / "csrc").mkdir(parents=True)
    (flash_attn_tree / "csrc" / "composable_kernel").symlink_to(ck_root)
    monkeypatch.setenv("PYLLAMA90A_CK_SRC", str(flash_attn_tree))
    assert prepare_ck.prepare() == flash_attn_tree / "csrc" / "composable_kernel"
    monkeypatch.setenv("PYLLAMA90A_CK_SRC", str(ck_root))
    assert prepare_ck.prepare() == ck_root


@pytest.mark.parametrize("kind", ["empty dir", "missing path"])
def test_a_wrong_local_source_names_the_problem(kind: str, tmp_path: Path, monkeypatch):
    path = tmp_path / "ck"
    if kind == "empty dir":
        path.mkdir()
    monkeypatch.setenv("PYLLAMA90A_CK_SRC", str(path))
    with pytest.raises(prepare_ck.PrepareError, match="holds no CK tree" if kind == "empty dir" else "does not exist"):
        prepare_ck.prepare()


def test_the_script_prints_the_tree_on_its_last_line(ck_root: Path):
    import subprocess
    import sys
    out = subprocess.run([sys.executable, str(prepare_ck.VENDOR / "prepare_ck.py")],
                         capture_output=True, text=True, check=True).stdout
    assert Path(out.strip().splitlines()[-1]) == ck_root
