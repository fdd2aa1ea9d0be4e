"""A larger target model for a draft model, made from a real one: its vocabulary, its metadata and its layers as
they are, then extra layers that cost what real layers cost but change nothing, for speculative decoding's bench.

    from pyllama90a.tools.synthetic_target import deeper_target
    path = deeper_target(extra_layers=60, weight_type="f16")   # cached in $PYLLAMA90A_HOME/synthetic
    python -m pyllama90a.tools.synthetic_target --extra-layers 60 --weight-type f16 [--source GGUF] [--out PATH]

Extra layer i is a copy of the source's layer i mod n_layer with its weights in `weight_type` (f16, q8_0 or f32),
except its two output projections (attn_output, ffn_down), which are zero: each extra layer runs its attention
and its feed-forward network in full, over its own KV cells, and adds exactly 0.0 to the residual stream. The
target's logits are then the source's, bit for bit at one token per decode, so with the source as draft model
every drafted token is the target's own choice (acceptance is high by construction, not a finding), while a
decode of the target costs the source's plus the extra layers'. In f16 or f32 the extra layers are memory bound
on a CPU, as a large model's layers are on a GPU: a batch of k tokens costs little more than one token. No
larger real model can be downloaded where the bench runs (issue 36 allows "draft = default model over a larger
synthetic shape"); this is that shape with the default model's vocabulary, so drafts are real tokens.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .synthetic import _home, gguf_written_whole, import_gguf

__all__ = ["WEIGHT_TYPES", "deeper_target", "write_deeper_target"]

WEIGHT_TYPES = ("f16", "q8_0", "f32")
ZEROED = ("attn_output", "ffn_down")  # the projections into the residual stream: an extra layer adds zero
FORMAT_VERSION = 1  # part of the cache key: bump when the files written here change


def _extra_tensors(reader: Any, n_layer: int, extra_layers: int) -> Iterator[tuple[str, Any, str]]:
    """(name in the target, the source tensor it copies, its role) of each extra layer's tensors."""
    by_name = {t.name: t for t in reader.tensors}
    for i in range(extra_layers):
        prefix = f"blk.{i % n_layer}."
        for name, tensor in by_name.items():
            if name.startswith(prefix):
                role = name[len(prefix):].split(".")[0]
                yield f"blk.{n_layer + i}.{name[len(prefix):]}", tensor, role


def _extra_type(gguf: Any, shape: tuple[int, ...], weight_type: str) -> Any:
    """The ggml type of an extra layer's tensor: norms stay f32 (as in every llama GGUF), weights (the zeroed
    projections too, so they cost what real ones do) `weight_type`."""
    if len(shape) == 1 or weight_type == "f32":
        return gguf.GGMLQuantizationType.F32
    return gguf.GGMLQuantizationType.F16 if weight_type == "f16" else gguf.GGMLQuantizationType.Q8_0


def _extra_data(gguf: Any, tensor: Any, role: str, weight_type: str) -> np.ndarray:
    """The data of an extra layer's tensor: the source's values (zero for ZEROED roles) in _extra_type's type."""
    values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).astype(np.float32)  # (F32 stays as it is)
    if role in ZEROED:
        values = np.zeros_like(values)
    qtype = _extra_type(gguf, values.shape, weight_type)
    if qtype == gguf.GGMLQuantizationType.F32:
        return values
    if qtype == gguf.GGMLQuantizationType.F16:
        return values.astype(np.float16)
    return np.asarray(gguf.quants.quantize(values, qtype))


def write_deeper_target(source: str | os.PathLike[str], path: str | os.PathLike[str], *, extra_layers: int,
                        weight_type: str = "f16") -> Path:
    """Write `source` (a llama-architecture GGUF) with `extra_layers` more layers (see the module's docstring) to
    `path`, under a temporary name renamed at the end, one extra tensor in memory at a time."""
    if weight_type not in WEIGHT_TYPES:
        raise ValueError(f"weight_type must be one of {', '.join(WEIGHT_TYPES)}, got {weight_type!r}")
    if isinstance(extra_layers, bool) or not isinstance(extra_layers, int) or extra_layers < 1:
        raise ValueError(f"extra_layers must be a positive integer, got {extra_layers!r}")
    gguf = import_gguf()
    reader = gguf.GGUFReader(source)
    arch = reader.fields["general.architecture"].contents()
    if arch != "llama":
        raise ValueError(f"{source}: the source must be a llama-architecture GGUF, not {arch!r}")
    n_layer = int(reader.fields["llama.block_count"].contents())
    path = Path(path)
    with gguf_written_whole(path, arch) as writer:
        for key, field in reader.fields.items():
            if key.startswith("GGUF.") or key in ("general.architecture", "general.description"):
                continue  # (the writer's own, and the description written below)
            value = n_layer + extra_layers if key == "llama.block_count" else field.contents()
            sub_type = field.types[1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
            writer.add_key_value(key, value, field.types[0], sub_type=sub_type)
        writer.add_description(f"{Path(source).name} with {extra_layers} extra {weight_type} layers whose output "
                               f"projections are zero (pyllama90a.tools.synthetic_target): the same logits, "
                               f"more work per decode")
        extra = list(_extra_tensors(reader, n_layer, extra_layers))
        for t in reader.tensors:  # (the info of every tensor goes before any data)
            writer.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, raw_dtype=t.tensor_type)
        for name, tensor, _role in extra:
            shape = tuple(int(n) for n in reversed(tensor.shape))  # (numpy's order: ggml's reversed)
            qtype = _extra_type(gguf, shape, weight_type)
            nbytes = int(np.prod(gguf.quants.quant_shape_to_byte_shape(shape, qtype)))
            writer.add_tensor_info(name, shape, np.dtype(np.float32), nbytes, raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for t in reader.tensors:
            writer.write_tensor_data(t.data)
        for _name, tensor, role in extra:
            writer.write_tensor_data(_extra_data(gguf, tensor, role, weight_type))
    return path


def _source(source: str | os.PathLike[str] | None) -> Path:
    """The model a target is made from: `source`, or the default model (fetched once) for None."""
    if source is None:
        from ..core.gguf.default_model import default_model

        return Path(default_model())
    return Path(source)


def deeper_target(source: str | os.PathLike[str] | None = None, *, extra_layers: int = 60,
                  weight_type: str = "f16", cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cached deeper target of `source` (default: the default model), written on first use."""
    source = _source(source)
    stat = source.stat()
    key = repr((FORMAT_VERSION, source.name, stat.st_size, extra_layers, weight_type)).encode()
    folder = Path(cache_dir) if cache_dir is not None else _home() / "synthetic"
    path = folder / f"target-{source.stem}-x{extra_layers}-{weight_type}-{hashlib.sha256(key).hexdigest()[:10]}.gguf"
    if path.is_file():
        return path
    return write_deeper_target(source, path, extra_layers=extra_layers, weight_type=weight_type)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyllama90a.tools.synthetic_target", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", help="llama GGUF to extend (default: the default model)")
    parser.add_argument("--extra-layers", type=int, default=60)
    parser.add_argument("--weight-type", default="f16", choices=WEIGHT_TYPES)
    parser.add_argument("--out", help="write here (always rewritten) instead of the cache")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.out:
        path = write_deeper_target(_source(args.source), args.out, extra_layers=args.extra_layers,
                                   weight_type=args.weight_type)
    else:
        path = deeper_target(args.source, extra_layers=args.extra_layers, weight_type=args.weight_type)
    print(f"{path.stat().st_size / 2**20:.1f} MiB in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
