"""`ContextSettings`: the one declaration of a Model's context settings, which Model(), Model.with_context and
BatchEngine take as keyword arguments."""
from __future__ import annotations

from dataclasses import dataclass

from .attention_paths import AttentionPaths


@dataclass(frozen=True)
class ContextSettings:
    """ctk, ctv: K and V cache types by name (f32 f16 bf16 q8_0 q4_0 q4_1 q5_0 q5_1 iq4_nl). flash_attn: "on",
    "off", "hybrid" (FA prefill, quantized non-flash decode) or "auto" (attention_policy decides). n_ctx,
    n_batch, n_ubatch: llama.cpp's sizes. n_threads: None for the physical cores. seed: the default sampling
    seed of generate/chat. embedding: a context for embed().
    n_seq_max: sequences with n_ctx / n_seq_max cells each (BatchEngine's slots; a Model's own calls use
    sequence 0). chat_template: Jinja text that replaces the GGUF's. attention_paths: which of pyllama90a's
    attention kernels the graphs use. Checked when the Model is made (Model._settle), before llama.cpp sees them.
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
