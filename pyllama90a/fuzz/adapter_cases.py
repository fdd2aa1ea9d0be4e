"""The fuzz target "adapter": LoRA adapters for a real model, mutated, then loaded and used (issue 33).

A base adapter is a well-formed LoRA GGUF (pyllama90a.tools.synthetic_lora.write_synthetic_lora) for the default model's
shapes ("adapter-real": SmolLM2's weights, tied output) or the tiny synthetic model's ("adapter-tiny": its own
output.weight, so that a pair renamed to token_embd reaches a decode). A case mutates it with gguf_generator's
classes that apply to an adapter's header (metadata, tensor infos, truncation, bit flips) and with this module's
(a pair's rank, dimensions, the weight it adapts, its type and its values, alpha), then, in the child, loads the
model with it at a scale and decodes: a Model's greedy generation, and a BatchEngine request naming the adapter.
A bad adapter or scale must be a pyllama90a.errors exception (LoraAdapterError at load, non-finite output at the
request), never a signal. Ops are gguf_mutations' JSON ops, so shrinking and replay work as for model files.
"""
from __future__ import annotations

import functools
import os
import queue
import random
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from ..core.gguf.header import GGML_TYPE_SIZES, read_header
from ..tools.synthetic import Shape, synthetic_model
from ..tools.synthetic_lora import write_synthetic_lora
from .gguf_file import F32, F64, STRING, U32, GGUFFile, read_gguf
from .gguf_generator import FLOAT_SPECIALS, _Generator
from .gguf_mutations import typed, write_case
from .model_case import _show_native_log
from .runner import Stage

ADAPTER_BASES = ("adapter-real", "adapter-tiny")
FORMAT = 1  # in the cached base adapters' names: a change to how they are made gives new files
_LAYERS = (0, 1)
_MATRICES = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
# rank 32: a lora_b row (rank values) fits the 32-value blocks; the tiny one's 256 fits every block size
_RANK = {"adapter-real": 32, "adapter-tiny": 256}
# the weights a pair may be renamed to: other matrices, embeddings, norms, biases, none
_OTHER_WEIGHTS = ("token_embd.weight", "output.weight", "blk.0.attn_norm.weight", "output_norm.weight",
                  "blk.0.attn_q.bias", "rope_freqs.weight", "blk.99.attn_q.weight", "blk.1.ffn_down.weight",
                  "blk.0.attn_k.weight", "nonexistent.weight")
SCALES = [1.0, 1.0, 0.5, 0.0, -1.0, 2.0, 100.0, -100.0, 100.5, 1e30, 3.4028234663852886e38, float("nan"),
          float("inf"), -float("inf")]
_GENERIC = ("value:float-special", "value:string", "value:enum", "value:type-change", "value:missing-key",
            "value:alignment", "struct:truncate", "struct:flip", "struct:count", "struct:tensor-shape",
            "struct:tensor-type", "struct:tensor-offset", "struct:tensor-name", "struct:tensor-missing",
            "struct:tensor-role-type")
_OWN = ("adapter:rank", "adapter:dims", "adapter:transpose", "adapter:target", "adapter:type", "adapter:values",
        "adapter:alpha", "adapter:unpaired")
PROMPT = "Hello"


def _home() -> Path:
    return Path(os.environ.get("PYLLAMA90A_HOME") or Path.home() / ".cache" / "pyllama90a")


def model_path(base: str) -> Path:
    """The model an adapter base is made for (and decoded with)."""
    if base == "adapter-real":
        from ..core.gguf.default_model import default_model

        return Path(default_model())
    if base == "adapter-tiny":
        return Path(synthetic_model("tiny"))
    raise ValueError(f"unknown adapter base {base!r}; known: {', '.join(ADAPTER_BASES)}")


def _shape_of(path: Path) -> Shape:
    """The synthetic Shape whose weight matrices have the shapes of the llama-architecture model at `path`."""
    header = read_header(path)
    arch = header.architecture

    def value(key: str) -> int:
        found = header.get(f"{arch}.{key}")
        return int(found[0] if isinstance(found, list) else found)
    return Shape(path.stem, n_embd=value("embedding_length"), n_layer=value("block_count"),
                 n_head=value("attention.head_count"), n_head_kv=value("attention.head_count_kv"),
                 n_ff=value("feed_forward_length"), n_vocab=len(header.get("tokenizer.ggml.tokens")))


@cache
def load_adapter_base(name: str) -> GGUFFile:
    """The parsed base adapter `name`, written under $PYLLAMA90A_HOME/synthetic on first use."""
    model = model_path(name)
    path = _home() / "synthetic" / f"lora-fuzz-{name}-{FORMAT}-{model.stem}.gguf"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        targets = [f"blk.{i}.{m}.weight" for i in _LAYERS for m in _MATRICES]
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        write_synthetic_lora(_shape_of(model), tmp, targets, rank=_RANK[name], alpha=2.0 * _RANK[name])
        os.replace(tmp, path)
    read_header(path)  # a base must itself be valid
    return read_gguf(path)


class _AdapterGenerator(_Generator):
    """gguf_generator's classes over an adapter's header, and the classes of LoRA pairs."""

    def pair(self) -> tuple[Any, Any]:
        """A random pair's lora_a and lora_b tensors (of the base)."""
        a = self.rng.choice([t for t in self.base.tensors if t.name.endswith(".lora_a")])
        b = next(t for t in self.base.tensors if t.name == a.name[:-1] + "b")
        return a, b

    def one(self) -> Any:
        return self.rng.choice(self.pair())

    @staticmethod
    def _relaid(name: str, dims: list[int], ggml_type: int = 0, fill: int = 0x00) -> list[dict]:
        """New dims for a tensor, and data of their size (retype lays the data section out again)."""
        return [{"op": "tensor", "name": name, "field": "dims", "value": dims},
                {"op": "retype", "name": name, "type": ggml_type, "fill": fill}]

    def m_rank(self) -> list[dict]:
        a, b = self.pair()
        rank = self.rng.choice([1, 2, 16, 31, 33, 64, 256])
        which = self.rng.choice(["a", "b", "both"])
        ops = []
        if which in ("a", "both"):
            ops += self._relaid(a.name, [a.dims[0], rank])
        if which in ("b", "both"):
            ops += self._relaid(b.name, [rank, b.dims[1]])
        return ops

    def m_dims(self) -> list[dict]:
        t = self.one()
        extra = self.rng.choice([[1], [2], [1, 1], [2, 3]])
        dims = self.rng.choice([t.dims + extra, t.dims[:1], [t.dims[0] * t.dims[1]]])
        return self._relaid(t.name, dims[:4])

    def m_transpose(self) -> list[dict]:
        t = self.one()
        return [{"op": "tensor", "name": t.name, "field": "dims", "value": t.dims[::-1]}]

    def m_target(self) -> list[dict]:
        a, b = self.pair()
        target = self.rng.choice(_OTHER_WEIGHTS)
        return [{"op": "tensor", "name": a.name, "field": "name", "value": f"{target}.lora_a"},
                {"op": "tensor", "name": b.name, "field": "name", "value": f"{target}.lora_b"}]

    def m_type(self) -> list[dict]:
        t = self.one()
        fitting = [ty for ty in GGML_TYPE_SIZES if t.dims[0] % GGML_TYPE_SIZES[ty][0] == 0]
        ggml_type = self.rng.choice(fitting if self.rng.random() < 0.9 else list(range(44)))
        return [{"op": "retype", "name": t.name, "type": ggml_type, "fill": self.rng.choice([0x00, 0x11, 0xff])}]

    def m_values(self) -> list[dict]:  # NaN (0xff) or huge values (0x7f) in an f32, f16 or bf16 tensor
        t = self.one()
        return [{"op": "retype", "name": t.name, "type": self.rng.choice([0, 1, 30]),
                 "fill": self.rng.choice([0xff, 0x7f])}]

    def m_alpha(self) -> list[dict]:
        rng = self.rng
        value = rng.choice([typed(F32, rng.choice(FLOAT_SPECIALS[F32])), typed(F64, 16.0), typed(U32, 16),
                            typed(STRING, "16")])
        return [{"op": "set", "key": "adapter.lora.alpha", "value": value}]

    def m_unpaired(self) -> list[dict]:
        t = self.one()
        if self.rng.random() < 0.5:
            return [{"op": "drop_tensor", "name": t.name}]
        suffix = self.rng.choice([".lora_c", ".weight", "_norm.weight", ".lora_a.lora_b", ""])
        return [{"op": "tensor", "name": t.name, "field": "name", "value": t.name[:-7] + suffix}]

    def mutation(self, cls: str) -> dict:
        if cls.startswith("adapter:"):
            return {"cls": cls, "ops": getattr(self, "m_" + cls.split(":")[1])()}
        return super().mutation(cls)


def generate_adapter_case(seed: int, index: int) -> dict:
    """Case `index` of the adapter run with `seed`: a base, one to three mutations (one in five cases none: the
    scale alone), the scale, and whether a BatchEngine request uses it."""
    rng = random.Random(f"adapter/{seed}/{index}")
    base = rng.choices(ADAPTER_BASES, [3, 1])[0]
    gen = _AdapterGenerator(rng, load_adapter_base(base))
    n = rng.choices([0, 1, 2, 3], [1, 5, 3, 1])[0]
    mutations = [gen.mutation(rng.choice(_OWN) if rng.random() < 0.6 else rng.choice(_GENERIC)) for _ in range(n)]
    # those that lay the data out again first: retype copies each tensor's data from its base offset and size,
    # which a struct:tensor-offset or tensor-shape mutation before it would have made absurd
    mutations.sort(key=lambda m: not any(op["op"] == "retype" for op in m["ops"]))
    args = {"scale": rng.choice(SCALES) if rng.random() < 0.4 else 1.0, "engine": rng.random() < 0.3}
    return {"target": "adapter", "base": base, "mutations": mutations, "model_args": args}


def exercise(model: Path, adapter: Path, stage: Stage, scale: float, engine: bool) -> None:
    """Load `model` with `adapter` at `scale` and decode: a Model's generation, or a BatchEngine request naming
    the adapter (loaded at scale 0) at `scale`; a request's error is raised as the library raises it."""
    import pyllama90a as pl

    _show_native_log()
    stage("load")
    if not engine:
        with pl.Model(model, lora=[(adapter, scale)], n_ctx=128, n_threads=1) as m:
            stage("generate")
            m.generate(PROMPT, max_tokens=3, temperature=0)
        return
    with pl.BatchEngine(model, lora=[(adapter, 0.0)], parallel=1, n_ctx=128, n_threads=1) as e:
        stage("engine")
        chunks: queue.Queue[Any] = queue.Queue()
        e.submit(PROMPT, chunks.put, max_tokens=3, temperature=0, lora={0: scale})
        while True:
            chunk = chunks.get(timeout=60)
            if chunk.error is not None:
                raise chunk.error
            if chunk.finish_reason is not None:
                return


def _run_case(spec: dict, folder: Path, stage: Stage) -> None:
    stage("build")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "adapter.gguf"
    write_case(load_adapter_base(spec["base"]), spec["mutations"], path)
    try:
        args = spec.get("model_args", {})
        exercise(model_path(spec["base"]), path, stage, args.get("scale", 1.0), args.get("engine", False))
    finally:
        path.unlink(missing_ok=True)


def adapter_job(spec: dict, folder: Path) -> Callable[[Stage], None]:  # a runner job function (picklable)
    """The child function for an adapter `spec`: write the mutated adapter under `folder`, load it, decode."""
    return functools.partial(_run_case, spec, folder)
