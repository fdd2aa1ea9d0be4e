"""Embeddings on a context made with embedding=True: the inputs checked, one decode per input from an empty
cache, the pooled vector checked finite and L2-normalised."""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ...errors import ContextOverflowError, InvalidArgumentError, utf8
from ...native import ContextHandle, ModelHandle
from ..generation.output_checks import require_finite


def embedding_inputs(text: str | Sequence[str | Sequence[int]], vocabulary: ModelHandle) -> list[str | list[int]]:
    """The inputs of Model.embed as a list, each a non-empty str (valid UTF-8) or a list of ids of `vocabulary`."""
    single = isinstance(text, str)
    given: list[object] = [text] if single else list(text) if isinstance(text, (list, tuple)) else []
    if not given or not all(isinstance(t, (str, list, tuple)) and t for t in given):
        raise InvalidArgumentError("embed() takes a non-empty str or a non-empty list of non-empty str or "
                                   "token-id lists")
    texts: list[str | list[int]] = []
    for i, t in enumerate(given):
        if isinstance(t, str):
            utf8("text" if single else f"text[{i}]", t)
            texts.append(t)
        else:
            texts.append(vocabulary.check_token_ids(t))
    return texts


def embed_inputs(context: ContextHandle, inputs: list[str | list[int]],
                 tokenize: Callable[[str], list[int]]) -> np.ndarray:
    """(len(inputs), n_embd) L2-normalised vectors; the cache is empty afterwards."""
    if context.rank_pooling:  # (its pooled output is a classifier's scores, not a vector of the text)
        raise InvalidArgumentError("this model is a reranker (rank pooling): it scores query-document pairs with "
                                   "rerank(), it has no embeddings")
    out = np.empty((len(inputs), context.model.n_embd), dtype=np.float32)
    # one micro-batch: llama.cpp pools each micro-batch on its own and keeps the last (a text over n_ubatch was
    # the mean of its tail alone), and one sequence's cells
    limit = min(context.max_decode_tokens, context.n_ubatch, context.n_ctx_seq)
    context.set_embeddings(True)
    try:
        for i, t in enumerate(inputs):
            tokens = tokenize(t) if isinstance(t, str) else t
            if len(tokens) > limit:
                # ("too large": llama-server's words, which its clients look for)
                raise ContextOverflowError(f"text {i} is too large: {len(tokens)} tokens; an embedding takes at most "
                                           f"{limit} (one micro-batch, n_ubatch={context.n_ubatch}, of one sequence's "
                                           f"{context.n_ctx_seq} cells)")
            context.clear()
            context.decode_tokens(tokens)
            out[i] = context.pooled_embedding(0)
            require_finite(out[i], f"the embedding of text {i}")
    finally:
        context.set_embeddings(False)
        context.clear()
    out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
    return out
