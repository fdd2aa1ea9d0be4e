"""A server whose RPC worker went away serves again once the worker is back.

A lost worker takes the layers it held with it: the generation that was running fails (a 500 naming the
worker) and every later decode of that engine would too. So while a worker is lost /health answers 503 with
the lost workers, new generation requests are refused with 503 at once, and a thread probes the lost workers;
once every one answers HELLO it loads the model again (a new BatchEngine, made as at start-up), puts it in place
of the old engine and closes that. /metrics counts the losses seen and the reloads done.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..errors import ClosedError, LlamaError, ModelLoadError
from ..native.rpc import Endpoint, probe
from .errors import APIError

if TYPE_CHECKING:  # pragma: no cover
    from ..core.engine.engine import BatchEngine

log = logging.getLogger("pyllama90a.server")

PROBE_INTERVAL_S = 1.0  # between two rounds of HELLOs to the lost workers


def lost_reason(lost: tuple[str, ...]) -> str:
    """What /health and a refused request say while workers are lost."""
    return f"lost the connection to RPC worker {', '.join(lost)}: the model is loaded again as soon as it answers"


class WorkerRecovery:
    """`lost_workers()` is the one question the routes ask; it starts the recovery on first sight of a loss."""

    def __init__(self, engine: Callable[[], BatchEngine], replace: Callable[[BatchEngine], None],
                 reopen: Callable[[], BatchEngine] | None) -> None:
        self._engine = engine    # the engine serving now
        self._replace = replace  # puts a new engine in place of that one (and closes the old)
        self._reopen = reopen    # a new engine, made with the server's arguments (None: losses are only reported)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.losses = 0   # losses seen (each starts one recovery)
        self.reloads = 0  # engines loaded again

    def lost_workers(self) -> tuple[str, ...]:
        """"host:port" of the engine's lost workers (empty while all are up); starts the recovery when new."""
        try:
            lost = self._engine().model.handle.lost_workers()
        except ClosedError:  # the engine is closed (shutting down)
            return ()
        if lost:
            with self._lock:
                if self._thread is None and self._reopen is not None and not self._stop.is_set():
                    self.losses += 1
                    log.warning("RPC worker(s) %s lost: generation refused until they answer again",
                                ", ".join(map(str, lost)))
                    self._thread = threading.Thread(target=self._recover, args=(lost,), daemon=True,
                                                    name="pyllama90a-worker-recovery")
                    self._thread.start()
        return tuple(map(str, lost))

    def refuse_if_lost(self) -> None:
        """For a generation request: a 503 while a worker is lost (the engine cannot decode)."""
        lost = self.lost_workers()
        if lost:
            raise APIError(503, lost_reason(lost), type="server_error", code="rpc_worker_lost",
                           headers={"Retry-After": str(int(PROBE_INTERVAL_S) + 1)})

    def close(self) -> None:
        """Stop a recovery in progress (server shutdown)."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=60)

    def _recover(self, workers: tuple[Endpoint, ...]) -> None:
        try:
            while not self._stop.wait(PROBE_INTERVAL_S):
                try:
                    for worker in workers:
                        probe(worker)
                except ModelLoadError:
                    continue  # not back yet
                try:
                    assert self._reopen is not None
                    engine = self._reopen()
                except LlamaError as e:  # e.g. lost again while the weights were sent: try again
                    log.warning("loading the model again over RPC failed: %s", e)
                    continue
                self._replace(engine)
                self.reloads += 1
                log.warning("RPC workers back: the model is loaded again and the server generates")
                return
        finally:
            with self._lock:
                self._thread = None
