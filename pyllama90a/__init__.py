"""pyllama90a: a patched llama.cpp whose standard attention path reads quantized K and V, through cffi."""
from __future__ import annotations

from ._log import set_native_log_level
from .default_model import default_model, pull_default_model
from .errors import (ClosedError, ContextError, ContextOverflowError, DecodeError, InvalidArgumentError,
                     LlamaError, ModelFormatError, ModelLoadError)
from .kv_types import KV_TYPES, QUANTIZED_KV_TYPES
from .model import Completion, KVCacheInfo, Model, Piece, Timings, Usage

__version__ = "0.1.0"

__all__ = [
    "Model", "Completion", "Piece", "Usage", "Timings", "KVCacheInfo", "KV_TYPES", "QUANTIZED_KV_TYPES",
    "default_model", "pull_default_model", "set_native_log_level",
    "LlamaError", "ModelFormatError", "ModelLoadError", "ContextError", "InvalidArgumentError",
    "ContextOverflowError", "DecodeError", "ClosedError",
]
