"""A random-weight reranker GGUF of a Qwen3-Reranker's kind, for tests without downloads.

    from pyllama90a.tools.synthetic_reranker import synthetic_reranker
    path = synthetic_reranker()                  # cached in $PYLLAMA90A_HOME/synthetic, made on first use
    path = synthetic_reranker(template=False)    # no rerank template: the vocabulary's pair format

A qwen3-architecture model (llama's tensors with per-head Q and K norms) that llama.cpp loads as a reranker:
`qwen3.pooling_type` rank, a classifier head `cls.output.weight` with two outputs (`qwen3.classifier.output_labels`
["yes", "no"], softmaxed by llama.cpp as for Qwen3-Reranker: the score is the first, in (0, 1)), causal attention
so the pooled state is the last token's. With template=True the GGUF has a rerank template
(`tokenizer.chat_template.rerank`, with {query} and {document} and the vocabulary's control tokens), as a converted
Qwen3-Reranker has; with template=False llama-server's fallback applies, [BOS] query [EOS] [SEP] document [EOS]:
the file sets add_eos and add_sep and names EOS as the separator, as an XLM-RoBERTa reranker (bge-reranker-v2-m3)
does. The vocabulary is synthetic's SentencePiece-style one. Weights are noise: the scores are consistent (the
same pair scores the same everywhere) and meaningless (they say nothing about relevance).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

from .synthetic import (
    EOS_ID,
    WEIGHT_STD,
    Shape,
    _home,
    _tensor_plan,
    _vocab,
    gguf_written_whole,
    import_gguf,
    write_shape_keys,
    write_vocab_keys,
)

__all__ = ["RERANKER_SHAPE", "RERANK_TEMPLATE", "synthetic_reranker", "write_synthetic_reranker"]

RERANKER_SHAPE = Shape("reranker-tiny", n_embd=128, n_layer=2, n_head=4, n_head_kv=2, n_ff=256, n_vocab=512,
                       n_ctx_train=4096, rope_theta=1000000.0)
RERANK_TEMPLATE = "<s>query: {query}</s>document: {document}</s>"  # (<s>, </s>: the vocabulary's BOS and EOS)
LABELS = ["yes", "no"]
FORMAT_VERSION = 1  # part of the cache key: bump when the files written here change


def _plan(shape: Shape) -> list[tuple[str, tuple[int, ...]]]:
    """qwen3's tensors: llama's, the per-head Q and K norms of each layer, the classifier head."""
    plan = _tensor_plan(shape)
    for i in range(shape.n_layer):
        plan += [(f"blk.{i}.attn_{qk}_norm.weight", (shape.head_dim,)) for qk in "qk"]
    return [*plan, ("cls.output.weight", (len(LABELS), shape.n_embd))]


def write_synthetic_reranker(path: str | os.PathLike[str], *, template: bool = True, seed: int = 0) -> Path:
    """Write the reranker (F32 weights, noise of std 0.02, norms 1.0) to `path`, whole or not at all."""
    s = RERANKER_SHAPE
    gguf = import_gguf()
    tokens, scores, token_types = _vocab(s.n_vocab)
    path = Path(path)
    with gguf_written_whole(path, "qwen3") as writer:
        writer.add_name(f"synthetic-{s.name}{'' if template else '-pair'}")
        writer.add_description("random-weight reranker written by pyllama90a.tools.synthetic_reranker; "
                               "its scores are meaningless")
        write_shape_keys(writer, s)
        writer.add_file_type(int(gguf.LlamaFileType.ALL_F32))
        writer.add_pooling_type(gguf.PoolingType.RANK)
        writer.add_classifier_output_labels(LABELS)
        write_vocab_keys(writer, tokens, scores, token_types)
        if template:
            writer.add_add_eos_token(False)
            writer.add_chat_template([{"name": "rerank", "template": RERANK_TEMPLATE}])
        else:
            writer.add_add_eos_token(True)
            writer.add_add_sep_token(True)
            writer.add_sep_token_id(EOS_ID)
        for index, (name, np_shape) in enumerate(_plan(s)):
            rng = np.random.default_rng([seed, index])  # each tensor its own stream
            data = (np.ones(np_shape, dtype=np.float32) if len(np_shape) == 1
                    else rng.standard_normal(np_shape, dtype=np.float32) * np.float32(WEIGHT_STD))
            writer.add_tensor(name, data)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    return path


def synthetic_reranker(*, template: bool = True, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cached reranker (seed 0), written atomically on first use in `cache_dir` (default
    $PYLLAMA90A_HOME/synthetic)."""
    key = repr((FORMAT_VERSION, s := RERANKER_SHAPE, template, RERANK_TEMPLATE, LABELS)).encode()
    folder = Path(cache_dir) if cache_dir is not None else _home() / "synthetic"
    path = folder / f"synthetic-{s.name}{'' if template else '-pair'}-{hashlib.sha256(key).hexdigest()[:10]}.gguf"
    return path if path.is_file() else write_synthetic_reranker(path, template=template)
