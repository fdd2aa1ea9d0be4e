"""Who may use a Model's context, and when: one thing at a time. A lock serializes the calls (so close() never
frees the context under another thread's call), and while a generation or a holder (a BatchEngine, a target
Model's drafts) has the context, every call that uses it is refused with BusyError; calls that only read the
model or facts fixed when the context was made stay allowed."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from ...errors import BusyError, ClosedError
from ...native import ContextHandle, ModelHandle


class ContextGuard:
    """A Model's weights and context handles (both None once closed), its lock and what holds the context."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._handle: ModelHandle | None = None
        self._context: ContextHandle | None = None
        self._holder: str | None = None  # what holds the context: a generation, a BatchEngine, ...

    def open(self, handle: ModelHandle, context: ContextHandle) -> None:
        self._handle, self._context = handle, context

    def take_for_close(self) -> ContextHandle | None:
        """The context, handed over to be freed (None if it was already); refused while something holds it."""
        with self._lock:
            self._refuse_if_held("close the model")
            context, self._context, self._handle = self._context, None, None
            return context

    @property
    def closed(self) -> bool:
        return self._context is None

    @property
    def handle(self) -> ModelHandle:
        handle = self._handle
        if handle is None:
            raise ClosedError("this Model is closed")
        return handle

    @contextmanager
    def held_by(self, holder: str, action: str) -> Iterator[ContextHandle]:
        """The context for `holder` alone while the block runs (taking it is `action`, named when refused)."""
        with self.using(action) as context:
            self._holder = holder
        try:
            yield context
        finally:
            with self._lock:
                self._holder = None

    @contextmanager
    def using(self, action: str) -> Iterator[ContextHandle]:
        """Hold the lock and refuse while something holds the context: for every call that reads or changes it."""
        with self.reading() as context:
            self._refuse_if_held(action)
            yield context

    @contextmanager
    def model(self) -> Iterator[ModelHandle]:
        """Hold the lock (so close() waits) for a call that only reads the model; allowed while held."""
        with self._lock:
            yield self.handle

    @contextmanager
    def reading(self) -> Iterator[ContextHandle]:
        """Hold the lock for a call that reads facts fixed when the context was made (sizes); allowed while held."""
        with self._lock:
            context = self._context
            if context is None:
                raise ClosedError("this Model is closed")
            yield context

    def _refuse_if_held(self, action: str) -> None:
        if self._holder:
            raise BusyError(f"cannot {action}: {self._holder} is using this Model; finish or close it first")
