"""Reranking on a reranker's embedding context (rank pooling: a classifier head on the pooled state): each document
made into one prompt with the query as llama-server makes it, decoded from an empty cache, its score the head's
first output. The scores rank documents for the query; they are no probabilities unless the model makes them so
(Qwen3-Reranker's head ends in a softmax; a BERT-style cross-encoder's gives a raw logit)."""
from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from ...errors import ContextOverflowError, InvalidArgumentError, ModelFormatError, utf8
from ...native import ContextHandle, ModelHandle
from ..generation.output_checks import require_finite

RERANK_TEMPLATE_KEY = "tokenizer.chat_template.rerank"  # what llama_model_chat_template(model, "rerank") reads
# llama_pooling_type by value, as a GGUF's {arch}.pooling_type reads as text, in llama-server's --pooling words
POOLING_NAMES = {"0": "none", "1": "mean", "2": "cls", "3": "last", "4": "rank"}
_SLOTS = re.compile(r"\{query\}|\{document\}")


def pooling_name(model: ModelHandle) -> str:
    """How an embedding context on `model` pools, in llama-server's --pooling words: as the GGUF says, else (a
    causal LM says nothing) mean, as file.pooling_for has it."""
    value = model.metadata(f"{model.metadata('general.architecture')}.pooling_type")
    return "mean" if value is None else POOLING_NAMES.get(value, f"type {value}")


def is_reranker(model: ModelHandle) -> bool:
    """Whether the GGUF says rank pooling: an embedding context on it gives a classifier head's scores."""
    return pooling_name(model) == "rank"


def rerank_inputs(query: object, documents: object) -> tuple[str, list[str]]:
    """The query (a str) and the documents (a non-empty list of str), each valid UTF-8."""
    if not isinstance(query, str):
        raise InvalidArgumentError(f"the query must be a string, got {type(query).__name__}", param="query")
    utf8("query", query)
    if not isinstance(documents, (list, tuple)) or not documents or not all(isinstance(d, str) for d in documents):
        raise InvalidArgumentError("documents must be a non-empty list of strings", param="documents")
    for i, document in enumerate(documents):
        utf8(f"documents[{i}]", document)
    return query, list(documents)


def rerank_prompt(vocabulary: ModelHandle, query: str, document: str) -> list[int]:
    """The tokens llama-server decodes for (query, document): the GGUF's rerank template with both put in (one
    pass: a query that holds "{document}" stays text), its special tokens read; without one, the vocabulary's
    own pair format, [BOS] query [EOS] [SEP] document [EOS], each token where the vocabulary adds it."""
    template = vocabulary.metadata(RERANK_TEMPLATE_KEY)
    if template is not None:
        text = _SLOTS.sub(lambda m: query if m.group(0) == "{query}" else document, template)
        return vocabulary.tokenize(text.encode(), add_special=False, parse_special=True)
    end = vocabulary.eos if vocabulary.eos is not None else vocabulary.sep  # (llama-server's fallback to SEP)
    added = {"BOS": (vocabulary.add_bos, vocabulary.bos), "EOS": (vocabulary.add_eos, end),
             "SEP": (vocabulary.add_sep, vocabulary.sep)}
    missing = [name for name, (adds, token) in added.items() if adds and token is None]
    if missing:
        raise ModelFormatError(f"{vocabulary.path.name} has no rerank template, and its vocabulary has no "
                               f"{' or '.join(missing)} token to make a query-document pair with")
    bos, eos, sep = ([token] if adds and token is not None else [] for adds, token in added.values())
    q = vocabulary.tokenize(query.encode(), add_special=False, parse_special=False)
    d = vocabulary.tokenize(document.encode(), add_special=False, parse_special=False)
    return [*bos, *q, *eos, *sep, *d, *eos]


def rerank_prompts(vocabulary: ModelHandle, query: object, documents: object) -> list[list[int]]:
    """The checked inputs' prompts, one per document."""
    query, documents = rerank_inputs(query, documents)
    return [rerank_prompt(vocabulary, query, document) for document in documents]


def score_prompts(context: ContextHandle, prompts: Sequence[list[int]]) -> np.ndarray:
    """One score per prompt (float32), each decoded alone from an empty cache; the cache is empty afterwards."""
    if not context.rank_pooling:
        raise InvalidArgumentError("this model is not a reranker: its GGUF's pooling type is not rank (a "
                                   "classifier head that scores a query-document pair); load a reranker GGUF")
    scores = np.empty(len(prompts), dtype=np.float32)
    # one micro-batch (llama.cpp pools each on its own) of one sequence's cells
    limit = min(context.max_decode_tokens, context.n_ubatch, context.n_ctx_seq)
    context.set_embeddings(True)
    try:
        for i, tokens in enumerate(prompts):
            if len(tokens) > limit:
                raise ContextOverflowError(f"document {i} with the query has {len(tokens)} tokens; a rerank takes "
                                           f"at most {limit} (one micro-batch, n_ubatch={context.n_ubatch}, of one "
                                           f"sequence's {context.n_ctx_seq} cells)", param="documents")
            context.clear()
            context.decode_tokens(tokens)
            head = context.pooled_embedding(0)
            require_finite(head, f"the score of document {i}")
            scores[i] = head[0]
    finally:
        context.set_embeddings(False)
        context.clear()
    return scores
