"""llama.cpp's INFO lines of a load (devices, buffer sizes), for tests of where tensors went."""
from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator


@contextlib.contextmanager
def native_info_lines() -> Iterator[list[str]]:
    """llama.cpp's INFO lines (load reports: devices, buffer sizes) logged inside the block."""
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("pyllama90a.native")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def buffer_mib(lines: list[str], kind: str) -> dict[str, float]:
    """{buffer name: MiB} of llama.cpp's "<name> <kind> buffer size = X MiB" lines (kind "model" or "KV")."""
    found: dict[str, float] = {}
    for line in lines:
        m = re.search(rf"(\S+) {kind} buffer size =\s*([\d.]+) MiB", line)
        if m:
            found[m.group(1)] = found.get(m.group(1), 0.0) + float(m.group(2))
    return found
