"""GGUF mutation cases generated from a seed (gguf_mutations.py says what a case and its ops are): a generator per
base file that picks a mutation class and writes its ops, a third of the cases with this project's own paths."""
from __future__ import annotations

import math
import random
from typing import Any

from .gguf_file import (
    ARRAY,
    BOOL,
    F32,
    F64,
    FLOAT_TYPES,
    I8,
    I16,
    I32,
    I64,
    INT_TYPES,
    STRING,
    U8,
    U16,
    U32,
    U64,
    GGUFFile,
)
from .gguf_mutations import typed
from .tensor_types import role_type_ops

# -- what the generator picks from ----------------------------------------------------------------------

INT_BOUNDARIES = {
    U8: [0, 1, 2, 127, 128, 255],
    I8: [0, 1, -1, -128, 127],
    U16: [0, 1, 2, 32768, 65535],
    I16: [0, 1, -1, -32768, 32767],
    U32: [0, 1, 2, 3, 7, 1000, 65536, 2**24, 2**30, 2**31 - 1, 2**31, 2**32 - 1],
    I32: [0, 1, -1, -1000, 2**24, 2**31 - 1, -2**31],
    U64: [0, 1, 2**32, 2**40, 2**63, 2**64 - 1],
    I64: [0, 1, -1, 2**40, 2**63 - 1, -2**63],
}
FLOAT_SPECIALS = {
    F32: [0.0, -0.0, -1.0, 1.0, math.nan, math.inf, -math.inf, 1e-45, 1e-30, 1e30, 3.4028234663852886e38,
          -3.4028234663852886e38],
    F64: [0.0, -0.0, -1.0, math.nan, math.inf, -math.inf, 5e-324, 1e-300, 1e300, 1.7976931348623157e308],
}
BOOL_BYTES = [0, 1, 2, 255]  # a GGUF bool is one byte: 2 and 255 are neither false nor true
STRINGS: list[Any] = ["", " ", "a\u0000b", {"hex": "fffefd"}, {"hex": "c3"}, {"hex": "eda080"}, "%s%n%s%n",
                      "{{", "\u00e9\u4e2d\U0001f600", {"repeat": "x", "times": 100_000},
                      {"repeat": "\u00e9", "times": 1 << 20}]
ENUMS: dict[str, list[str]] = {
    "tokenizer.ggml.model": ["llama", "gpt2", "bert", "t5", "rwkv", "ugm", "plamo2", "none", "no_vocab", "",
                             "LLAMA", "unknown"],
    "tokenizer.ggml.pre": ["default", "llama3", "llama-bpe", "qwen2", "gpt-2", "smollm", "deepseek-llm", "tekken",
                           "chameleon", "falcon", "", "unknown-pre"],
    "general.architecture": ["llama", "bert", "gpt2", "t5", "t5encoder", "mamba", "qwen2", "qwen3moe", "gemma3",
                             "llama4", "deci", "grok", "nomic-bert", "jamba", "rwkv6", "clip", "", "nonexistent"],
    "general.type": ["model", "adapter", "mmproj", "vocab", ""],
    "tokenizer.chat_template": ["", "chatml", "llama3", "gemma", "mistral-v7", "deepseek3", "phi3", "zephyr",
                                "{{", "{% for m in messages %}{{ m.content }}{% endfor %}", "<|im_start|>"],
    "{arch}.rope.scaling.type": ["none", "linear", "yarn", "longrope", "", "bogus"],
    "adapter.type": ["lora", "alora", ""],
}
ENUM_WEIGHTS = {"tokenizer.ggml.model": 4, "tokenizer.ggml.pre": 2, "general.architecture": 2}  # the rest 1
# keys the bases lack, with a type each; values come from the boundaries of that type
EXTRA_KEYS: dict[str, int] = {
    "{arch}.expert_count": U32, "{arch}.expert_used_count": U32, "{arch}.expert_shared_count": U32,
    "{arch}.expert_feed_forward_length": U32, "{arch}.expert_weights_scale": F32,
    "{arch}.expert_gating_func": U32, "{arch}.interleave_moe_layer_step": U32,
    "{arch}.leading_dense_block_count": U32, "{arch}.attention.key_length": U32,
    "{arch}.attention.value_length": U32, "{arch}.attention.sliding_window": U32,
    "{arch}.attention.layer_norm_epsilon": F32, "{arch}.attention.causal": BOOL, "{arch}.attention.scale": F32,
    "{arch}.rope.scaling.factor": F32, "{arch}.rope.scaling.original_context_length": U32,
    "{arch}.rope.scaling.attn_factor": F32, "{arch}.rope.scaling.yarn_log_multiplier": F32,
    "{arch}.rope.freq_base_swa": F32, "{arch}.pooling_type": U32, "{arch}.logit_scale": F32,
    "{arch}.embedding_scale": F32, "{arch}.residual_scale": F32, "{arch}.attn_logit_softcapping": F32,
    "{arch}.final_logit_softcapping": F32, "{arch}.vocab_size": U32, "{arch}.context_length": U32,
    "{arch}.decoder_start_token_id": U32, "{arch}.n_deepstack_layers": U32, "{arch}.nextn_predict_layers": U32,
    "tokenizer.ggml.token_type_count": U32, "tokenizer.ggml.cls_token_id": U32,
    "tokenizer.ggml.seperator_token_id": U32, "tokenizer.ggml.padding_token_id": U32,
    "tokenizer.ggml.mask_token_id": U32, "tokenizer.ggml.eot_token_id": U32, "tokenizer.ggml.eom_token_id": U32,
    "tokenizer.ggml.fim_pre_token_id": U32, "tokenizer.ggml.fim_suf_token_id": U32,
    "tokenizer.ggml.fim_mid_token_id": U32, "tokenizer.ggml.add_eos_token": BOOL,
    "tokenizer.ggml.add_sep_token": BOOL, "tokenizer.ggml.add_space_prefix": BOOL,
    "tokenizer.ggml.remove_extra_whitespaces": BOOL, "split.count": U16, "split.no": U16,
    "split.tensors.count": I32, "general.quantization_version": U32, "general.file_type": U32,
}
PER_LAYER_KEYS = ("{arch}.attention.head_count", "{arch}.attention.head_count_kv", "{arch}.feed_forward_length")
TOKEN_ID_KEYS = ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
                 "tokenizer.ggml.padding_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.cls_token_id",
                 "tokenizer.ggml.seperator_token_id", "tokenizer.ggml.mask_token_id")
TOKEN_ARRAYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
                "tokenizer.ggml.merges")
TOKEN_TYPES_OUT_OF_RANGE = [0, 4, 5, 7, 8, 100, -1, 2**31 - 1, -2**31]
MERGES_GARBAGE: list[Any] = ["", "a", " ", "a b c", "a  b", "zzzz qqqq", "\u0120 \u0120", {"hex": "ff20fe"},
                             {"repeat": "ab ", "times": 10_000}]
# ggml type ids: common valid ones, removed ones (4, 5), past the end, and absurd
GGML_TYPES = [0, 1, 2, 3, 8, 12, 14, 30, 4, 5, 39, 40, 1000, 2**32 - 1]

VALUE_CLASSES = ("int-boundary", "float-special", "string", "enum", "type-change", "per-layer-array",
                 "token-dup", "token-type", "array-length", "merges", "missing-key", "extra-key", "alignment",
                 "experts", "token-id", "charsmap", "reshape-heads")
STRUCT_CLASSES = ("truncate", "flip", "count", "tensor-shape", "tensor-type", "tensor-offset", "tensor-name",
                  "tensor-missing", "tensor-role-type")
MUTATION_CLASSES = tuple(f"value:{c}" for c in VALUE_CLASSES) + tuple(f"struct:{c}" for c in STRUCT_CLASSES)


class _Generator:
    def __init__(self, rng: random.Random, base: GGUFFile) -> None:
        self.rng, self.base = rng, base
        arch = base.get("general.architecture")
        self.arch = arch.value.decode("utf-8", "replace") if arch is not None and arch.vtype == STRING else "llama"
        n_layer = base.get(f"{self.arch}.block_count")
        self.n_layer = n_layer.value if n_layer is not None else 1
        tokens = base.get("tokenizer.ggml.tokens")
        self.n_vocab = len(tokens.value) if tokens is not None else 0
        self.keys = [e.key for e in base.entries]
        self.header_len = len(base.header_bytes())

    def key(self, template: str) -> str:
        return template.replace("{arch}", self.arch)

    def keys_of(self, vtypes: tuple[int, ...]) -> list[str]:
        return [e.key for e in self.base.entries if e.decoded().vtype in vtypes]

    def value_of_type(self, vtype: int) -> Any:
        rng = self.rng
        if vtype in INT_TYPES:
            return rng.choice(INT_BOUNDARIES[vtype])
        if vtype in FLOAT_TYPES:
            return rng.choice(FLOAT_SPECIALS[vtype])
        if vtype == BOOL:
            return rng.choice(BOOL_BYTES)
        return rng.choice(STRINGS)

    def index(self) -> int:
        """An index into the vocabulary, often a special or byte token."""
        rng = self.rng
        n = max(self.n_vocab, 1)
        return rng.choice([0, 1, 2, rng.randrange(3, min(n, 259)) if n > 3 else 0, rng.randrange(n), n - 1])

    def mutation(self, cls: str) -> dict:
        ops = getattr(self, "m_" + cls.split(":")[1].replace("-", "_"))()
        return {"cls": cls, "ops": ops}

    # value classes

    def m_int_boundary(self) -> list[dict]:
        key = self.rng.choice(self.keys_of(INT_TYPES))
        vtype = self.base.require(key).vtype
        return [{"op": "set", "key": key, "value": typed(vtype, self.value_of_type(vtype))}]

    def m_float_special(self) -> list[dict]:
        key = self.rng.choice(self.keys_of(FLOAT_TYPES))
        vtype = self.base.require(key).vtype
        return [{"op": "set", "key": key, "value": typed(vtype, self.value_of_type(vtype))}]

    def m_string(self) -> list[dict]:
        key = self.rng.choice(self.keys_of((STRING,)))
        return [{"op": "set", "key": key, "value": typed(STRING, self.rng.choice(STRINGS))}]

    def m_enum(self) -> list[dict]:
        template = self.rng.choices(list(ENUMS), [ENUM_WEIGHTS.get(k, 1) for k in ENUMS])[0]
        return [{"op": "set", "key": self.key(template), "value": typed(STRING, self.rng.choice(ENUMS[template]))}]

    def m_type_change(self) -> list[dict]:
        rng = self.rng
        key = rng.choice(self.keys)
        old = self.base.require(key)
        choices = [t for t in (U8, I8, U16, I32, U64, I64, F32, F64, BOOL, STRING, ARRAY) if t != old.vtype]
        vtype = rng.choice(choices)
        if vtype == STRING:
            text = str(old.value) if old.vtype in INT_TYPES + FLOAT_TYPES else rng.choice(STRINGS)
            return [{"op": "set", "key": key, "value": typed(STRING, text)}]
        if vtype == ARRAY:
            subtype = rng.choice([U32, I32, F32, STRING, BOOL])
            if old.vtype in INT_TYPES and subtype in INT_TYPES:
                items = [old.value] * rng.choice([0, 1, 2, self.n_layer])
            else:
                items = [self.value_of_type(subtype) for _ in range(rng.choice([0, 1, 2, 3]))]
            return [{"op": "set", "key": key, "value": typed(ARRAY, items, subtype)}]
        if old.vtype in INT_TYPES + FLOAT_TYPES and vtype in INT_TYPES and rng.random() < 0.5:
            lo, hi = min(INT_BOUNDARIES[vtype]), max(INT_BOUNDARIES[vtype])
            value = old.value if isinstance(old.value, int) and lo <= old.value <= hi else self.value_of_type(vtype)
        elif old.vtype in INT_TYPES and vtype in FLOAT_TYPES and rng.random() < 0.5:
            value = float(old.value)
        else:
            value = self.value_of_type(vtype)
        return [{"op": "set", "key": key, "value": typed(vtype, value)}]

    def m_per_layer_array(self) -> list[dict]:
        rng = self.rng
        key = self.key(rng.choice(PER_LAYER_KEYS))
        old = self.base.get(key)
        fill = old.value if old is not None and old.vtype in INT_TYPES else 1
        length = rng.choice([self.n_layer] * 4 + [0, 1, self.n_layer - 1, self.n_layer + 1, 512, 513])
        subtype = rng.choice([U32, U32, I32])
        items = [fill] * max(length, 0)
        for _ in range(rng.choice([1, 1, 2])):
            if items:
                negative = [-1, -2**31] if subtype == I32 else [2**32 - 1]
                bad = rng.choice([0, 0, 1, fill + 1, fill * 2, 2**24, *negative])
                items[rng.randrange(len(items))] = bad
        return [{"op": "set", "key": key, "value": typed(ARRAY, items, subtype)}]

    def m_token_dup(self) -> list[dict]:
        return [{"op": "copy_item", "key": "tokenizer.ggml.tokens", "src": self.index(), "dst": self.index()}
                for _ in range(self.rng.choice([1, 1, 2]))]

    def m_token_type(self) -> list[dict]:
        return [{"op": "set_item", "key": "tokenizer.ggml.token_type", "index": self.index(),
                 "value": self.rng.choice(TOKEN_TYPES_OUT_OF_RANGE)}]

    def m_array_length(self) -> list[dict]:
        rng = self.rng
        key = rng.choice([k for k in TOKEN_ARRAYS if k in self.keys])
        n = len(self.base.require(key).value)
        return [{"op": "resize", "key": key, "length": rng.choice([0, 1, 3, n // 2, n - 1, n + 1, n + 100])}]

    def m_merges(self) -> list[dict]:
        rng = self.rng
        merges = self.base.get("tokenizer.ggml.merges")
        if merges is None:  # a tokenizer without merges is given some
            items = [rng.choice(MERGES_GARBAGE) for _ in range(rng.choice([1, 3]))]
            return [{"op": "set", "key": "tokenizer.ggml.merges", "value": typed(ARRAY, items, STRING)}]
        return [{"op": "set_item", "key": "tokenizer.ggml.merges", "index": rng.randrange(len(merges.value)),
                 "value": rng.choice(MERGES_GARBAGE)} for _ in range(rng.choice([1, 1, 3]))]

    def m_missing_key(self) -> list[dict]:
        return [{"op": "delete", "key": self.rng.choice(self.keys)}]

    def m_extra_key(self) -> list[dict]:
        template = self.rng.choice(list(EXTRA_KEYS))
        vtype = EXTRA_KEYS[template]
        return [{"op": "set", "key": self.key(template), "value": typed(vtype, self.value_of_type(vtype))}]

    def m_alignment(self) -> list[dict]:
        rng = self.rng
        if rng.random() < 0.8:
            value = typed(U32, rng.choice([0, 1, 2, 3, 8, 16, 33, 64, 4096, 2**31, 2**32 - 1]))
        else:
            value = rng.choice([typed(U64, 32), typed(I32, -32), typed(STRING, "32"), typed(U8, 32)])
        return [{"op": "set", "key": "general.alignment", "value": value}]

    def m_experts(self) -> list[dict]:
        rng = self.rng
        ops = []
        which = rng.choice(["count", "used", "both", "both"])
        if which in ("count", "both"):
            ops.append({"op": "set", "key": self.key("{arch}.expert_count"),
                        "value": typed(U32, rng.choice([0, 1, 2, 4, 8, 65536, 2**31 - 1, 2**32 - 1]))})
        if which in ("used", "both"):
            ops.append({"op": "set", "key": self.key("{arch}.expert_used_count"),
                        "value": typed(U32, rng.choice([0, 1, 2, 3, 9, 2**32 - 1]))})
        return ops

    def m_token_id(self) -> list[dict]:
        rng = self.rng
        key = rng.choice(TOKEN_ID_KEYS)
        if rng.random() < 0.2:
            return [{"op": "set", "key": key, "value": typed(I32, rng.choice([-1, -2**31]))}]
        n = self.n_vocab
        return [{"op": "set", "key": key, "value": typed(U32, rng.choice([n - 1, n, n + 1, 2**31 - 1, 2**32 - 1]))}]

    def m_charsmap(self) -> list[dict]:
        """A unigram (t5/ugm) tokenizer's precompiled_charsmap: a u32 size of the XOR-compressed array, that
        array, then the normalized strings; garbage sizes make the tokenizer read out of bounds."""
        rng = self.rng
        size = rng.choice([0, 4, 7, 64, 2**16, 2**31, 2**32 - 1])
        body = [rng.randrange(256) for _ in range(rng.choice([0, 3, 8, 64]))]
        blob = rng.choice([[], [1], list(size.to_bytes(4, "little")) + body, body])
        return [{"op": "set", "key": "tokenizer.ggml.model", "value": typed(STRING, rng.choice(["t5", "ugm"]))},
                {"op": "set", "key": "tokenizer.ggml.precompiled_charsmap", "value": typed(ARRAY, blob, U8)}]

    def m_reshape_heads(self) -> list[dict]:
        """Other head counts that still fit the tensors (n_embd and n_embd_kv unchanged), so the load can pass
        and the values reach the graph: head dims of 16-256, often with a rope dimension that disagrees."""
        rng = self.rng
        n_embd, n_head, n_head_kv = (self.value(f"{self.arch}.{k}", 0) for k in
                                     ("embedding_length", "attention.head_count", "attention.head_count_kv"))
        if not (n_embd and n_head and n_head_kv):
            return self.m_int_boundary()
        factor = rng.choice([2, 4, 8, 16])  # scale both counts down or up by the same factor
        down = n_head % factor == 0 and n_head_kv % factor == 0 and rng.random() < 0.5
        if not down and n_embd % (n_head * factor):
            factor = 2
        heads = (n_head // factor, n_head_kv // factor) if down else (n_head * factor, n_head_kv * factor)
        head_dim = n_embd // heads[0]
        ops = [{"op": "set", "key": f"{self.arch}.attention.head_count", "value": typed(U32, heads[0])},
               {"op": "set", "key": f"{self.arch}.attention.head_count_kv", "value": typed(U32, heads[1])}]
        rope = rng.choice([head_dim, head_dim, head_dim // 2, head_dim + 2, 0])
        ops.append({"op": "set", "key": f"{self.arch}.rope.dimension_count", "value": typed(U32, rope)})
        return ops

    def value(self, key: str, default: Any) -> Any:
        v = self.base.get(key)
        return v.value if v is not None and v.vtype in INT_TYPES else default

    # structure classes

    def m_truncate(self) -> list[dict]:
        of = "header" if self.rng.random() < 0.7 else "file"
        return [{"op": "truncate", "of": of, "fraction": round(self.rng.random(), 6)}]

    def m_flip(self) -> list[dict]:
        return [{"op": "flip", "at": self.rng.randrange(self.header_len), "xor": self.rng.randrange(1, 256)}
                for _ in range(self.rng.choice([1, 1, 2, 4]))]

    def m_count(self) -> list[dict]:
        rng = self.rng
        field = rng.choice(["n_tensors", "n_kv", "version"])
        if field == "version":
            return [{"op": "header", "field": "version", "value": rng.choice([0, 1, 2, 4, 2**32 - 1])}]
        n = len(self.base.tensors) if field == "n_tensors" else len(self.base.entries)
        return [{"op": "header", "field": field, "value": rng.choice([0, 1, n - 1, n + 1, 2 * n, 2**63, 2**64 - 1])}]

    def tensor(self):
        return self.rng.choice(self.base.tensors)

    def m_tensor_shape(self) -> list[dict]:
        rng = self.rng
        t = self.tensor()
        dims = list(t.dims)
        how = rng.choice(["dim", "dim", "swap", "append", "drop", "none", "five"])
        if how == "dim":
            i = rng.randrange(len(dims))
            dims[i] = rng.choice([0, 1, -1, dims[i] * 2, dims[i] + 32, dims[i] - 32, 2**40, 2**62, 2**63 - 1])
        elif how == "swap":
            dims.reverse()
        elif how == "append":
            dims.append(rng.choice([1, 2]))
        elif how == "drop":
            dims.pop()
        elif how == "none":
            dims = []
        else:
            dims = (dims + [1] * 5)[:5]
        return [{"op": "tensor", "name": t.name, "field": "dims", "value": dims}]

    def m_tensor_type(self) -> list[dict]:
        t = self.tensor()
        return [{"op": "tensor", "name": t.name, "field": "type", "value": self.rng.choice(GGML_TYPES)}]

    def m_tensor_offset(self) -> list[dict]:
        rng = self.rng
        t = self.tensor()
        value = rng.choice([0, t.offset + 1, t.offset + 32, max(t.offset - 32, 0), self.base.data_size,
                            self.tensor().offset, 2**63, 2**64 - 32])
        return [{"op": "tensor", "name": t.name, "field": "offset", "value": value}]

    def m_tensor_name(self) -> list[dict]:
        rng = self.rng
        t = self.tensor()
        name = rng.choice([self.tensor().name, "blk.99.attn_q.weight", "", "x" * 64, "x" * 200,
                           {"hex": "ff"}, f"blk.{self.n_layer}.attn_q.weight"])
        return [{"op": "tensor", "name": t.name, "field": "name", "value": name}]

    def m_tensor_missing(self) -> list[dict]:
        return [{"op": "drop_tensor", "name": self.tensor().name}]

    def m_tensor_role_type(self) -> list[dict]:
        return role_type_ops(self.rng, self.base)


def generate_case(seed: int, index: int, bases: dict[str, GGUFFile], *, struct_share: float = 0.35) -> dict:
    """Case `index` of the run with `seed`: the same pair always gives the same case."""
    rng = random.Random(f"{seed}/{index}")
    names = list(bases)
    weights = {"tiny": 6, "real-header": 3, "real-full": 1}
    base_name = rng.choices(names, [weights.get(n, 1) for n in names])[0]
    gen = _Generator(rng, bases[base_name])
    mutations = []
    for _ in range(rng.choices([1, 2, 3], [5, 3, 2])[0]):
        group = STRUCT_CLASSES if rng.random() < struct_share else VALUE_CLASSES
        cls = ("struct:" if group is STRUCT_CLASSES else "value:") + rng.choice(group)
        mutations.append(gen.mutation(cls))
    # a third of the cases run with this project's own paths: quantized K/V with flash attention off or on,
    # or embeddings (where a mutated pooling type matters)
    options = rng.choices([{}, {"ctk": "q4_0", "ctv": "q4_0", "flash_attn": "off"},
                           {"ctk": "q8_0", "ctv": "q8_0", "flash_attn": "on"}, {"embedding": True}], [6, 1, 1, 1])[0]
    return {"base": base_name, "mutations": mutations, **({"model_args": options} if options else {})}
