"""LoraHandle: one llama_adapter_lora, a LoRA adapter loaded for one ModelHandle."""
from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import LoraAdapterError, fs_path
from ._ffi import ffi, lib
from .log import NativeCall
from .model import ModelHandle

if TYPE_CHECKING:  # pragma: no cover
    from .._native import CData  # (only in the stub, _native.pyi)


def _free_adapter(ptr: CData, model: ModelHandle) -> None:
    # `model` is an argument so that the finalizer holds it: llama.cpp frees the adapters left on a model it
    # frees, so an adapter freed after its model would be freed twice
    lib.llama_adapter_lora_free(ptr)


class LoraHandle:
    """A LoRA adapter's tensors, loaded beside `model`'s weights (on the devices of the weights they adapt).

    It holds its ModelHandle until it is freed. A context it is applied to keeps it referenced (ContextHandle's
    set_loras), since llama.cpp's context holds only its pointer. close() frees it; a finalizer frees one that is
    garbage collected.
    """

    def __init__(self, model: ModelHandle, path: str | bytes | os.PathLike[str] | os.PathLike[bytes]) -> None:
        raw_path = fs_path("path", path)
        self.path = Path(os.fsdecode(raw_path))
        with NativeCall() as call:
            ptr = lib.llama_adapter_lora_init(model.ptr, raw_path)
        if ptr == ffi.NULL:
            call.fail(LoraAdapterError, f"llama.cpp could not load the LoRA adapter {self.path}")
        self._finalizer = weakref.finalize(self, _free_adapter, ptr, model)
        self.model = model
        self.ptr: CData | None = ptr  # the llama_adapter_lora*; None once closed
        # an activated LoRA (aLoRA) applies only after its invocation tokens: pyllama90a.core.model.lora refuses those
        self.n_alora_invocation_tokens: int = lib.llama_adapter_get_alora_n_invocation_tokens(ptr)

    @property
    def closed(self) -> bool:
        return self.ptr is None

    def close(self) -> None:
        """Free the adapter (no context may use it any more: its users close their contexts first)."""
        self.ptr = None
        self._finalizer()

    def __repr__(self) -> str:
        return f"LoraHandle({str(self.path)!r}{', closed' if self.closed else ''})"
