"""llama-server's rerank route, /v1/rerank (also at /rerank, /v1/reranking and /reranking): documents scored for
a query by a reranker GGUF (rank pooling) on the embedder, best first. On a model that is not a reranker it is a
400 naming `model` (llama-server answers 501; this server answers a client's request with a 4xx, never a 5xx): an
embedding or chat model has no classifier head, and whatever its pooled state said would be no relevance score."""
from __future__ import annotations

import threading

import numpy as np
from fastapi import Request
from fastapi.responses import JSONResponse, Response

from ...core.model.model import Model
from ...core.model.rerank import is_reranker, rerank_prompt
from ..embeddings import in_chunks, on_embedder
from ..errors import APIError, RouteInputs
from ..generation import ignored_fields
from ..protocol import openapi as doc
from ..protocol.body import read_request
from ..protocol.rerank import RerankRequest
from .family import Family, State

router = Family()

RERANK_INPUTS = RouteInputs("documents", "documents")  # (a pair over the embedder's micro-batch names them)
_NUMBER = {"type": "number"}
_TEXT = {"type": "object", "required": ["text"], "properties": {"text": doc.STR}}
RERANKED = {"type": "object", "required": ["object", "model", "results", "usage"], "properties": {
    "object": {"const": "list"}, "model": doc.STR, "usage": doc.OBJ, "results": {"type": "array", "items": {
        "type": "object", "required": ["index", "relevance_score"],
        "properties": {"index": doc.INT, "relevance_score": _NUMBER, "document": _TEXT}}}}}
RERANKED_TEI = {"type": "array", "items": {"type": "object", "required": ["index", "score"],
                                           "properties": {"index": doc.INT, "score": _NUMBER, "text": doc.STR}}}


@router.serve("POST", "/v1/rerank", also_at=("/rerank", "/v1/reranking", "/reranking"), inputs=RERANK_INPUTS,
              doc=doc.reading("Rerank documents for a query (400 on a model that is not a reranker)", RerankRequest,
                              {"anyOf": [RERANKED, RERANKED_TEI]},
                              "the documents best first, each with its index and score (TEI's list for `texts`)"))
async def rerank(request: Request, state: State) -> Response:
    if not is_reranker(state.engine.model.handle):
        raise APIError(400, f"'{state.model_name}' is not a reranker: reranking needs a reranker GGUF (rank pooling, "
                            "a classifier head), such as bge-reranker-v2-m3 or Qwen3-Reranker",
                       param="model", code="not_a_reranker")
    req, ignored = await read_request(request, state.limits, RerankRequest, pool=state.executors.embeddings)
    query, documents = req.query, req.document_list

    def score(embedder: Model, cancelled: threading.Event) -> tuple[np.ndarray, int]:
        n_tokens = sum(len(rerank_prompt(embedder.handle, query, document)) for document in documents)
        return in_chunks(documents, cancelled, lambda chunk: embedder.rerank(query, chunk)), n_tokens

    done = await on_embedder(state, request, score)
    if done is None:  # the client went away
        return Response(status_code=499)
    scores, n_tokens = done
    best = sorted(range(len(documents)), key=lambda i: -scores[i])[:req.top_n]  # (ties keep the documents' order)
    headers = ignored_fields(request, ignored)
    with_text = req.return_text or req.return_documents
    if req.tei:
        return JSONResponse([{"index": i, "score": float(scores[i]), **({"text": documents[i]} if with_text else {})}
                             for i in best], headers=headers)
    results = [{"index": i, "relevance_score": float(scores[i]),
                **({"document": {"text": documents[i]}} if with_text else {})} for i in best]
    return JSONResponse({"object": "list", "model": state.model_name, "results": results,
                         "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}}, headers=headers)
