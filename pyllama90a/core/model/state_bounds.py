"""How large llama.cpp's state of a context (or of one sequence) can be, and the one length in it that llama.cpp
allocates by before checking it: so that a state file is refused from its size before any byte is read, and its
payload before llama.cpp sees it.

llama.cpp writes (llama-context.cpp, llama-kv-cache.cpp state_write*):
    whole context   u32 length + the architecture's name, then the memory
    one sequence    u32 magic, i32 sequence id, then the memory of that sequence
    memory          u32 n_stream; per stream u32 cell count (0: nothing more), per cell i32 pos, u32 n_seq_id,
                    [12 bytes of llama_kv_cell_ext], n_seq_id x i32; u32 v_trans, u32 n_layer, per layer the K type
                    and row size (12 bytes) and the K rows of the cells, then the same of V (12 or, transposed, 12)
An iswa memory writes two such caches (its K and V bytes are the sum of both). Every count in the memory is
checked by llama.cpp against the cache before it allocates (cell counts against the cells, layers against the
layers); the architecture's name is not: llama-io's read_string allocates its length (up to 4 GiB) first.
"""
from __future__ import annotations

import struct

from ...errors import StateFileError
from ...native import ContextHandle

MAX_ARCH_NAME = 64  # llama.cpp's architecture names are short ("llama", "qwen2moe", ...)
_CELL_META = 4 + 4 + 12  # pos, n_seq_id, llama_kv_cell_ext
_STREAM_HEADER = 4 + 4 + 4  # cell count, v_trans, n_layer
_LAYER_HEADERS = 12 + 12  # K type and row size; V type and row size (or type, element size and n_embd)
_PREFIX = 4 + MAX_ARCH_NAME + 4 + 4 + 4  # the architecture's name or a sequence's magic and id; n_stream
_CACHES = 2  # an iswa memory: a full and a sliding-window cache
_U32 = struct.Struct("<I")


def memory_state_bound(kv_bytes: int, n_cells: int, n_seq_ids: int, n_streams: int, n_layer: int) -> int:
    """The most bytes llama.cpp's state can take for at most `n_cells` cells whose K and V rows take `kv_bytes`
    in all, each cell in at most `n_seq_ids` sequences."""
    per_cache = n_streams * (_STREAM_HEADER + n_layer * _LAYER_HEADERS) + n_cells * (_CELL_META + 4 * n_seq_ids)
    return _PREFIX + kv_bytes + _CACHES * per_cache


def context_kv_bytes(context: ContextHandle) -> int:
    """K and V bytes of the context's cache; StateFileError for a memory that is not a KV cache (recurrent
    layers), whose largest state is not known here: refused rather than guessed, as kv_budget does."""
    k, v = context.kv_cache_bytes()
    if not k + v:
        raise StateFileError("state files need a model whose memory is a KV cache (not recurrent layers)")
    return k + v


def n_layer(context: ContextHandle) -> int:
    """The model's layers (from its metadata, which llama.cpp needed to load it)."""
    model = context.model
    arch = model.metadata("general.architecture") or ""
    count = model.metadata(f"{arch}.block_count") or ""
    return int(count) if count.isdigit() else 1024  # (never seen: a loaded model has its block count)


def context_state_bound(context: ContextHandle) -> int:
    """The most bytes of llama.cpp's state of the whole `context` (every sequence's cells)."""
    return memory_state_bound(context_kv_bytes(context), context.n_ctx, context.n_seq_max, context.n_seq_max,
                              n_layer(context))


def check_context_payload(name: str, payload: bytes, architecture: str | None) -> None:
    """Refuse a whole-context payload whose architecture name is not `architecture` (the model's; None: any
    name of llama.cpp's length), from its length alone: llama.cpp allocates that length before reading it, and
    would quote a wrong name back (any bytes the file chose)."""
    if len(payload) < _U32.size:
        raise StateFileError(f"{name}: its state is empty")
    (length,) = _U32.unpack_from(payload)
    if length > min(MAX_ARCH_NAME, len(payload) - _U32.size):
        raise StateFileError(f"{name}: its state names an architecture of {length} bytes (llama.cpp's are at most "
                             f"{MAX_ARCH_NAME}, and {len(payload) - _U32.size} bytes follow)")
    if architecture is not None and payload[_U32.size:_U32.size + length] != architecture.encode():
        raise StateFileError(f"{name}: its state is not of this model's architecture ({architecture})")
