"""A calibration as people read it: markdown (the depth bench's speed table, memory per mode, quality per cache
type) and one PNG (speed per mode against depth, quality against bytes per cache type)."""
from __future__ import annotations

from typing import Any

from ..core.model.calibration import Calibration
from . import depths
from .quality import quality_panel
from .report import pyplot


def markdown(calibration: Calibration, speed: dict[str, Any]) -> str:
    key = calibration.key
    depths.add_ratios(speed, speed["modes"][0])
    lines = [f"# Calibration of `{calibration.model}` on {key.device}", "",
             f"Build: {key.backends}, CK {'yes' if key.ck else 'no'}, libraries {key.libraries}; model shape: "
             f"{key.n_layer} layers, {key.n_head_kv} KV heads, head dims {key.head_k}/{key.head_v}; "
             f"{calibration.created}", "", "## Speed", "", depths.markdown(speed), "## Memory (plan_memory)", "",
             "| flash_attn | K/V | n_ctx | KV MiB | compute MiB |", "|---|---|---:|---:|---:|"]
    for m in calibration.memory:
        lines.append(f"| {m.flash_attn} | {m.ctk}/{m.ctv} | {m.n_ctx} | {m.kv_bytes / 2**20:.1f} | "
                     f"{m.compute_bytes / 2**20:.1f} |")
    lines += ["", "## KV quality against f16 on the same path", "",
              "| flash_attn | phase | K/V | mean KL | top-1 | perplexity | vs f16 |",
              "|---|---|---|---:|---:|---:|---:|"]
    for q in calibration.quality:
        lines.append(f"| {q.flash_attn} | {q.phase} | {q.ctk}/{q.ctv} | {q.mean_kl:.5f} | {q.top1:.2%} | "
                     f"{q.perplexity:.3f} | {q.perplexity / q.perplexity_f16 - 1:+.2%} |")
    return "\n".join(lines) + "\n"


def plot(calibration: Calibration, speed: dict[str, Any], path: Any) -> bool:
    """calibration.png: the depth bench's speed panels of `speed` (as markdown takes it) beside the quality
    bench's panel; False without matplotlib (the `bench` extra)."""
    plt = pyplot()
    if plt is None:
        return False
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    depths.speed_panels(axes[:2], speed)
    kv = {(m.ctk, m.ctv): m.kv_bytes / m.n_ctx for m in calibration.memory}
    quality_panel(axes[2], [{"flash_attn": q.flash_attn, "phase": q.phase, "ctk": q.ctk, "ctv": q.ctv,
                             "kv_bytes_per_token": kv[q.ctk, q.ctv], "mean_kl": q.mean_kl}
                            for q in calibration.quality if (q.ctk, q.ctv) in kv])
    axes[2].set_title("quality against bytes")
    fig.suptitle(f"{calibration.model} on {calibration.key.device}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
