"""KV cache types by name, and the attention modes that read them. Users never see ggml's numbers."""
from __future__ import annotations

from ..errors import InvalidArgumentError

# name -> (ggml type constant name, block size along the head dimension)
KV_TYPES: dict[str, tuple[str, int]] = {
    "f32": ("GGML_TYPE_F32", 1),
    "f16": ("GGML_TYPE_F16", 1),
    "bf16": ("GGML_TYPE_BF16", 1),
    "q8_0": ("GGML_TYPE_Q8_0", 32),
    "q4_0": ("GGML_TYPE_Q4_0", 32),
    "q4_1": ("GGML_TYPE_Q4_1", 32),
    "q5_0": ("GGML_TYPE_Q5_0", 32),
    "q5_1": ("GGML_TYPE_Q5_1", 32),
    "iq4_nl": ("GGML_TYPE_IQ4_NL", 32),
}
QUANTIZED_KV_TYPES = tuple(name for name, (_, blck) in KV_TYPES.items() if blck > 1)
# flash_attn's values -> llama_flash_attn_type. "auto": the attention policy decides (attention_policy.py);
# "hybrid": FA on, with patch 0012's per-phase bit (prefill through FLASH_ATTN_EXT, decode over a quantized V
# through the non-flash path)
FLASH_ATTN_MODES: dict[str, str] = {"auto": "LLAMA_FLASH_ATTN_TYPE_AUTO", "on": "LLAMA_FLASH_ATTN_TYPE_ENABLED",
                                    "off": "LLAMA_FLASH_ATTN_TYPE_DISABLED", "hybrid": "LLAMA_FLASH_ATTN_TYPE_ENABLED"}


def check_kv_type(name: object, which: str) -> str:
    if not isinstance(name, str) or name.lower() not in KV_TYPES:
        raise InvalidArgumentError(
            f"unknown {which} cache type {name!r}; valid types: {', '.join(KV_TYPES)}")
    return name.lower()


def block_size(name: str) -> int:
    return KV_TYPES[name][1]
