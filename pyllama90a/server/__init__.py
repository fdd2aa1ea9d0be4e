"""OpenAI-compatible HTTP server over a BatchEngine: `python -m pyllama90a.server --help`.

Needs the `server` extra (FastAPI, uvicorn).

    __main__: settings from flags or PYLLAMA90A_* variables, then uvicorn
    app: the FastAPI application: the route families attached in one place, the error funnel, the API key
    routes/: the routes, one APIRouter per API family, each route's facts declared beside it
    protocol/: what a request may say: body limits, strict request models, refused fields, OpenAPI
    responses/: what the server answers, from the engine's Chunks
    generation: the generation routes' work: a request's generations queued, their chunks streamed
    embeddings: the embeddings routes' work, on a pool of its own
    state: what the routes share: the engine, the settings, the counts
    response_store: the Responses API's stored responses, a bounded LRU for previous_response_id
    errors: the one funnel from exceptions to HTTP answers in OpenAI's error shape (or Anthropic's)
    executors: one bounded thread pool per kind of work
    metrics: /metrics in Prometheus' text format
    slot_policy: the slot folder's settings: where, its secret, its quota
    shutdown: graceful shutdown on SIGTERM/SIGINT
    header_timeout: a time limit on reading a request's headers (slowloris)
    worker_recovery: a server whose RPC worker went away serves again once it is back
"""
from .app import ServerState, create_app

__all__ = ["ServerState", "create_app"]
