#!/usr/bin/env python3
"""Prepare the Composable Kernel (CK) source of the CK FlashAttention build; print its root (last line).

The root holds include/ck_tile and example/ck_tile/01_fmha (fmha_fwd.hpp, generate.py). It is never
committed. In order of preference it comes from:
  1. PYLLAMA90A_CK_SRC=<dir>   a CK tree, or a flash-attn tree with csrc/composable_kernel (used in place:
                               CK is read, never patched, and the codegen writes elsewhere)
  2. PYLLAMA90A_CK_SRC=<file>  the pinned flash-attn sdist, e.g. fetched on another machine
  3. the pinned sdist fetched by name through pip's configured index
Sdists are checked against the sha256 in vendor/ck.toml and only the parts listed there are unpacked,
into PYLLAMA90A_CACHE (default ~/.cache/pyllama90a)/ck-<sha256 prefix>.

Why not `pip download`: it prepares the metadata of an sdist before saving it, and flash-attn's
setup.py imports torch. So this script asks pip's own package finder (the index, find-links and
certificates configured for pip) for the file's link and downloads it through pip's session.
"""
from __future__ import annotations

import hashlib
import logging
import os
import sys
import tarfile
import tempfile
import shutil
from pathlib import Path

VENDOR = Path(__file__).resolve().parent
sys.path.insert(0, str(VENDOR))
from prepare_source import PrepareError, cache_root, log, sha256_of, tomllib  # noqa: E402

MARKER = ".pyllama90a-prepared"


class FetchError(PrepareError):
    """The sdist could not be fetched (no index, no network, no such file): unlike a wrong digest,
    something a test may skip on."""


def load_pin() -> dict:
    return tomllib.loads((VENDOR / "ck.toml").read_text())["source"]


def how_to_provide(pin: dict) -> str:
    return (
        "Provide the CK source in one of these ways:\n"
        f"  - fetch {pin['sdist']} ({pin['package']}=={pin['version']}, sha256 {pin['sha256']}) on a machine\n"
        "    with access to the package index, e.g. `python vendor/prepare_ck.py` there, and set\n"
        f"    PYLLAMA90A_CK_SRC=/path/to/{pin['sdist']}\n"
        "  - or set PYLLAMA90A_CK_SRC=/path/to/composable_kernel (a tree with include/ck_tile and\n"
        "    example/ck_tile/01_fmha)"
    )


def find_sdist_url(pin: dict) -> tuple[str, object]:
    """The pinned sdist's URL and pip's HTTP session, from pip's package finder and configuration
    (no metadata build)."""
    try:
        from packaging.specifiers import SpecifierSet
        from pip._internal.commands import create_command
    except ImportError as e:
        raise FetchError(f"pip is not importable ({e})")
    # pip warns about find-links/index entries without this project: noise, not errors
    logging.getLogger("pip").setLevel(logging.ERROR)
    try:
        command = create_command("download")
        options, _ = command.parse_args(["--no-deps", "--no-binary", pin["package"],
                                         "--retries", "1", "--timeout", "15", f"{pin['package']}=={pin['version']}"])
        session = command._build_session(options)
        finder = command._build_package_finder(options=options, session=session)
        found = finder.find_best_candidate(pin["package"], SpecifierSet(f"=={pin['version']}"))
        links = [c.link for c in found.iter_applicable() if c.link.filename == pin["sdist"]]
    except (AttributeError, TypeError) as e:
        # pip's internals are no API: name what broke instead of a traceback
        raise FetchError(f"this pip ({_pip_version()}) lacks the package finder calls used here: {e}")
    except Exception as e:  # network errors surface from pip in many types
        raise FetchError(f"pip could not look up {pin['package']}=={pin['version']}: {e}")
    if not links:
        raise FetchError(f"pip's index has no {pin['sdist']}")
    link = links[0]
    if link.hash_name == "sha256" and link.hash != pin["sha256"]:
        raise PrepareError(f"the index lists {pin['sdist']} with sha256 {link.hash}, expected {pin['sha256']}")
    return link.url_without_fragment, session


def _pip_version() -> str:
    try:
        import pip
        return pip.__version__
    except ImportError:
        return "?"


def fetch_sdist(pin: dict) -> Path:
    downloads = cache_root() / "downloads"
    target = downloads / pin["sdist"]
    if target.is_file() and sha256_of(target) == pin["sha256"]:
        return target
    downloads.mkdir(parents=True, exist_ok=True)
    log(f"fetching {pin['package']}=={pin['version']} (sdist, for CK) through pip's index ...")
    url, session = find_sdist_url(pin)
    fd, partial = tempfile.mkstemp(prefix=pin["sdist"] + ".", dir=downloads)
    try:
        digest = hashlib.sha256()
        with os.fdopen(fd, "wb") as out:
            try:
                response = session.get(url, stream=True, timeout=60)
                response.raise_for_status()
                for chunk in response.iter_content(1 << 20):
                    digest.update(chunk)
                    out.write(chunk)
            except Exception as e:
                raise FetchError(f"downloading {pin['sdist']} failed: {e}")
        if digest.hexdigest() != pin["sha256"]:
            raise PrepareError(f"downloaded {pin['sdist']} has sha256 {digest.hexdigest()}, "
                               f"expected {pin['sha256']}; refusing it")
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    return target


def is_ck_tree(path: Path) -> bool:
    return (path / "include" / "ck_tile" / "core.hpp").is_file() and \
        (path / "example" / "ck_tile" / "01_fmha" / "generate.py").is_file()


def ck_tree_in(path: Path) -> Path:
    """A CK tree given directly, or the one inside a flash-attn tree."""
    for candidate in (path, path / "csrc" / "composable_kernel"):
        if is_ck_tree(candidate):
            return candidate
    raise PrepareError(f"PYLLAMA90A_CK_SRC={path} holds no CK tree "
                       "(include/ck_tile/core.hpp and example/ck_tile/01_fmha/generate.py)")


def unpack_parts(sdist: Path, pin: dict, dest: Path) -> None:
    prefix = pin["subdir"].rstrip("/") + "/"
    wanted = tuple(prefix + part.rstrip("/") + "/" for part in pin["parts"])
    with tarfile.open(sdist) as tar:
        members = []
        for m in tar.getmembers():
            if m.name.startswith(wanted) and (m.isfile() or m.isdir()):
                m.name = m.name[len(prefix):]
                members.append(m)
        kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(dest, members=members, **kwargs)
    if not is_ck_tree(dest):
        raise PrepareError(f"{sdist} has no CK tree under {pin['subdir']}")


def verify(sdist: Path, pin: dict) -> None:
    got = sha256_of(sdist)
    if got != pin["sha256"]:
        raise PrepareError(f"{sdist} has sha256 {got}, expected {pin['sha256']} "
                           f"({pin['package']}=={pin['version']}); refusing to build from it")


def prepare() -> Path:
    pin = load_pin()
    local = os.environ.get("PYLLAMA90A_CK_SRC")
    if local and Path(local).is_dir():
        return ck_tree_in(Path(local))
    if local and not Path(local).is_file():
        raise PrepareError(f"PYLLAMA90A_CK_SRC={local} does not exist.\n" + how_to_provide(pin))
    dest = cache_root() / f"ck-{pin['sha256'][:12]}"
    stamp = f"{pin['sha256']} {' '.join(pin['parts'])}"
    marker = dest / MARKER
    if marker.is_file() and marker.read_text().strip() == stamp:
        return dest
    try:
        sdist = Path(local) if local else fetch_sdist(pin)
    except FetchError as e:
        raise FetchError(f"{e}\n{how_to_provide(pin)}")
    verify(sdist, pin)
    dest.parent.mkdir(parents=True, exist_ok=True)
    # unpack beside the destination and rename: a concurrent or interrupted run never leaves half a tree
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    try:
        unpack_parts(sdist, pin, tmp)
        (tmp / MARKER).write_text(stamp + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def main() -> int:
    try:
        print(prepare())
    except PrepareError as e:
        log(f"ERROR: {e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
