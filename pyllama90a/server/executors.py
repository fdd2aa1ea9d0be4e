"""The server's worker threads: one bounded pool per kind of work, so that one kind held (embeddings queued
behind the embedder, huge texts tokenized, constraints compiling) never delays another.

asyncio.to_thread shares one default executor of min(32, CPUs + 4) threads (6 on 2 cores): six embeddings
requests waiting for the embedder held all of them, and a 1-token completion, /tokenize and /props then
waited 37-57 s. Here each kind has its own threads and admits at most `threads + queue` jobs (running and
waiting); past that a request is answered 429 with Retry-After at once (QueueFullError, as a full engine
queue is: OpenAI's and llama-server's clients retry a 429 after Retry-After) instead of waiting without end.

Kinds (a route's body is parsed in its own kind's pool, so a held kind cannot hold another route's parse):
  parse       generation request bodies: JSON over 64 KiB, the checks, constraint compiles, infill prompts
  submit      a generation's chat render, prompt tokenization and queueing on the engine
  embeddings  embeddings (and their bodies): one embedder, one request at a time (ServerState.embed_lock)
  text        /tokenize, /detokenize, /apply-template, /props (and their bodies)
  slot_files  /slots/{id} save, restore and erase
"""
from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import ClosedError, QueueFullError

T = TypeVar("T")

# kind -> its threads (2 CPU cores serve them all: more threads than that only help work that waits)
THREADS = {"parse": 4, "submit": 4, "embeddings": 1, "text": 2, "slot_files": 1}
DEFAULT_QUEUE = 64  # jobs of one kind that may wait for its threads (--pool-queue-size)


@dataclass(frozen=True)
class PoolUsage:
    kind: str
    threads: int
    running: int
    waiting: int
    queue: int
    refused: int  # jobs answered 429 since start

    @property
    def saturated(self) -> bool:
        """Every thread busy and work waiting: this kind's requests are delayed (and refused once `full`)."""
        return self.running >= self.threads and self.waiting > 0

    @property
    def full(self) -> bool:
        return self.waiting >= self.queue


class Pool:
    """`threads` threads for one kind of work; at most `threads + queue` jobs admitted at a time."""

    def __init__(self, kind: str, threads: int, queue: int) -> None:
        self.kind, self.threads, self.queue = kind, threads, queue
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=f"pyllama90a-{kind}")
        self._lock = threading.Lock()
        self._admitted = self._running = self._refused = 0

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """fn(*args, **kwargs) in one of this pool's threads (with the caller's context variables, as
        asyncio.to_thread runs it); QueueFullError (429) when the pool holds all it admits. A caller cancelled
        before its job starts takes the job out of the queue."""
        return await self._submit(True, fn, *args, **kwargs)

    async def finish(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """fn(*args, **kwargs) in this pool for a request it admitted before (the end of its answer, which the
        request has waited for): counted, never refused."""
        return await self._submit(False, fn, *args, **kwargs)

    async def _submit(self, refusable: bool, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Admit the job (refused when `refusable` and the pool holds all it admits) and queue it; it leaves the
        count once done, or cancelled before it started."""
        with self._lock:
            if refusable and self._admitted >= self.threads + self.queue:
                self._refused += 1
                raise QueueFullError(f"the server's {self.kind} work is full ({self.threads} running, {self.queue} "
                                     f"waiting: --pool-queue-size)")
            self._admitted += 1
        call = functools.partial(contextvars.copy_context().run, self._counted, fn, *args, **kwargs)
        try:
            future: Future[T] = self._executor.submit(call)
        except RuntimeError:  # shut down: the server is stopping
            self._release(None)
            raise ClosedError("the server is shutting down") from None
        future.add_done_callback(self._release)
        return await asyncio.wrap_future(future)

    def _counted(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        with self._lock:
            self._running += 1
        try:
            return fn(*args, **kwargs)
        finally:
            with self._lock:
                self._running -= 1

    def _release(self, _: Future[Any] | None) -> None:  # (done, cancelled before it started, or not submitted)
        with self._lock:
            self._admitted -= 1

    def usage(self) -> PoolUsage:
        with self._lock:
            return PoolUsage(self.kind, self.threads, self._running, self._admitted - self._running, self.queue,
                             self._refused)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


class Executors:
    """The server's pools, one per kind (THREADS); `queue`: jobs of one kind that may wait."""

    def __init__(self, queue: int = DEFAULT_QUEUE) -> None:
        if queue < 0:
            raise ValueError(f"the pool queue size must be at least 0, got {queue}")
        self.pools = {kind: Pool(kind, threads, queue) for kind, threads in THREADS.items()}
        self.parse, self.submit, self.text = self.pools["parse"], self.pools["submit"], self.pools["text"]
        self.embeddings, self.slot_files = self.pools["embeddings"], self.pools["slot_files"]

    def usage(self) -> list[PoolUsage]:
        return [pool.usage() for pool in self.pools.values()]

    def saturated(self) -> list[str]:
        """The kinds whose threads are all busy with work waiting (what /health names)."""
        return [u.kind for u in self.usage() if u.saturated]

    def shutdown(self) -> None:
        for pool in self.pools.values():
            pool.shutdown()
