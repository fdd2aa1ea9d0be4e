"""Graceful shutdown on SIGTERM/SIGINT: stop accepting, give running requests a grace period, then end every
request still in the engine (generating or queued) with an error its client can read.

uvicorn alone would wait its own timeout and then cancel the response tasks: a stream then ends in a
truncated chunked body (no final event, no `[DONE]`) and the log fills with CancelledError tracebacks.
Closing the engine instead hands every remaining request an error chunk, which the routes turn into a last
SSE event with an error object and `data: [DONE]` (streams) or a 503 (whole answers); the response tasks
then end by themselves, well before uvicorn's timeout, which stays only as a backstop.
"""
from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator
from typing import Any

import uvicorn

from ..core.constrained import isolation
from .state import ServerState

# after the grace period: time for the last events to reach the clients before uvicorn cancels what is left
FINAL_EVENTS_S = 5.0


class GracefulServer(uvicorn.Server):
    """uvicorn's server with the shutdown above. Its signal handlers only ask for the shutdown: uvicorn's own
    re-raise a caught signal after it, which would kill the process before the engine is closed."""

    def __init__(self, config: uvicorn.Config, state: ServerState, grace_s: float) -> None:
        config.timeout_graceful_shutdown = int(grace_s + FINAL_EVENTS_S + 0.999)
        super().__init__(config)
        self.state, self.grace_s = state, grace_s
        self._closing: asyncio.Future[bool] | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    async def shutdown(self, sockets: Any = None) -> None:
        self.state.draining = True  # a request still arriving on a kept-alive connection gets a 503
        timer = asyncio.get_running_loop().call_later(self.grace_s, self._end_remaining_requests)
        try:
            await super().shutdown(sockets)  # closes the listeners, then waits for the running requests
        finally:
            timer.cancel()
            if self._closing is not None:
                await self._closing

    def _end_remaining_requests(self) -> None:
        # close() joins the engine thread (up to one decode step): off the event loop, which must keep
        # delivering the error chunks it makes
        self._closing = asyncio.ensure_future(asyncio.to_thread(self.state.engine.close))
        isolation.shutdown()  # a render or compile still running ends now (its request gets its error)
