"""The x86-64 instruction-set features ggml's CPU backend can use, and which of them this CPU has.

ggml names its build features (`AVX2`, `AMX_INT8`, ...); Linux names the CPU's in /proc/cpuinfo's flags
(`avx2`, `amx_int8`, ...). The bench's machine line and the selftest print both, so that a figure says
which kernels produced it and whether the build left some of the CPU unused.
"""
from __future__ import annotations

from pathlib import Path

# ggml's feature name -> the /proc/cpuinfo flag of the same instructions (x86-64)
GGML_TO_CPUINFO = {
    "SSE3": "pni", "SSSE3": "ssse3", "AVX": "avx", "AVX2": "avx2", "F16C": "f16c", "FMA": "fma", "BMI2": "bmi2",
    "AVX_VNNI": "avx_vnni", "AVX512": "avx512f", "AVX512_VBMI": "avx512vbmi", "AVX512_VNNI": "avx512_vnni",
    "AVX512_BF16": "avx512_bf16", "AMX_INT8": "amx_int8", "AMX_TILE": "amx_tile", "AMX_BF16": "amx_bf16",
}


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The flags of the first processor in /proc/cpuinfo (empty where there is none, e.g. not Linux)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def cpu_has(ggml_feature: str, flags: set[str] | None = None) -> bool:
    """Whether this CPU has the instructions of one of ggml's feature names."""
    flag = GGML_TO_CPUINFO.get(ggml_feature)
    return flag is not None and flag in (cpu_flags() if flags is None else flags)


def describe(build_features: dict[str, str], flags: set[str] | None = None) -> str:
    """One line: the features the loaded CPU backend was built for, and those the CPU has that it does not use."""
    flags = cpu_flags() if flags is None else flags
    used = [name for name in GGML_TO_CPUINFO if build_features.get(name) == "1"]
    unused = [name for name in GGML_TO_CPUINFO if name not in used and cpu_has(name, flags)]
    return f"built for {' '.join(used) or 'baseline x86-64'}; CPU also has {' '.join(unused) or 'nothing more'}"
