"""The slot folder's settings: where it is, the secret that authenticates its files, and its quota
(--slot-save-path, --slot-secret-file, --slot-max-files, --slot-max-bytes).

Slot files carry an HMAC-SHA256 under the server's secret (state_file.py's version 4): whoever can write the
folder but does not hold the secret cannot make a file that restores (a forged token list would make a slot
answer one prompt from another's cells). The secret comes from --slot-secret-file (or
PYLLAMA90A_SLOT_SECRET_FILE): a file readable by its owner only, to share between servers that share a folder.
Without it, the secret is $PYLLAMA90A_HOME/slot-secret (~/.cache/pyllama90a/slot-secret), made once with 32
random bytes and mode 0600 and kept, so that files outlive a restart. Never inside the slot folder: whoever
reads the folder would read the key.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

SECRET_NAME = "slot-secret"
MAX_SECRET_BYTES = 4096
DEFAULT_MAX_FILES = 64
DEFAULT_MAX_BYTES = 4 << 30
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


@dataclass(frozen=True)
class SlotFolder:
    """--slot-save-path and what guards it."""

    path: Path
    key: bytes
    max_files: int = DEFAULT_MAX_FILES
    max_bytes: int = DEFAULT_MAX_BYTES


def byte_size(text: str) -> int:
    """'4G', '512M', '65536' (K, M, G, T: powers of 1024) as bytes (ValueError otherwise)."""
    match = re.fullmatch(r"\s*([0-9]{1,15})\s*([kmgt]?)i?b?\s*", str(text), re.IGNORECASE)
    if not match:
        raise ValueError(f"{text!r} is not a size such as 4G, 512M or 65536")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def slot_folder(path: str | None, secret_file: str | None, max_files: int, max_bytes: int) -> SlotFolder | None:
    """The slot folder of these flags (None without --slot-save-path); ValueError saying which flag is wrong."""
    if path is None:
        return None
    folder = Path(path).resolve()
    if not folder.is_dir():
        raise ValueError(f"--slot-save-path {path!r} is not a folder")
    if max_files < 1 or max_bytes < 1:
        raise ValueError("--slot-max-files and --slot-max-bytes must be at least 1")
    secret = Path(secret_file) if secret_file is not None else _home() / SECRET_NAME
    if secret.resolve().is_relative_to(folder):
        raise ValueError(f"the slot secret ({'--slot-secret-file' if secret_file else '$PYLLAMA90A_HOME'}) must not "
                         f"be inside --slot-save-path: whoever reads the folder would read the key")
    key = read_secret(secret) if secret_file is not None else kept_secret(secret)
    return SlotFolder(folder, key, max_files, max_bytes)


def slot_folder_of(args: argparse.Namespace) -> SlotFolder | None:
    """The server's slot folder from its flags; exits with the error when one is wrong."""
    try:
        return slot_folder(args.slot_save_path, args.slot_secret_file, args.slot_max_files, args.slot_max_bytes)
    except ValueError as e:
        raise SystemExit(f"error: {e}") from None


def read_secret(path: Path) -> bytes:
    """The secret in the file at `path` (its bytes, a final newline aside): a regular file of at least 16 bytes
    that no one but its owner may read or write."""
    from ..core.model.state_file import MIN_KEY_BYTES  # (here: parsing the server's flags loads no native library)

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise ValueError(f"slot secret file {str(path)!r}: cannot open: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"slot secret file {str(path)!r} is not a regular file")
        if st.st_mode & 0o077:
            raise ValueError(f"slot secret file {str(path)!r} is readable or writable by others than its owner "
                             f"(mode {stat.S_IMODE(st.st_mode):o}): chmod 600 it")
        key = f.read(MAX_SECRET_BYTES + 1).rstrip(b"\r\n")
    if not MIN_KEY_BYTES <= len(key) <= MAX_SECRET_BYTES:
        raise ValueError(f"slot secret file {str(path)!r} must hold {MIN_KEY_BYTES} to {MAX_SECRET_BYTES} bytes, "
                         f"holds {len(key)}")
    return key


def kept_secret(path: Path) -> bytes:
    """The secret at `path`, made there first if there is none (32 random bytes as hex, mode 0600, written under
    a temporary name and linked into place, so that two servers starting at once agree on one)."""
    if not os.path.lexists(path):
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}-{secrets.token_hex(8)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_hex(32).encode() + b"\n")
                f.flush()
                os.fsync(f.fileno())
            with contextlib.suppress(FileExistsError):  # (another server made it first: its secret is the one)
                os.link(tmp, path)
        finally:
            os.unlink(tmp)
    return read_secret(path)


def _home() -> Path:
    return Path(os.environ.get("PYLLAMA90A_HOME") or Path.home() / ".cache" / "pyllama90a")


def folder_usage(folder: Path, leaving_out: str) -> tuple[int, int]:
    """(files, bytes) in `folder` but `leaving_out` (the file a save replaces): every entry not starting with
    '.' (what a slot file name can be; the writer's temporary files start with '.'), a regular file's size."""
    files = size = 0
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.startswith(".") or entry.name == leaving_out:
                continue
            files += 1
            if entry.is_file(follow_symlinks=False):
                size += entry.stat(follow_symlinks=False).st_size
    return files, size
