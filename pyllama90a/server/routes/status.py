"""The server's own routes: GET /health (liveness and load, for a load balancer) and GET /metrics (Prometheus'
text format: metrics.py)."""
from __future__ import annotations

from typing import Any

from fastapi.responses import JSONResponse, PlainTextResponse

from ..errors import APIError
from ..metrics import render_metrics
from ..protocol import openapi as doc
from ..worker_recovery import lost_reason
from .family import Access, Family, State

router = Family()


@router.serve("GET", "/health", access=Access.PUBLIC, doc=doc.fixed("Liveness and load", {
    200: doc.json_body("serving", doc.HEALTH),
    503: doc.json_body("shutting down, or the engine stopped (reason)", doc.HEALTH)}))
async def health(state: State) -> JSONResponse:
    stats = state.engine.stats()
    body: dict[str, Any] = {"status": "ok", "slots_busy": stats.busy_slots,
                            "slots_idle": stats.parallel - stats.busy_slots, "queue_depth": stats.queue_depth}
    lost = state.workers.lost_workers()
    if not state.engine.running:
        failure = state.engine.failure
        body.update(status="error", reason=f"the engine thread stopped on {failure!r}" if failure is not None
                    else "the engine is closed")
    elif lost:
        body.update(status="error", reason=lost_reason(lost), lost_workers=list(lost))
    elif state.draining:
        body.update(status="shutting_down", reason="the server is shutting down")
    # kinds of work whose threads are all busy with more waiting (server/executors.py): their routes are
    # delayed, or answered 429 once the kind's queue is full; the others are served as usual
    body["saturated"] = state.executors.saturated()
    return JSONResponse(body, status_code=200 if body["status"] == "ok" else 503)


@router.serve("GET", "/metrics", access=Access.METRICS, response_class=PlainTextResponse, doc=doc.fixed(
    "Prometheus metrics", {200: {"description": "Prometheus text format",
                                 "content": {"text/plain": {"schema": {"type": "string"}}}}, **doc.errors(401, 501)}))
async def metrics(state: State) -> PlainTextResponse:
    if not state.metrics_served:
        raise APIError(501, "GET /metrics is off on this server (--no-metrics)", type="not_supported_error")
    answer = PlainTextResponse(render_metrics(state.engine, state.kv_cache, state.responses, state.timed,
                                              state.workers, state.executors.usage()),
                               media_type="text/plain; version=0.0.4")
    # llama-server's header (when the server started, for rates over its whole life), spelled as it spells it:
    # Starlette lowercases the names it is given, and clients that copy the headers into a plain dict (llama.cpp's
    # own test harness) look it up by llama-server's spelling
    answer.raw_headers.append((b"Process-Start-Time-Unix", str(state.created).encode()))
    return answer
