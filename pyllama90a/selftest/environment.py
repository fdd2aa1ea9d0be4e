"""What to tell a maintainer about the machine and the build: device, driver and toolkit versions, backends."""
from __future__ import annotations

import platform
import shutil
import subprocess
import sys
from importlib import metadata

import numpy as np

from ..bench.report import cpu_backend_line, machine_name
from ..core.model.attention_policy import attention_device


def _tool_line(command: list[str], containing: str = "") -> str | None:
    """The first output line of a vendor tool that contains `containing`, if the tool is installed and answers."""
    if shutil.which(command[0]) is None:
        return None
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [line.strip() for line in (out.stdout or out.stderr).splitlines() if containing in line and line.strip()]
    return lines[0] if out.returncode == 0 and lines else None


def gpu_backend_states() -> dict[str, str]:
    """Each GPU backend the build carries -> "N device(s)", "no device" or "not loaded"."""
    from ..native.ggml import gpu_backend_devices

    return {module: "not loaded" if n is None else f"{n} device(s)" if n else "no device"
            for module, n in gpu_backend_devices().items()}


def backend_devices() -> list[str]:
    from ..native.ggml import devices

    return [f"{dev.name} ({dev.description})" for dev in devices()]


def describe() -> list[tuple[str, str]]:
    """(what, value) rows for the report."""
    from ..native.ggml import system_info

    kind, gpu = attention_device(n_gpu_layers=-1)
    rows = [("machine", machine_name()),
            ("os", platform.platform()),
            ("python / numpy", f"{sys.version.split()[0]} / {np.__version__}"),
            ("pyllama90a", metadata.version("pyllama90a")),
            ("ggml devices", "; ".join(backend_devices())),
            ("GPU backends built", "; ".join(f"{m}: {s}" for m, s in gpu_backend_states().items()) or "none"),
            ("attention device", f"{gpu} ({kind})"),
            ("ggml CPU backend", cpu_backend_line()),
            ("llama.cpp system info", system_info())]
    tools = {"nvidia driver": (["nvidia-smi", "--query-gpu=driver_version,name", "--format=csv,noheader"], ""),
             "cuda toolkit": (["nvcc", "--version"], "release"),
             "rocm driver": (["rocm-smi", "--showdriverversion"], "ersion"),
             "hip toolkit": (["hipcc", "--version"], "HIP version")}
    for what, (command, containing) in tools.items():
        line = _tool_line(command, containing)
        if line:
            rows.append((what, line))
    return rows
