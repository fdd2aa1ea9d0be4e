"""OpenAI-compatible HTTP server over a BatchEngine: `python -m pyllama90a.server --help`.

Needs the `server` extra (FastAPI, uvicorn).
"""
from .app import ServerState, create_app

__all__ = ["ServerState", "create_app"]
