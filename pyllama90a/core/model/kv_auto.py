"""`ctk="auto", ctv="auto"` with `kv_quality=` (a bound on the mean KL divergence against an f16 cache, in nats)
and/or `kv_budget=` (bytes of K and V at n_ctx): the smallest cache type this device's calibration measured
within the bound whose K and V fit, or InvalidArgumentError naming what was measured.

A type's quality is the worst mean KL the calibration measured for it, over the attention paths (FA off, hybrid)
and phases (prefill, decode), since the path is chosen after the types. Its bytes are kv_bytes' (the GGUF
header's shape at n_ctx, as llama.cpp allocates them).
"""
from __future__ import annotations

import os
from dataclasses import replace

from ...errors import InvalidArgumentError
from ..gguf.header import read_header
from .attention_policy import attention_device
from .calibration import calibration_key, lookup
from .kv_budget import kv_bytes
from .settings import ContextSettings
from .shape import attention_shape


def resolve_kv_types(settings: ContextSettings, path: bytes | str | os.PathLike[str],
                     n_gpu_layers: int) -> ContextSettings:
    """The settings with "auto" cache types replaced by the calibration's choice (unchanged without "auto")."""
    if settings.ctk != "auto":  # (ContextSettings checked that both or neither are)
        return settings
    shown = os.fsdecode(path)
    header = read_header(shown)
    found = lookup(calibration_key(attention_device(n_gpu_layers)[1], attention_shape(header, shown)))
    if found is None:
        raise InvalidArgumentError(f'ctk="auto" needs a calibration of this device, build and model ({shown}): '
                                   "none was found; run `python -m pyllama90a calibrate` first", param="ctk")
    calibration, calibration_path = found
    worst: dict[tuple[str, str], float] = {}
    for q in calibration.quality:
        worst[q.ctk, q.ctv] = max(worst.get((q.ctk, q.ctv), 0.0), q.mean_kl)
    sizes = {pair: kv_bytes(shown, settings.n_ctx, *pair, header=header).total_bytes for pair in worst}
    bound = settings.kv_quality
    fitting = [pair for pair in worst if (bound is None or worst[pair] <= bound) and
               (settings.kv_budget is None or sizes[pair] <= settings.kv_budget)]
    if not fitting:
        measured = ", ".join(f"{k}/{v}: KL {worst[k, v]:.5f}, {sizes[k, v] / 2**20:.2f} MiB"
                             for k, v in sorted(worst, key=lambda p: sizes[p]))
        raise InvalidArgumentError(f"no measured cache type has mean KL <= {bound} and K+V <= {settings.kv_budget} "
                                   f"bytes at n_ctx {settings.n_ctx}; {calibration_path} measured {measured}",
                                   param="kv_quality" if bound is not None else "kv_budget")
    ctk, ctv = min(fitting, key=lambda p: (sizes[p], worst[p]))
    return replace(settings, ctk=ctk, ctv=ctv, kv_quality=None, kv_budget=None)  # (used: checked no more)
