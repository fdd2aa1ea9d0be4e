"""`ContextSettings`: the one declaration of a Model's context settings, which Model(), Model.with_context and
BatchEngine take as keyword arguments."""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import InvalidArgumentError, flag, number_in_range, positive_int
from .attention_paths import AttentionPaths


@dataclass(frozen=True)
class ContextSettings:
    """ctk, ctv: K and V cache types by name (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl). flash_attn: "on",
    "off", "hybrid" (FA prefill, quantized non-flash decode) or "auto" (attention_policy decides). n_ctx,
    n_batch, n_ubatch: llama.cpp's sizes. n_threads: None for the physical cores. seed: the default sampling
    seed of generate/chat. embedding: a context for embed().
    n_seq_max: sequences with n_ctx / n_seq_max cells each (BatchEngine's slots; a Model's own calls use
    sequence 0). chat_template: Jinja text that replaces the GGUF's. attention_paths: which of pyllama90a's
    attention kernels the graphs use. context_shift: when a generation fills its cells, drop half of those after
    the first n_keep tokens and go on (llama-server's --context-shift; generation/context_shift.py); off, it
    ends with finish_reason "length". Checked when the Model is made (Model._settle), before llama.cpp sees them.
    """

    ctk: str = "f16"
    ctv: str = "f16"
    flash_attn: str = "auto"
    n_ctx: int = 4096
    n_batch: int = 512
    n_ubatch: int = 512
    n_threads: int | None = None
    seed: int | None = None
    embedding: bool = False
    n_seq_max: int = 1
    chat_template: str | None = None
    attention_paths: AttentionPaths | None = None
    kv_quality: float | None = None
    kv_budget: int | None = None
    context_shift: bool = False

    def __post_init__(self) -> None:
        check_kv_auto(self)
        if flag("context_shift", self.context_shift) and self.embedding:
            raise InvalidArgumentError("context_shift is for generation: a context made with embedding=True embeds",
                                       param="context_shift")


def check_kv_auto(settings: ContextSettings) -> None:
    """Refuses a half-automatic K/V pair, and bounds given without "auto" (they would be ignored)."""
    auto = settings.ctk == "auto"
    if auto != (settings.ctv == "auto"):
        raise InvalidArgumentError('ctk="auto" and ctv="auto" go together (the calibration measures K/V pairs)')
    for name in ("kv_quality", "kv_budget"):
        if getattr(settings, name) is not None and not auto:
            raise InvalidArgumentError(f'{name} chooses the cache types: it needs ctk="auto", ctv="auto"', param=name)
    if settings.kv_quality is not None:
        number_in_range("kv_quality", settings.kv_quality, 0.0, float("inf"))
    if settings.kv_budget is not None:
        positive_int("kv_budget", settings.kv_budget, hi=2**63 - 1)
