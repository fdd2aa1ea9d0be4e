"""The rerank request (/v1/rerank, /rerank, /v1/reranking), as llama-server takes it: Jina's and Cohere's form,
`query` and `documents`, or Hugging Face TEI's, `query` and `texts` (answered in TEI's shape, as llama-server
does); `top_n` keeps the best; `return_text` (llama-server's) or `return_documents` (Jina's, Cohere's) puts each
document's text in the answer."""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import ConfigDict, Field, model_validator

from .base import Between, bad
from .embeddings import MAX_EMBEDDING_INPUTS
from .requests import Harmless

MAX_DOCUMENTS = MAX_EMBEDDING_INPUTS  # bounds the work one request can ask for, as the embeddings' inputs
Documents = Annotated[list[str] | None, Field(None, min_length=1, max_length=MAX_DOCUMENTS)]


class RerankRequest(Harmless):
    """POST /v1/rerank: a query and the documents to score against it."""
    model_config = ConfigDict(json_schema_extra={"oneOf": [{"required": ["query", "documents"]},
                                                           {"required": ["query", "texts"]}]})
    model: str | None = None
    query: str = Field(description="what the documents are ranked for")
    documents: Documents = Field(None, description="the texts to rank (Jina's, Cohere's form)")
    texts: Documents = Field(None, description="TEI's name for documents: the answer is TEI's list")
    top_n: Annotated[int, Between(1, MAX_DOCUMENTS)] | None = Field(
        None, description="answer the top_n best only (default: all)")
    return_text: bool = Field(False, description="llama-server's: each result carries its document's text")
    return_documents: bool = Field(False, description="Jina's and Cohere's name for return_text")

    @model_validator(mode="before")
    @classmethod
    def _one_list(cls, body: Any) -> Any:
        if isinstance(body, dict) and body.get("documents") is not None and body.get("texts") is not None:
            raise bad("give 'documents' or TEI's 'texts', not both", "texts")
        if isinstance(body, dict) and body.get("documents", body.get("texts")) is None:
            raise bad("'documents' is required: a non-empty list of strings", "documents")
        return body

    @property
    def tei(self) -> bool:
        """Asked in TEI's form (`texts`): answered as TEI's list of {index, score[, text]}."""
        return self.texts is not None

    @property
    def document_list(self) -> list[str]:
        texts = self.texts if self.texts is not None else self.documents
        assert texts is not None  # (_one_list)
        return texts
