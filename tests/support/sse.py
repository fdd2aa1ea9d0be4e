"""A streamed answer's server-sent events as parsed JSON, for the tests of the server's stream shapes."""
from __future__ import annotations

import json

import httpx


def stream_events(http: httpx.Client, path: str, body: dict) -> list[dict]:
    """POST `body` with stream true; each `data:` event's JSON, in order, without the final [DONE]."""
    with http.stream("POST", path, json={**body, "stream": True}) as response:
        assert response.status_code == 200, response.read()
        lines = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    return [json.loads(line) for line in lines if line != "[DONE]"]
