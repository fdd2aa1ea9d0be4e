"""How many times this process maps a file: llama.cpp mmaps a model's weights once per load, so the count tells
loads apart from contexts on loaded weights, and a freed model from a kept one (Linux: /proc/self/maps)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

needs_proc_maps = pytest.mark.skipif(not Path("/proc/self/maps").is_file(), reason="needs /proc/self/maps (Linux)")


def mappings_of(path: str | os.PathLike[str]) -> int:
    target = str(Path(path).resolve())
    with open("/proc/self/maps") as maps:
        return sum(1 for line in maps if line.rstrip().endswith(target))
