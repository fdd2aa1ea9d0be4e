"""The binding floor: one Python object per llama.cpp object, each owning its lifetime.

Named `native` because these modules, with the two roots beside them, are the only code that talks to the
compiled library (`pyllama90a._native`, built from src/ against the patched llama.cpp): the only importers of
`lib`. Above them, the core (model, engine, sampling, chat) sees handles and Python values, never a pointer.

- ../_ffi.py  loads the compiled module (`ffi`, `lib`) and initialises the backends; it keeps its name, the one
              the op-level test tools and device scripts import `lib` by for ggml calls
- ../_log.py  llama.cpp's log lines to Python logging, and NativeCall: the one place a failed native result
              becomes a LlamaError, carrying the lines llama.cpp logged during that call on that thread
- model.py    ModelHandle: llama_model* (weights, vocabulary, metadata, built-in chat templates)
- context.py  ContextHandle: llama_context* (decode, logits, sequences, state, sizes); ContextParams
- lora.py     LoraHandle: llama_adapter_lora* (a LoRA adapter loaded for a model; a context applies it)
- batch.py    Batch: llama_batch
- sampler.py  SamplerChain: a llama_sampler* chain
- ggml.py     ggml-level facts: KV type numbers and row sizes, backend devices, system info
- devices.py  the devices a model offloads to by default, and those a worker serves
- rpc.py      ggml-rpc: workers' devices for a model (a HELLO probe first), connection state, serving

Lifetimes: each native object is owned by one handle that frees it, by close() or, as a safety net, by its
weakref.finalize. A ContextHandle holds its ModelHandle (its finalizer too), and a ModelHandle has no close():
the weights are freed when their last user is gone, so no context outlives them, whichever of several contexts
on one model is closed first.
"""
from __future__ import annotations

from .batch import Batch
from .context import ContextHandle, ContextParams
from .lora import LoraHandle
from .model import ModelHandle
from .sampler import SamplerChain

__all__ = ["Batch", "ContextHandle", "ContextParams", "LoraHandle", "ModelHandle", "SamplerChain"]
