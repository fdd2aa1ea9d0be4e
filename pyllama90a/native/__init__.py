"""The binding floor: one Python object per llama.cpp object, each owning its lifetime.

Named `native` because these modules are the only code that talks to the
compiled library (`pyllama90a._native`, built from src/ against the patched llama.cpp): the only importers of
`lib`. Above them, the core (model, engine, sampling, chat) sees handles and Python values, never a pointer.

Lifetimes: each native object is owned by one handle that frees it, by close() or, as a safety net, by its
weakref.finalize. A ContextHandle holds its ModelHandle (its finalizer too), and a ModelHandle has no close():
the weights are freed when their last user is gone, so no context outlives them, whichever of several contexts
on one model is closed first.

Modules:
    _ffi: the one import point of the compiled module (`ffi`, `lib`); loads the backends once
    log: llama.cpp's log lines to Python logging, and NativeCall, which turns a failed call into an exception
    kv_types: KV cache types by name, and the attention modes that read them
    model: ModelHandle, one loaded llama_model and what it says without a context
    context: ContextHandle and ContextParams, one llama_context
    batch: Batch, a llama_batch reused from one decode to the next
    sampler: SamplerChain and SamplerSettings, a llama.cpp sampler chain
    lora: LoraHandle, one LoRA adapter loaded for a model
    placement: Placement, which devices a model's layers go to, checked before llama.cpp sees it
    devices: the ggml devices a model offloads to by default and those a worker serves
    ggml: ggml-level facts: a KV type's ggml number and row size, backends, a copy bandwidth
    rpc: ggml-rpc, both ends: connect to workers, serve this build's devices
"""
from __future__ import annotations

from .batch import Batch
from .context import ContextHandle, ContextParams
from .lora import LoraHandle
from .model import ModelHandle
from .sampler import SamplerChain

__all__ = ["Batch", "ContextHandle", "ContextParams", "LoraHandle", "ModelHandle", "SamplerChain"]
