"""Context shift (llama-server's --context-shift): when a generation fills its sequence's cells, keep the first
n_keep tokens, drop half of the rest and move the cells after them down, so the generation goes on. Model's own
path (model/sequence_cache.py) and each BatchEngine slot (engine/engine.py) run the same two functions here.

llama.cpp moves the cells (llama_memory_seq_rm, then llama_memory_seq_add) and rotates their K to the new
positions (RoPE) at the next decode; a quantized K is dequantized, rotated back from its Hadamard rotation,
re-roped, rotated and quantized again (llama_kv_cache::build_rope_shift), the same cells whichever attention path
stored them (patch 0015 stores the rotation llama.cpp's graph would). The cells kept after the gap still hold what
was computed while the dropped tokens were there, as in llama-server: an approximation of the longer text, not the
K and V a fresh decode of the kept tokens would give.
"""
from __future__ import annotations

from collections.abc import Sequence

from ...errors import INT32_MAX, ContextError, InvalidArgumentError, LlamaError, int_in_range
from ...native import ContextHandle, ModelHandle

MIN_ROOM = 4  # cells a shift always frees at least: n_keep is capped at n_ctx_seq - 4, as llama-server caps it


def check_n_keep(n_keep: object) -> int:
    """llama-server's n_keep: prompt tokens a shift keeps, BOS not counted; -1 keeps the whole prompt."""
    if isinstance(n_keep, bool) or not isinstance(n_keep, int):
        raise InvalidArgumentError(f"n_keep must be an integer (-1: the whole prompt), got {n_keep!r}"[:200],
                                   param="n_keep")
    int_in_range("n_keep", n_keep, -1, INT32_MAX)
    return n_keep


def kept_at_shift(enabled: bool, n_keep: int, prompt: Sequence[int], vocab: ModelHandle, n_ctx_seq: int) -> int | None:
    """How many of a sequence's first tokens every shift keeps, as llama-server counts them: n_keep (-1: the
    prompt's length), plus one where the vocabulary adds a BOS, at most n_ctx_seq - MIN_ROOM. None when context
    shift is off (the generation then ends when the cells are full)."""
    if not enabled:
        return None
    keep = (len(prompt) if n_keep < 0 else n_keep) + int(vocab.add_bos)
    return min(keep, n_ctx_seq - MIN_ROOM)


def shift(context: ContextHandle, seq: int, cached: list[int], keep: int | None) -> int:
    """Make room in sequence `seq`, whose cells hold `cached` (one short of full): keep the first `keep` tokens
    (a GenerationSequence's shift_keep), drop half of those after them (llama-server's n_discard 0), move the rest
    down; `cached` follows. Returns how many tokens were dropped."""
    assert keep is not None  # (without context shift the generation ended before its cells were full)
    n_left = len(cached) - keep
    n_discard = max(0, min(n_left // 2, n_left - 1))
    if not context.drop_cells(seq, keep, keep + n_discard):  # pragma: no cover - a KV cache cuts anywhere
        raise LlamaError("llama.cpp could not drop the cells of a context shift")
    context.move_cells(seq, keep + n_discard, len(cached), -n_discard)
    del cached[keep:keep + n_discard]
    return n_discard


def require_shift(context: ContextHandle) -> None:
    """ContextError naming why, for a context made with context_shift=True whose memory cannot shift (the
    context is closed first: it was made for what it cannot do)."""
    if not context.can_shift:
        context.close()
        raise ContextError("context_shift=True: this context cannot shift: its memory cannot move cells to other "
                           "positions (llama_memory_can_shift is false: a model with several positions per token, "
                           "such as M-RoPE, or a memory without positions)")
