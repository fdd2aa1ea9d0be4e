"""Opening a model from its settings, in the one order that Model, Model.with_context and plan_memory follow:
the settings and the file checked before llama.cpp reads anything, the weights loaded (for a plan only simulated),
flash_attn "auto" resolved for the device attention runs on, the context made."""
from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from ...errors import INT32_MAX, ModelFormatError, fs_path, int_in_range
from ...native import ContextHandle, ContextParams, ModelHandle
from ...native.placement import Placement
from ..generation.context_shift import require_shift
from ..gguf.header import read_header
from ..gguf.tensor_roles import check_tensors
from .attention_paths import AttentionPaths
from .attention_policy import AttentionChoice, choose
from .file import ModelFile, check_header, pooling_for
from .settings import ContextSettings
from .shape import AttentionShape, attention_shape
from .state_file import model_fingerprint


def default_threads() -> int:
    """The physical cores (more threads only wait for each other in ggml's mat-muls)."""
    try:
        import psutil

        return psutil.cpu_count(logical=False) or os.cpu_count() or 1
    except ImportError:  # pragma: no cover
        return os.cpu_count() or 1


def model_path(path: str | os.PathLike[str] | None) -> bytes:
    """The file a Model opens, checked as a path: `path`, or the default model (fetched once) for None."""
    if path is None:
        from ..gguf.default_model import default_model

        path = default_model()
    return fs_path("path", path)


def context_params(settings: ContextSettings) -> ContextParams:
    """The context's params from the settings, checked (ContextParams refuses what llama.cpp would abort on)."""
    s = settings
    return ContextParams(n_ctx=s.n_ctx, n_batch=s.n_batch, n_ubatch=s.n_ubatch, n_seq_max=s.n_seq_max,
                         n_threads=default_threads() if s.n_threads is None else s.n_threads,
                         type_k=s.ctk, type_v=s.ctv, flash_attn=s.flash_attn)


def checked_file(raw_path: bytes, n_gpu_layers: int, params: ContextParams) -> ModelFile:
    """The file's identity (for state files) after the checks of its header and tensor types against `params`:
    what would crash llama.cpp's load or first decode is refused here."""
    int_in_range("n_gpu_layers", n_gpu_layers, -1, INT32_MAX)  # -1: all layers
    path = Path(os.fsdecode(raw_path))
    header = read_header(path)
    check_tensors(header, str(path))
    file = ModelFile(path, header, model_fingerprint(raw_path, header.data_offset), n_gpu_layers)
    check_header(file, params)
    return file


def load_weights(raw_path: bytes, n_gpu_layers: int, placement: Placement, *, simulate: bool = False) -> ModelHandle:
    """The weights, placed; simulate=True loads the metadata only (nothing it makes can decode)."""
    return ModelHandle(raw_path, n_gpu_layers=n_gpu_layers, placement=placement, simulate=simulate)


def calibrated_shape(file: ModelFile) -> AttentionShape | None:
    """The model's attention shape, by which "auto" finds a calibration; None when the header has none."""
    try:
        return attention_shape(file.header, file.path)
    except ModelFormatError:
        return None


def open_context(file: ModelFile, handle: ModelHandle, params: ContextParams, embedding: bool,
                 attention_paths: AttentionPaths | None,
                 context_shift: bool = False) -> tuple[ContextHandle, AttentionChoice, AttentionPaths]:
    """The context, with flash_attn "auto" resolved by the attention policy, pooling for embeddings and the
    attention paths set before anything is decoded; with the choice and the paths. With context_shift, a context
    that cannot shift is refused here (ContextError), not when a generation fills its cells."""
    attention = choose(params.flash_attn, params.type_k, params.type_v, file.n_gpu_layers, handle.workers,
                       calibrated_shape(file), params.n_ctx)
    if attention_paths is None and attention.fused_decode:  # the policy's choice of kernel, unless paths are given
        attention_paths = AttentionPaths(fused_decode=True)
    paths = AttentionPaths.checked(attention_paths, none_ok=True)
    pooling = pooling_for(file.header) if embedding else "model"
    context = ContextHandle(handle, replace(params, flash_attn=attention.flash_attn, pooling=pooling),
                            attention_paths=paths.bits)
    if context_shift:
        require_shift(context)
    return context, attention, paths
