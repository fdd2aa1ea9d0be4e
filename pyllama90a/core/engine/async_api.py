"""asyncio over a BatchEngine: `async for chunk in engine.astream(prompt, ...)` and `await engine.acomplete(...)`.

The engine thread hands each chunk to the caller's event loop (call_soon_threadsafe); submitting, which tokenizes
the prompt and builds a constraint's grammar, runs in a worker thread, so the loop never waits on either. A task
cancelled while it waits, or an async iterator closed early, cancels its request: the slot is free at the
engine's next step, for the next request.
"""
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..generation.outputs import Usage
from .slots import Chunk

if TYPE_CHECKING:  # pragma: no cover (Python 3.11's typing.Unpack; only the type checker reads it)
    from typing_extensions import Unpack

    from ..generation.request import RequestOptions


class Submitted(Protocol):
    def cancel(self) -> None: ...


class Engine(Protocol):
    """What this module needs of a BatchEngine, its public submit() (engine.py imports this module: no import
    back)."""

    def submit(self, prompt: str | Sequence[int], on_chunk: Callable[[Chunk], None],
               **kwargs: Unpack[RequestOptions]) -> Submitted: ...


@dataclass(frozen=True)
class EngineCompletion:
    """A request run to its end: its text and tokens, why it ended ("stop" or "length") and its usage."""
    text: str
    tokens: list[int]
    finish_reason: str
    usage: Usage


async def astream(engine: Engine, prompt: str | Sequence[int],
                  **kwargs: Unpack[RequestOptions]) -> AsyncIterator[Chunk]:
    """submit()'s chunks as they come (kwargs: submit's); an error chunk raises its error."""
    loop = asyncio.get_running_loop()
    chunks: asyncio.Queue[Chunk] = asyncio.Queue()

    def deliver(chunk: Chunk) -> None:  # engine thread
        loop.call_soon_threadsafe(chunks.put_nowait, chunk)  # (a closed loop raises; the engine then cancels)

    submitting = asyncio.ensure_future(asyncio.to_thread(engine.submit, prompt, deliver, **kwargs))
    try:
        handle = await asyncio.shield(submitting)
    except asyncio.CancelledError:  # cancelled while the worker thread submits: cancel the request it queues
        def cancel_queued(done: asyncio.Future[Submitted]) -> None:
            if done.exception() is None:
                done.result().cancel()
        submitting.add_done_callback(cancel_queued)
        raise
    try:
        while True:
            chunk = await chunks.get()
            last = last_chunk(chunk)
            yield chunk
            if last:
                return
    finally:
        handle.cancel()  # (after the last chunk it does nothing)


def last_chunk(chunk: Chunk) -> bool:
    """Whether `chunk` is its request's last; an error chunk raises its error (stream's and astream's rule)."""
    if chunk.error is not None:
        raise chunk.error
    return chunk.finish_reason is not None


async def acomplete(engine: Engine, prompt: str | Sequence[int], **kwargs: Unpack[RequestOptions]) -> EngineCompletion:
    """The whole result of a request (kwargs: submit's)."""
    text: list[str] = []
    tokens: list[int] = []
    async for chunk in astream(engine, prompt, **kwargs):
        text.append(chunk.text)
        tokens.extend(chunk.tokens)
        if chunk.finish_reason is not None:
            assert chunk.usage is not None  # (the last chunk of a request that did not fail carries it)
            return EngineCompletion("".join(text), tokens, chunk.finish_reason, chunk.usage)
    raise AssertionError("the engine ended a request without a last chunk")  # pragma: no cover
