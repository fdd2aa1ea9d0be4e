"""Random-weight GGUF models of realistic llama shapes, for benchmarks and GPU tests without downloads.

    from pyllama90a.tools.synthetic import synthetic_model
    path = synthetic_model("1b-hd64")          # cached in $PYLLAMA90A_HOME/synthetic, made on first use
    python -m pyllama90a.tools.synthetic 8b-hd128 --weight-type q4_0 [--out PATH]

The files are llama-architecture GGUFs (EXAONE's for rope=Rope(neox=True): llama's tensors, NEOX RoPE) with a
SentencePiece-style ("llama") vocabulary of made-up, distinct tokens; fim=("pre", "suf", "mid", ...) ends it with
fill-in-the-middle control tokens, named in the metadata (tokenizer.ggml.fim_*_token_id) as a coder model's are.
The weights are noise of about std 0.02 (norms are 1.0), so activations stay sane and generation runs without NaN,
but the text produced is meaningless: use them for speed and memory measurements and for checking that kernels
run, never for quality.

The files are written with llama.cpp's `gguf` package (GGUFWriter), a dependency of pyllama90a.

Tensors are made and written one at a time, so memory stays at about one tensor. By default
("fast") quantized weights are built directly as random Q4_0 / Q8_0 blocks (a random fp16 scale
near the target and random, zero-mean quants), which is ~10x quicker than drawing normal floats and
quantizing them; method="quantize" draws normal floats and runs gguf.quants.quantize instead.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import sys
import time
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "FIM_TEXTS",
    "SHAPES",
    "WEIGHT_TYPES",
    "Rope",
    "Shape",
    "fim_token_ids",
    "import_gguf",
    "synthetic_model",
    "write_synthetic",
]

WEIGHT_TYPES = ("f16", "q8_0", "q4_0", "f32")  # f32: exact weights, for checks against numpy (LoRA merges)
METHODS = ("fast", "quantize")
WEIGHT_STD = 0.02
RMS_EPS = 1e-5
FORMAT_VERSION = 1  # part of the cache key: bump when the files written here change

# the vocabulary's first tokens: unk, bos, eos, then the 256 byte tokens
UNK_ID, BOS_ID, EOS_ID = 0, 1, 2
N_FIXED_TOKENS = 3 + 256
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_BYTE = 1, 2, 3, 6
# fill-in-the-middle tokens a vocabulary may end with (fim=...), in this order: Qwen2.5-Coder's texts
FIM_TEXTS = {"pre": "<|fim_prefix|>", "suf": "<|fim_suffix|>", "mid": "<|fim_middle|>", "pad": "<|fim_pad|>",
             "rep": "<|repo_name|>", "sep": "<|file_sep|>"}


@dataclass(frozen=True)
class Shape:
    """Hyperparameters of a llama-architecture model; head_dim is n_embd // n_head."""

    name: str
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    n_ctx_train: int = 131072
    rope_theta: float = 500000.0

    def __post_init__(self) -> None:
        for field in ("n_embd", "n_layer", "n_head", "n_head_kv", "n_ff", "n_vocab", "n_ctx_train"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"Shape {self.name!r}: {field} must be a positive integer, got {value!r}")
        if self.n_embd % self.n_head:
            raise ValueError(f"Shape {self.name!r}: n_embd {self.n_embd} is not a multiple of n_head {self.n_head}")
        if self.head_dim % 2:
            raise ValueError(f"Shape {self.name!r}: head_dim {self.head_dim} must be even (RoPE)")
        if self.n_head % self.n_head_kv:
            raise ValueError(f"Shape {self.name!r}: n_head {self.n_head} is not a multiple of "
                             f"n_head_kv {self.n_head_kv}")
        if self.n_vocab < N_FIXED_TOKENS + 1:
            raise ValueError(f"Shape {self.name!r}: n_vocab must be at least {N_FIXED_TOKENS + 1}")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    @property
    def n_embd_kv(self) -> int:
        return self.n_head_kv * self.head_dim

    @property
    def n_params(self) -> int:
        e, kv, f = self.n_embd, self.n_embd_kv, self.n_ff
        per_layer = 2 * e + 2 * e * e + 2 * e * kv + 3 * e * f
        return 2 * e * self.n_vocab + e + self.n_layer * per_layer

    def kv_bytes_f16(self, n_ctx: int) -> int:
        """Bytes of the K (or of the V) cache in f16 for n_ctx cells."""
        return self.n_layer * n_ctx * self.n_embd_kv * 2


@dataclass(frozen=True)
class Rope:
    """RoPE other than llama's plain kind, for the kernels that apply it themselves (the K store of patch 0043).
    neox: channel k pairs with k + head_dim/2 (the file is an EXAONE model: llama's tensors, NEOX RoPE);
    freq_factors: a rope_freqs tensor, one factor a pair (Llama 3.1's kind); yarn_factor: YaRN context scaling by
    this factor (the original context n_ctx_train / factor), 0 for none."""

    neox: bool = False
    freq_factors: bool = False
    yarn_factor: float = 0.0

    def __post_init__(self) -> None:
        if not (isinstance(self.yarn_factor, (int, float)) and not isinstance(self.yarn_factor, bool) and
                (self.yarn_factor == 0 or 1 < self.yarn_factor < 1e6)):
            raise ValueError(f"Rope: yarn_factor is 0 (none) or a context stretch above 1, got {self.yarn_factor!r}")

    @property
    def architecture(self) -> str:
        return "exaone" if self.neox else "llama"


SHAPES: dict[str, Shape] = {s.name: s for s in (
    Shape("tiny", n_embd=256, n_layer=4, n_head=4, n_head_kv=2, n_ff=512, n_vocab=512),
    Shape("smollm-135m", n_embd=576, n_layer=30, n_head=9, n_head_kv=3, n_ff=1536, n_vocab=49152),
    Shape("1b-hd64", n_embd=2048, n_layer=16, n_head=32, n_head_kv=8, n_ff=8192, n_vocab=32000),
    Shape("8b-hd128", n_embd=4096, n_layer=32, n_head=32, n_head_kv=8, n_ff=14336, n_vocab=32000),
    # 7 query heads a KV head (Qwen2.5-7B's attention): the fused decode's 8-column instances, one column padded
    Shape("7b-gqa7", n_embd=3584, n_layer=28, n_head=28, n_head_kv=4, n_ff=18944, n_vocab=32000),
)}


def _gqa_shape(name: str, n_embd: int, n_head: int, n_head_kv: int) -> Shape:
    return Shape(name, n_embd=n_embd, n_layer=2, n_head=n_head, n_head_kv=n_head_kv, n_ff=512, n_vocab=512)


# Small shapes for checking attention paths (the tests, `python -m pyllama90a.selftest`): GQA ratios 1, 3, 4 and 8,
# head dims 64 and 128. Two layers, so that layer 1 reads K and V quantized from layer 0's output.
GQA_SHAPES: dict[str, Shape] = {s.name: s for s in (
    _gqa_shape("gqa1-hd64", 256, 4, 4),
    _gqa_shape("gqa1-hd128", 256, 2, 2),
    _gqa_shape("gqa3-hd64", 384, 6, 2),
    _gqa_shape("gqa4-hd64", 512, 8, 2),
    _gqa_shape("gqa4-hd128", 512, 4, 1),
    _gqa_shape("gqa4-hd128-2kv", 1024, 8, 2),  # GQA 4 with two KV heads, for code that groups KV heads
    _gqa_shape("gqa8-hd64", 512, 8, 1),
    _gqa_shape("gqa8-hd128", 1024, 8, 1),
)}


# -- the gguf package ------------------------------------------------------------------------------

def import_gguf() -> types.ModuleType:
    """llama.cpp's `gguf` package (a dependency of pyllama90a), imported on first use: only writing or
    editing a model file needs it."""
    try:
        import gguf
    except ImportError as e:
        raise ImportError(f"pyllama90a.tools.synthetic needs the `gguf` package (pip install gguf): {e}") from e
    return gguf


# -- vocabulary ------------------------------------------------------------------------------------

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


@contextlib.contextmanager
def gguf_written_whole(path: Path, architecture: str) -> Iterator[Any]:
    """A GGUFWriter onto a temporary name next to `path`, renamed to `path` when the block ends and removed if it
    fails: the file is there whole or not at all (another process may be reading the cache)."""
    gguf = import_gguf()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    writer = gguf.GGUFWriter(tmp, architecture)
    try:
        yield writer
        writer.close()
        os.replace(tmp, path)
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise


def _filler_texts() -> Iterator[str]:
    """Distinct short strings: ▁a ▁b .. a b .. ▁aa ▁ab .. aa ab .., then longer ones."""
    words = [""]
    while True:
        words = [w + c for w in words for c in _LETTERS]
        for w in words:
            yield "\u2581" + w
        yield from words


def _fim_kinds(fim: Sequence[str]) -> tuple[str, ...]:
    """The FIM tokens asked for, in FIM_TEXTS' order (the file does not depend on the order given)."""
    unknown = sorted(set(fim) - FIM_TEXTS.keys())
    if isinstance(fim, str) or unknown:
        raise ValueError(f"fim takes FIM token kinds among {', '.join(FIM_TEXTS)}, got {fim!r}")
    return tuple(kind for kind in FIM_TEXTS if kind in fim)


def fim_token_ids(n_vocab: int, fim: Sequence[str]) -> dict[str, int]:
    """The ids of the FIM tokens of a vocabulary of n_vocab written with `fim`: its last ones."""
    kinds = _fim_kinds(fim)
    return {kind: n_vocab - len(kinds) + i for i, kind in enumerate(kinds)}


def write_shape_keys(writer: Any, s: Shape) -> None:
    """The GGUF keys of a synthetic shape's transformer (every synthetic writer's: models and the reranker)."""
    writer.add_context_length(s.n_ctx_train)
    writer.add_embedding_length(s.n_embd)
    writer.add_block_count(s.n_layer)
    writer.add_feed_forward_length(s.n_ff)
    writer.add_head_count(s.n_head)
    writer.add_head_count_kv(s.n_head_kv)
    writer.add_rope_freq_base(float(s.rope_theta))
    writer.add_layer_norm_rms_eps(RMS_EPS)


def write_vocab_keys(writer: Any, tokens: list[str], scores: list[float], token_types: list[int]) -> None:
    """The GGUF keys of a synthetic vocabulary (_vocab's), with its BOS, EOS and UNK and BOS added."""
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(token_types)
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_unk_token_id(UNK_ID)
    writer.add_add_bos_token(True)


def _vocab(n_vocab: int, fim: Sequence[str] = ()) -> tuple[list[str], list[float], list[int]]:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types_ = [TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_CONTROL] + [TOKEN_BYTE] * 256
    fim_ids = fim_token_ids(n_vocab, fim)
    if n_vocab - len(fim_ids) <= N_FIXED_TOKENS:
        raise ValueError(f"n_vocab {n_vocab} has no room for {len(fim_ids)} FIM tokens and a normal one")
    fill = _filler_texts()
    tokens += [next(fill) for _ in range(n_vocab - len(tokens) - len(fim_ids))] + [FIM_TEXTS[k] for k in fim_ids]
    types_ += [TOKEN_NORMAL] * (n_vocab - len(types_) - len(fim_ids)) + [TOKEN_CONTROL] * len(fim_ids)
    scores = [0.0] * N_FIXED_TOKENS + [-float(i) for i in range(n_vocab - N_FIXED_TOKENS)]
    return tokens, scores, types_


# -- tensors ---------------------------------------------------------------------------------------

def _tensor_plan(shape: Shape, rope: Rope | None = None) -> list[tuple[str, tuple[int, ...]]]:
    """(name, numpy shape) in file order; a numpy shape is the ggml shape reversed."""
    e, kv, f, v = shape.n_embd, shape.n_embd_kv, shape.n_ff, shape.n_vocab
    plan: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (v, e))]
    for i in range(shape.n_layer):
        plan += [
            (f"blk.{i}.attn_norm.weight", (e,)),
            (f"blk.{i}.attn_q.weight", (e, e)),
            (f"blk.{i}.attn_k.weight", (kv, e)),
            (f"blk.{i}.attn_v.weight", (kv, e)),
            (f"blk.{i}.attn_output.weight", (e, e)),
            (f"blk.{i}.ffn_norm.weight", (e,)),
            (f"blk.{i}.ffn_gate.weight", (f, e)),
            (f"blk.{i}.ffn_up.weight", (f, e)),
            (f"blk.{i}.ffn_down.weight", (e, f)),
        ]
    plan += [("output_norm.weight", (e,)), ("output.weight", (v, e))]
    if rope is not None and rope.freq_factors:  # last: the other tensors' seeds (their indices) stay
        plan.append((ROPE_FREQS, (shape.head_dim // 2,)))
    return plan


def _nibbles(rng: np.random.Generator, n: int) -> np.ndarray:
    """n random bytes of two 4-bit quants each, uniform over 1..15 but with 0 read as 8, so that the
    dequantized values (q - 8) are symmetric around 0 (-7..7)."""
    b = rng.integers(0, 256, size=n, dtype=np.uint8)
    lo = b & np.uint8(0x0F)
    hi = b >> np.uint8(4)
    lo[lo == 0] = 8
    hi[hi == 0] = 8
    packed: np.ndarray = lo | (hi << np.uint8(4))  # (numpy's stubs say Any for uint8 bit operations)
    return packed


def _random_scales(rng: np.random.Generator, n_blocks: int, d: float) -> np.ndarray:
    return (rng.uniform(0.75 * d, 1.25 * d, size=(n_blocks, 1))).astype(np.float16).view(np.uint8)


def _fast_blocks(rng: np.random.Generator, np_shape: tuple[int, ...], weight_type: str) -> np.ndarray:
    """Random Q4_0 / Q8_0 blocks, as a uint8 array of shape (rows, row bytes)."""
    rows, cols = np_shape
    n_blocks = rows * cols // 32
    if weight_type == "q4_0":
        # quants -7..7 (with 0 twice as likely): std ~4.18
        d = WEIGHT_STD / 4.18
        blocks = np.concatenate([_random_scales(rng, n_blocks, d),
                                 _nibbles(rng, n_blocks * 16).reshape(n_blocks, 16)], axis=1)
    else:
        # int8 quants uniform over -127..127: std ~73.6
        d = WEIGHT_STD / 73.6
        qs = rng.integers(-127, 128, size=(n_blocks, 32), dtype=np.int8).view(np.uint8)
        blocks = np.concatenate([_random_scales(rng, n_blocks, d), qs], axis=1)
    return blocks.reshape(rows, -1)


ROPE_FREQS = "rope_freqs.weight"


def _make_tensor(gguf: types.ModuleType, rng: np.random.Generator, np_shape: tuple[int, ...],
                 weight_type: str, method: str, name: str = "") -> np.ndarray:
    if name == ROPE_FREQS:  # the pairs' factors from 1 to 8 (Llama 3.1's span): each pair's angle its own
        return np.linspace(1.0, 8.0, np_shape[0], dtype=np.float32)
    if len(np_shape) == 1:
        return np.ones(np_shape, dtype=np.float32)
    if weight_type in ("q4_0", "q8_0") and method == "fast":
        return _fast_blocks(rng, np_shape, weight_type)
    data = rng.standard_normal(np_shape, dtype=np.float32)
    data *= np.float32(WEIGHT_STD)
    quantized: np.ndarray = gguf.quants.quantize(data, _qtype(gguf, weight_type))  # (gguf: imported lazily)
    return quantized


def _qtype(gguf: types.ModuleType, weight_type: str) -> Any:
    return {"f16": gguf.GGMLQuantizationType.F16, "q8_0": gguf.GGMLQuantizationType.Q8_0,
            "q4_0": gguf.GGMLQuantizationType.Q4_0, "f32": gguf.GGMLQuantizationType.F32}[weight_type]


def _tensor_nbytes(np_shape: tuple[int, ...], weight_type: str) -> int:
    n = int(np.prod(np_shape))
    if len(np_shape) == 1:
        return 4 * n
    return {"f16": 2 * n, "q8_0": n // 32 * 34, "q4_0": n // 32 * 18, "f32": 4 * n}[weight_type]


def _resolve_shape(shape: str | Shape) -> Shape:
    if isinstance(shape, Shape):
        return shape
    if shape in SHAPES:
        return SHAPES[shape]
    raise ValueError(f"unknown shape {shape!r}; known: {', '.join(SHAPES)} (or pass a Shape)")


def _check_args(shape: Shape, weight_type: str, method: str) -> None:
    if weight_type not in WEIGHT_TYPES:
        raise ValueError(f"weight_type must be one of {', '.join(WEIGHT_TYPES)}, got {weight_type!r}")
    if method not in METHODS:
        raise ValueError(f"method must be one of {', '.join(METHODS)}, got {method!r}")
    if weight_type in ("q4_0", "q8_0"):
        for what, n in (("n_embd", shape.n_embd), ("n_ff", shape.n_ff)):
            if n % 32:
                raise ValueError(f"{weight_type} needs rows that are a multiple of 32; {what} is {n}")


def file_size_estimate(shape: str | Shape, weight_type: str = "q4_0") -> int:
    """Bytes of tensor data (the header adds well under 1 MB)."""
    s = _resolve_shape(shape)
    return sum(_tensor_nbytes(np_shape, weight_type) for _, np_shape in _tensor_plan(s))


def write_synthetic(shape: str | Shape, path: str | os.PathLike[str], *, weight_type: str = "q4_0",
                    seed: int = 0, method: str = "fast", fim: Sequence[str] = (), rope: Rope | None = None,
                    adjust: Callable[[str, np.ndarray], np.ndarray] | None = None) -> Path:
    """Write a random-weight llama GGUF of `shape` (a SHAPES name or a Shape) to `path`.

    2-D weights are `weight_type` (f16, q8_0, q4_0 or f32), norms f32 ones. adjust: (name, weights) -> the
    weights written instead, for f32 files (e.g. a LoRA merged into them by hand). fim: the FIM tokens (FIM_TEXTS'
    kinds) the vocabulary ends with, control tokens named in the metadata (fim_token_ids says where they are). rope:
    a RoPE other than llama's plain one (Rope). The file is written under a temporary name next to `path` and
    renamed at the end, one tensor in memory at a time.
    """
    s = _resolve_shape(shape)
    _check_args(s, weight_type, method)
    if adjust is not None and weight_type != "f32":
        raise ValueError("adjust needs weight_type='f32' (it edits the weights as they are written)")
    tokens, scores, token_types = _vocab(s.n_vocab, fim)  # (checks fim)
    gguf = import_gguf()
    path = Path(path)
    with gguf_written_whole(path, rope.architecture if rope else "llama") as writer:
        file_type = {"f16": gguf.LlamaFileType.MOSTLY_F16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
                     "q4_0": gguf.LlamaFileType.MOSTLY_Q4_0, "f32": gguf.LlamaFileType.ALL_F32}[weight_type]
        writer.add_name(f"synthetic-{s.name}-{weight_type}")
        writer.add_description("random weights written by pyllama90a.tools.synthetic; output text is meaningless")
        write_shape_keys(writer, s)
        writer.add_rope_dimension_count(s.head_dim)
        if rope is not None and rope.yarn_factor:
            writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
            writer.add_rope_scaling_factor(rope.yarn_factor)
            writer.add_rope_scaling_orig_ctx_len(int(s.n_ctx_train / rope.yarn_factor))
        writer.add_vocab_size(s.n_vocab)
        writer.add_file_type(int(file_type))
        if weight_type in ("q4_0", "q8_0"):
            writer.add_quantization_version(gguf.GGML_QUANT_VERSION)

        write_vocab_keys(writer, tokens, scores, token_types)
        writer.add_add_eos_token(False)
        for kind, token in fim_token_ids(s.n_vocab, fim).items():
            writer.add_uint32(f"tokenizer.ggml.fim_{kind}_token_id", token)

        plan = _tensor_plan(s, rope)
        for name, np_shape in plan:
            if len(np_shape) == 1:
                writer.add_tensor_info(name, np_shape, np.dtype(np.float32), _tensor_nbytes(np_shape, "f32"))
            else:
                writer.add_tensor_info(name, np_shape, np.dtype(np.float32),
                                       _tensor_nbytes(np_shape, weight_type),
                                       raw_dtype=_qtype(gguf, weight_type))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for index, (name, np_shape) in enumerate(plan):
            rng = np.random.default_rng([seed, index])  # each tensor its own stream: order-independent
            data = _make_tensor(gguf, rng, np_shape, weight_type, method, name)
            writer.write_tensor_data(data if adjust is None else np.asarray(adjust(name, data), dtype=np.float32))
    return path


def _home() -> Path:
    return Path(os.environ.get("PYLLAMA90A_HOME") or Path.home() / ".cache" / "pyllama90a")


def cached_path(shape: str | Shape, *, weight_type: str = "q4_0", cache_dir: str | os.PathLike[str] | None = None,
                method: str = "fast", fim: Sequence[str] = (), rope: Rope | None = None) -> Path:
    """Where synthetic_model keeps the file for these arguments (it may not exist yet)."""
    s = _resolve_shape(shape)
    kinds = _fim_kinds(fim)
    # (FIM tokens and a RoPE kind join the key only when asked for: the files without them keep their names)
    key = repr((FORMAT_VERSION, asdict(s), weight_type, method) + ((("fim", kinds),) if kinds else ()) +
               ((("rope", asdict(rope)),) if rope else ())).encode()
    digest = hashlib.sha256(key).hexdigest()[:10]
    folder = Path(cache_dir) if cache_dir is not None else _home() / "synthetic"
    return folder / f"synthetic-{s.name}-{weight_type}{'-fim' if kinds else ''}{'-rope' if rope else ''}-{digest}.gguf"


def synthetic_model(shape: str | Shape, *, weight_type: str = "q4_0",
                    cache_dir: str | os.PathLike[str] | None = None, method: str = "fast",
                    fim: Sequence[str] = (), rope: Rope | None = None) -> Path:
    """A cached random-weight GGUF of `shape`, written (atomically, seed 0) on first use.

    The cache folder is `cache_dir`, default $PYLLAMA90A_HOME/synthetic (~/.cache/pyllama90a/synthetic).
    """
    path = cached_path(shape, weight_type=weight_type, cache_dir=cache_dir, method=method, fim=fim, rope=rope)
    if path.is_file():
        return path
    return write_synthetic(shape, path, weight_type=weight_type, seed=0, method=method, fim=fim, rope=rope)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyllama90a.tools.synthetic",
                                     description="Write (or find in the cache) a random-weight llama GGUF.")
    parser.add_argument("shape", choices=sorted(SHAPES), help="model shape")
    parser.add_argument("--weight-type", default="q4_0", choices=WEIGHT_TYPES)
    parser.add_argument("--method", default="fast", choices=METHODS,
                        help="fast: random quantized blocks; quantize: normal floats through gguf.quants")
    parser.add_argument("--out", help="write here (always rewritten) instead of the cache")
    parser.add_argument("--seed", type=int, default=0, help="seed (with --out only)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.out:
        path = write_synthetic(args.shape, args.out, weight_type=args.weight_type, seed=args.seed,
                               method=args.method)
    else:
        path = synthetic_model(args.shape, weight_type=args.weight_type, method=args.method)
    took = time.perf_counter() - start
    print(f"{path.stat().st_size / 2**20:.1f} MiB in {took:.1f} s", file=sys.stderr)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
