"""LoRA adapters of a Model: each file checked before llama.cpp reads it, loaded beside the model's weights, and
the scales a context applies them with.

    Model(path, lora=[("style.gguf", 1.0), ("domain.gguf", 0.5)])   # ids 0 and 1, in that order

llama.cpp applies adapters per context, not per sequence: a Model's context runs with the scales it was loaded
with; a BatchEngine switches sets between decode steps (engine/lora_turns.py). A request names the adapters it uses
as {id: scale}; the others are off for it (llama-server's rule). Activated LoRA (aLoRA, whose adapter applies
only after invocation tokens) is refused.
"""
from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import overload

from ...errors import (
    InvalidArgumentError,
    LoraAdapterError,
    ModelFormatError,
    fs_path,
)
from ...native import ContextHandle, LoraHandle, ModelHandle
from ..generation.lora_request import RequestedLora, Scales, lora_scale
from ..gguf.header import GGUFHeader, read_header
from ..gguf.tensor_roles import check_adapter_tensors
from .state_file import NO_ADAPTERS, model_fingerprint

ALORA_PREFIX = "adapter.alora."    # the keys of an activated LoRA (adapter.alora.invocation_tokens)


@dataclass(frozen=True)
class LoraInfo:
    """One loaded adapter: its id (its place in the list given), file and scale."""
    id: int
    path: Path
    scale: float


def lora_files(specs: object) -> list[tuple[bytes, float]]:
    """Model(lora=...): (path, scale) pairs, or paths (scale 1.0), checked as values."""
    if isinstance(specs, (str, bytes, os.PathLike)) or not isinstance(specs, Sequence):
        raise LoraAdapterError(f"lora must be a list of (path, scale) pairs, got {type(specs).__name__}")
    files = []
    for i, spec in enumerate(specs):
        path, scale = (spec, 1.0) if isinstance(spec, (str, os.PathLike)) else \
            spec if isinstance(spec, tuple) and len(spec) == 2 else (None, None)
        if path is None:
            raise LoraAdapterError(f"lora[{i}] must be a (path, scale) pair or a path, got {spec!r}"[:200])
        try:
            raw = fs_path(f"lora[{i}]'s path", path)
        except InvalidArgumentError as e:
            raise LoraAdapterError(str(e)) from None
        files.append((raw, lora_scale(f"lora[{i}]'s scale", scale)))
    return files


def check_adapter_file(path: Path, model: GGUFHeader) -> bytes:
    """LoraAdapterError unless `path` is a LoRA GGUF for `model` (the model's GGUF header) that is not an aLoRA,
    whose tensors fit the model's weights (tensor_roles.check_adapter_tensors): what llama.cpp's loader would
    refuse, said before it reads the tensors, what it would take and then crash with at the first decode, and
    what it would take but pyllama90a does not support. Its fingerprint (state_file.model_fingerprint) when it is."""
    architecture = model.architecture
    try:
        header = read_header(path)
    except ModelFormatError as e:
        raise LoraAdapterError(f"LoRA adapter: {e}") from None
    kind, adapter_type = header.get("general.type"), header.get("adapter.type")
    if kind != "adapter":
        raise LoraAdapterError(f"{path} is not a LoRA adapter: its general.type is {kind!r}, an adapter's is "
                               f"'adapter' (a model file?)")
    if any(key.startswith(ALORA_PREFIX) for key in header.metadata) or adapter_type == "alora":
        raise LoraAdapterError(f"{path} is an activated LoRA (aLoRA: it has {ALORA_PREFIX}* keys), which "
                               f"pyllama90a does not support; use a plain LoRA adapter")
    if adapter_type != "lora":
        raise LoraAdapterError(f"{path}: adapter.type is {adapter_type!r}; only 'lora' adapters are supported")
    if header.architecture != architecture:
        raise LoraAdapterError(f"{path} is a LoRA adapter for architecture {header.architecture!r}, but the "
                               f"model's is {architecture!r}")
    check_adapter_tensors(header, model, str(path))
    return model_fingerprint(path, header.data_offset)


class LoraAdapters(Sequence[LoraInfo]):
    """The LoRA adapters loaded for one Model, by id (their order in Model's `lora`), with the scales they were
    loaded with. Freed by close() (after the context that applied them) or with their last reference.
    `fingerprint` names the files, in order, for state files (cells computed with adapters are theirs alone)."""

    def __init__(self, handles: Sequence[LoraHandle] = (), scales: Sequence[float] = (),
                 fingerprints: Sequence[bytes] = ()) -> None:
        self._handles, self.scales = tuple(handles), tuple(scales)
        self.fingerprint = hashlib.sha256(b"".join(fingerprints)).digest() if fingerprints else NO_ADAPTERS

    @classmethod
    def load(cls, model: ModelHandle, header: GGUFHeader, specs: object) -> LoraAdapters:
        """The adapters of `specs` (Model's `lora`) for `model`, whose GGUF header is `header`: every file
        checked before any is loaded; on a failure, those loaded are freed."""
        files = lora_files(specs)
        fingerprints = [check_adapter_file(Path(os.fsdecode(raw)), header) for raw, _ in files]
        handles: list[LoraHandle] = []
        try:
            for raw, _ in files:
                handles.append(LoraHandle(model, raw))
                if handles[-1].n_alora_invocation_tokens:  # (the header check saw none: a second guard)
                    raise LoraAdapterError(f"{handles[-1].path} is an activated LoRA (aLoRA), which pyllama90a "
                                           f"does not support")
        except BaseException:
            for handle in handles:
                handle.close()
            raise
        return cls(handles, [scale for _, scale in files], fingerprints)

    @overload
    def __getitem__(self, i: int) -> LoraInfo: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[LoraInfo]: ...

    def __getitem__(self, i: int | slice) -> LoraInfo | Sequence[LoraInfo]:
        if isinstance(i, slice):
            return [self[j] for j in range(len(self))[i]]
        return LoraInfo(range(len(self))[i], self._handles[i].path, self.scales[i])

    def __len__(self) -> int:
        return len(self._handles)

    def __iter__(self) -> Iterator[LoraInfo]:
        return (self[i] for i in range(len(self)))

    def scales_for(self, requested: RequestedLora | None, default: Scales | None = None) -> Scales:
        """The scale of every adapter for a request naming `requested` (None: `default`, else the loaded
        scales); adapters it does not name are off. LoraAdapterError for an id that was not loaded."""
        if requested is None:
            return self.scales if default is None else default
        unknown = [i for i, _ in requested if i >= len(self)]
        if unknown:
            loaded = f"ids 0 to {len(self) - 1}" if self else "none"
            raise LoraAdapterError(f"no LoRA adapter has id {unknown[0]} (loaded: {loaded})")
        named = dict(requested)
        return tuple(named.get(i, 0.0) for i in range(len(self)))

    def apply(self, context: ContextHandle, scales: Scales) -> None:
        """Set `context` (on the adapters' model) to run every later decode with these scales."""
        if self._handles:
            context.set_loras(self._handles, scales)

    def close(self) -> None:
        for handle in self._handles:
            handle.close()

    def __repr__(self) -> str:
        return f"LoraAdapters({list(self)!r})"
