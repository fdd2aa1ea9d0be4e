"""A calibration as people read it: markdown (the depth bench's speed table, memory per mode, quality per cache
type) and one PNG (speed per mode against depth, quality against bytes per cache type)."""
from __future__ import annotations

from typing import Any

from ..core.model.calibration import Calibration
from . import depths


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


def plot(calibration: Calibration, path: Any) -> bool:
    """calibration.png; False without matplotlib (the `bench` extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for ax, phase in zip(axes[:2], ("prefill", "decode"), strict=True):
        series: dict[str, list[tuple[int, float]]] = {}
        for p in calibration.speed:
            if p.phase == phase:
                name = f"{p.flash_attn}{'+fused' if p.fused_decode else ''} {p.ctk}/{p.ctv}"
                series.setdefault(name, []).append((p.depth, p.tok_s))
        for name, points in sorted(series.items()):
            points.sort()
            ax.plot([d for d, _ in points], [t for _, t in points], marker="o", label=name)
        ax.set_title(phase)
        ax.set_xlabel("depth (tokens in the KV cache)")
        ax.set_ylabel("tok/s")
        ax.grid(alpha=0.3)
    axes[1].legend(fontsize=6, ncol=2)
    kv = {(m.ctk, m.ctv): m.kv_bytes / m.n_ctx for m in calibration.memory}
    quality: dict[str, list[tuple[float, float, str]]] = {}
    for q in calibration.quality:
        if (q.ctk, q.ctv) != ("f16", "f16") and (q.ctk, q.ctv) in kv:
            quality.setdefault(f"{q.flash_attn} {q.phase}", []).append((kv[q.ctk, q.ctv] / 1024, max(q.mean_kl, 1e-7),
                                                                        q.ctk))
    for name, rows in quality.items():
        rows.sort()
        axes[2].plot([b for b, _, _ in rows], [k for _, k, _ in rows], marker="o", label=name)
        for b, k, t in rows:
            axes[2].annotate(t, (b, k), fontsize=7)
    axes[2].set_yscale("log")
    axes[2].set_xlabel("KV KiB per token")
    axes[2].set_ylabel("mean KL vs f16 (nats)")
    axes[2].set_title("quality against bytes")
    axes[2].grid(alpha=0.3)
    axes[2].legend(fontsize=7)
    fig.suptitle(f"{calibration.model} on {calibration.key.device}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
