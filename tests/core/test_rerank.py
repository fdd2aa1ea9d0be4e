"""Model.rerank (issue 36, item 6) on random-weight rerankers (pyllama90a.tools.synthetic_reranker): the prompt
of each pair as llama-server forms it, with the GGUF's rerank template and without one; each document's score is
its own (the same alone, in any order, in any company); a reranker has no embeddings and a model that is not a
reranker no scores; bad input is a clear InvalidArgumentError. The weights are noise: consistency is checked,
never relevance."""
from __future__ import annotations

import numpy as np
import pytest

import pyllama90a as pl
from pyllama90a.core.model.rerank import is_reranker, rerank_prompt
from pyllama90a.tools.synthetic import BOS_ID, EOS_ID
from pyllama90a.tools.synthetic_reranker import synthetic_reranker

QUERY = "machine learning is"
DOCUMENTS = ["a machine", "learning is", "paris, capitale de la France", "machine learning is a field of study"]


@pytest.fixture(scope="module", params=[True, False], ids=["template", "pair"])
def reranker(request: pytest.FixtureRequest):
    with pl.Model(synthetic_reranker(template=request.param), embedding=True, n_ctx=512, n_threads=2) as m:
        yield m


def _text(m: pl.Model, text: str, special: bool = False) -> list[int]:
    return m.tokenize(text, add_special=False, parse_special=special)


def test_prompt_is_llama_servers(reranker: pl.Model) -> None:
    """With the template: it with {query} and {document} put in, <s> and </s> read as BOS and EOS; without: the
    vocabulary's pair, [BOS] query [EOS] [SEP] document [EOS] (the file names EOS as the separator)."""
    prompt = rerank_prompt(reranker.handle, "ab {document}", "cd")
    if reranker.metadata("tokenizer.chat_template.rerank") is not None:
        expected = [BOS_ID, *_text(reranker, "query: ab {document}"), EOS_ID, *_text(reranker, "document: cd"), EOS_ID]
    else:
        expected = [BOS_ID, *_text(reranker, "ab {document}"), EOS_ID, EOS_ID, *_text(reranker, "cd"), EOS_ID]
    assert prompt == expected


def test_scores_are_each_documents_own(reranker: pl.Model) -> None:
    assert is_reranker(reranker.handle)
    scores = reranker.rerank(QUERY, DOCUMENTS)
    assert scores.shape == (len(DOCUMENTS),) and scores.dtype == np.float32
    assert np.all((scores > 0) & (scores < 1))  # (qwen3's head ends in a softmax over its two labels)
    assert len(set(scores.tolist())) == len(DOCUMENTS)  # (different pairs, different scores: nothing constant)
    np.testing.assert_array_equal(reranker.rerank(QUERY, DOCUMENTS[::-1])[::-1], scores)
    for i, document in enumerate(DOCUMENTS):
        assert reranker.rerank(QUERY, (document,))[0] == scores[i]
    assert reranker.rerank("another query", DOCUMENTS[:1])[0] != scores[0]


def test_a_reranker_has_no_embeddings(reranker: pl.Model) -> None:
    with pytest.raises(pl.InvalidArgumentError, match="reranker"):
        reranker.embed("a machine")


def test_bad_input(reranker: pl.Model) -> None:
    for query, documents in ((1, DOCUMENTS), (QUERY, []), (QUERY, "a machine"), (QUERY, ["a", 1]),
                             (QUERY, ["\ud800"]), (None, DOCUMENTS)):
        with pytest.raises(pl.InvalidArgumentError):
            reranker.rerank(query, documents)  # type: ignore[arg-type]
    with pytest.raises(pl.ContextOverflowError, match="document 1"):
        reranker.rerank(QUERY, ["short", "a b c d " * 200])
    assert reranker.rerank(QUERY, DOCUMENTS[:1]).shape == (1,)  # (still usable afterwards)


def test_rerank_needs_an_embedding_context() -> None:
    with pl.Model(synthetic_reranker(), n_ctx=512, n_threads=2) as m, pytest.raises(pl.InvalidArgumentError,
                                                                                    match="embedding=True"):
        m.rerank(QUERY, DOCUMENTS)


def test_a_model_that_is_not_a_reranker_gives_no_scores(model_path) -> None:
    with pl.Model(model_path, embedding=True, n_ctx=512, n_threads=2) as m:
        assert not is_reranker(m.handle)
        with pytest.raises(pl.InvalidArgumentError, match="not a reranker"):
            m.rerank(QUERY, DOCUMENTS)
        assert m.embed("a machine").shape == (m.handle.n_embd,)  # (its embeddings are served as before)
