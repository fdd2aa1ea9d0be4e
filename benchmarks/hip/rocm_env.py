#!/usr/bin/env python3
"""A ROCm 6.4 build environment for gfx90a on any Debian-family machine: a Debian-unstable chroot with the
ROCm packages pinned by version, cached outside the repository, and the pyllama90a wheel built in it.

  python3 benchmarks/hip/rocm_env.py create            # (or reuse) the chroot; about 2-4 min, 5.5 GB
  python3 benchmarks/hip/rocm_env.py wheel [--out DIR]  # the gfx90a wheel (ggml-hip + our patches + CK FA)
  python3 benchmarks/hip/rocm_env.py run -- CMD ...     # any command in it, the repository at /src
  python3 benchmarks/hip/rocm_env.py path               # print the chroot's folder if it is ready (else exit 1)

Why a chroot: ggml-hip needs ROCm/HIP >= 6.1 (hip_bf16.h, hip_fp8.h, hipBLAS 6); Debian 12 has HIP 5.2.3 and
Debian 13 5.7.1, while Debian's unstable suite carries ROCm 6.4 built with clang 21. Debian's own archive is
the one package source every machine here reaches, so the chroot is made with debootstrap from the mirror
this machine's apt already uses (or --mirror / PYLLAMA90A_DEBIAN_MIRROR). Unstable moves: when a pinned
version has left it, `create` fails and names the packages; bump PINS after re-running the HIP checks
(tests/native/test_hip_build.py), or point --mirror at a dated snapshot of the archive.

Needs root (debootstrap, mount, chroot). The chroot lives in $PYLLAMA90A_HOME/rocm-sid (default
~/.cache/pyllama90a/rocm-sid); that cache folder is bound into it, so the pinned llama.cpp and CK sources are
fetched once for both builds.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SUITE = "sid"
# what ggml-hip, the CK instances and the wheel are built with (the versions the committed reports name)
PINS = {
    "hipcc": "7.0.2+dfsg-3",                 # the HIP compiler driver, over clang 21
    "clang-21": "1:21.1.8-14",
    "llvm-21": "1:21.1.8-14",                # llvm-objdump / llvm-readelf / clang-offload-bundler for the reports
    "rocm-device-libs-21": "7.0.2+dfsg-3",
    "libamdhip64-dev": "6.4.3-5",            # HIP runtime 6.4
    "libhipblas-dev": "6.4.4-1",
    "librocblas-dev": "6.4.4-4",
}
# unpinned: the build tools (their versions do not change the code objects) and what the wheel build needs
TOOLS = ["cmake", "make", "ninja-build", "python3", "python3-venv", "python3-dev", "ca-certificates", "git"]
STAMP = "etc/pyllama90a-rocm.json"
# the compilers ggml-hip and the CK instances are built with (clang 21 for host and device code)
BUILD_ENV = {"CC": "clang-21", "CXX": "clang++-21", "HIPCXX": "clang++-21", "HIP_PLATFORM": "amd"}
CMAKE_ARGS = "-DGGML_HIP=ON -DAMDGPU_TARGETS=gfx90a -DPYLLAMA90A_CK_FA=ON"
CACHE_IN_CHROOT = "/root/.cache/pyllama90a"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
CA_IN_CHROOT = "etc/pyllama90a-host-ca.crt"  # the host's trust store (a proxy's CA included) for pip inside
SRC_IN_CHROOT = "/src"


def cache_home() -> Path:
    return Path(os.environ.get("PYLLAMA90A_HOME") or Path.home() / ".cache" / "pyllama90a")


def default_dir() -> Path:
    return cache_home() / "rocm-sid"


def log(msg: str) -> None:
    print(f"rocm_env: {msg}", file=sys.stderr, flush=True)


def host_mirror() -> str:
    """The Debian mirror this machine's apt uses (deb822 or one-line sources)."""
    env = os.environ.get("PYLLAMA90A_DEBIAN_MIRROR")
    if env:
        return env
    sources = [*sorted(Path("/etc/apt/sources.list.d").glob("*.sources")), Path("/etc/apt/sources.list")]
    for path in sources:
        if not path.is_file():
            continue
        for line in path.read_text().splitlines():
            words = line.split()
            if words[:1] == ["URIs:"] and len(words) > 1 and "security" not in words[1]:
                return words[1]
            if words[:1] == ["deb"] and len(words) > 2 and "security" not in line:
                return next(w for w in words[1:] if "://" in w)
    raise SystemExit("rocm_env: no Debian mirror in /etc/apt; give --mirror or PYLLAMA90A_DEBIAN_MIRROR")


def installed_versions(chroot: Path, packages: list[str]) -> dict[str, str]:
    out = subprocess.run(["chroot", str(chroot), "dpkg-query", "-W", "-f", "${Package} ${Version}\\n", *packages],
                         capture_output=True, text=True)
    return dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)


def ready(chroot: Path) -> bool:
    stamp = chroot / STAMP
    return stamp.is_file() and json.loads(stamp.read_text()).get("pins") == PINS


def create(chroot: Path, mirror: str) -> None:
    if ready(chroot):
        log(f"reusing {chroot}")
        return
    partial = chroot.with_name(chroot.name + ".partial")
    if not (partial / "usr" / "bin" / "apt-get").is_file():
        if shutil.which("debootstrap") is None:  # (a fresh machine has none: say so, not a traceback)
            raise SystemExit("rocm_env: no debootstrap here; apt-get install -y debootstrap, then create again")
        shutil.rmtree(partial, ignore_errors=True)
        log(f"debootstrap {SUITE} into {partial} (about 2-4 minutes, 5.5 GB)")
        subprocess.run(["debootstrap", "--variant=minbase", "--include=" + ",".join([*PINS, *TOOLS]),
                        SUITE, str(partial), mirror], check=True)
    have = installed_versions(partial, list(PINS))
    wrong = {name: version for name, version in PINS.items() if have.get(name) != version}
    if wrong:
        log(f"installing the pinned versions of {', '.join(wrong)}")
        with mounted(partial):
            chrooted(partial, ["apt-get", "update"])
            proc = chrooted(partial, ["apt-get", "install", "-y", "--no-install-recommends", "--allow-downgrades",
                                      *[f"{name}={version}" for name, version in wrong.items()]], check=False)
        if proc.returncode != 0:
            raise SystemExit(f"rocm_env: {SUITE} no longer has {', '.join(f'{n} {v}' for n, v in wrong.items())}"
                             f" (it has {', '.join(f'{n} {have.get(n)}' for n in wrong)}); update PINS after"
                             f" re-running tests/native/test_hip_build.py, or use a dated snapshot with --mirror")
    (partial / STAMP).write_text(json.dumps({"suite": SUITE, "pins": PINS}, indent=1) + "\n")
    partial.rename(chroot)
    log(f"ready: {chroot}")


@contextlib.contextmanager
def mounted(chroot: Path, binds: dict[str, Path] | None = None) -> Iterator[None]:
    """/proc, /dev and the given host folders bound into the chroot for one block; DNS and trusted CAs from the
    host."""
    targets = {"/proc": Path("/proc"), "/dev": Path("/dev"), **(binds or {})}
    done: list[Path] = []
    try:
        for inside, outside in targets.items():
            where = chroot / inside.lstrip("/")
            where.mkdir(parents=True, exist_ok=True)
            subprocess.run(["mount", "--bind", str(outside), str(where)], check=True)
            done.append(where)
        shutil.copyfile("/etc/resolv.conf", chroot / "etc" / "resolv.conf")
        if HOST_CA_BUNDLE.is_file():
            shutil.copyfile(HOST_CA_BUNDLE, chroot / CA_IN_CHROOT)
        yield
    finally:
        for where in reversed(done):
            subprocess.run(["umount", "-l", str(where)], check=False)


def chrooted(chroot: Path, command: list[str], check: bool = True, env: dict[str, str] | None = None,
             cwd: str = "/") -> subprocess.CompletedProcess:
    base = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root",
            "LANG": "C.UTF-8", "DEBIAN_FRONTEND": "noninteractive"}
    if (chroot / CA_IN_CHROOT).is_file():
        ca = "/" + CA_IN_CHROOT
        base.update(SSL_CERT_FILE=ca, PIP_CERT=ca, REQUESTS_CA_BUNDLE=ca)
    return subprocess.run(["chroot", str(chroot), "sh", "-c", 'cd "$0" && exec "$@"', cwd, *command],
                          env={**base, **(env or {})}, check=check)


def run_in(chroot: Path, command: list[str], env: dict[str, str] | None = None, cwd: str = SRC_IN_CHROOT) -> int:
    if not ready(chroot):
        raise SystemExit(f"rocm_env: no ready chroot at {chroot}: run `{sys.argv[0]} create` first")
    cache_home().mkdir(parents=True, exist_ok=True)
    with mounted(chroot, {SRC_IN_CHROOT: ROOT, CACHE_IN_CHROOT: cache_home()}):
        return chrooted(chroot, command, check=False, env={**BUILD_ENV, **(env or {})}, cwd=cwd).returncode


def wheel(chroot: Path, out: str) -> int:
    """pip wheel of this checkout inside the chroot, with ggml-hip for gfx90a and CK's FlashAttention.
    The build folder is the checkout's build/<wheel tag> (git-ignored), so a second run is incremental."""
    script = (f"python3 -m venv /opt/pyl-build && /opt/pyl-build/bin/pip install -q --upgrade pip && "
              f"/opt/pyl-build/bin/pip wheel -v --no-deps -w {out} {SRC_IN_CHROOT}")
    return run_in(chroot, ["sh", "-c", script],
                  env={"CMAKE_ARGS": CMAKE_ARGS, "CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 2)})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=default_dir(), help="the chroot (default: %(default)s)")
    sub = parser.add_subparsers(dest="verb", required=True)
    create_p = sub.add_parser("create", help="create or reuse the chroot")
    create_p.add_argument("--mirror", help="the Debian mirror (default: the one this machine's apt uses)")
    wheel_p = sub.add_parser("wheel", help="build the gfx90a wheel in the chroot")
    wheel_p.add_argument("--out", default=f"{SRC_IN_CHROOT}/dist/rocm",
                         help="folder inside the chroot (the checkout is /src; default: %(default)s)")
    run_p = sub.add_parser("run", help="run a command in the chroot (the checkout at /src)")
    run_p.add_argument("command", nargs=argparse.REMAINDER)
    sub.add_parser("path", help="print the chroot's folder when it is ready")
    args = parser.parse_args(argv)
    chroot = args.dir.resolve()
    if args.verb == "path":
        if ready(chroot):
            print(chroot)
            return 0
        return 1
    if os.geteuid() != 0:
        raise SystemExit("rocm_env: needs root (debootstrap, mount and chroot)")
    if args.verb == "create":
        create(chroot, args.mirror or host_mirror())
        return 0
    if args.verb == "wheel":
        return wheel(chroot, args.out)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    return run_in(chroot, command or ["bash"])


if __name__ == "__main__":
    sys.exit(main())
