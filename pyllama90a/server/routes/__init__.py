"""The routes, one APIRouter per API family, each route declared once beside its endpoint.

    family: Family (an APIRouter whose routes carry their declarations) and the tables derived from them
    status: the server's own /health and /metrics
    openai: OpenAI's /v1/models, /v1/completions, /v1/chat/completions, /v1/embeddings
    openai_responses: OpenAI's Responses API, /v1/responses and its stored responses
    anthropic: Anthropic's Messages API, /v1/messages and /v1/messages/count_tokens
    llama_server: llama-server's native routes (/completion, /infill, /tokenize, /props, ...)
    slots: llama-server's GET /slots and POST /slots/{id}?action=save|restore|erase
    lora: llama-server's /lora-adapters
    rerank: llama-server's /v1/rerank (/rerank, /v1/reranking), on a reranker GGUF
    not_served: llama-server's routes of features not built here (tools, router, Vertex AI): 404 naming them
"""
