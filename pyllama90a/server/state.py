"""What the routes share: the engine, the settings, the counts /metrics reports, and the mailbox that carries
the engine thread's chunks to the event loop."""
from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import __version__
from ..core.engine.engine import BatchEngine, Chunk
from ..core.model.memory_plan import KVCacheInfo
from ..core.model.model import Model
from ..errors import LlamaError
from .executors import Executors
from .protocol.base import Limits
from .response_store import ResponseStore
from .responses.openai import Shape
from .slot_policy import SlotFolder
from .worker_recovery import WorkerRecovery


@dataclass(frozen=True)
class CorsFlags:
    """llama-server's --cors-methods, --cors-headers and --cors-credentials (used with --cors-origins)."""
    methods: tuple[str, ...] = ("GET", "POST", "OPTIONS")
    headers: tuple[str, ...] = ("*",)
    credentials: bool = False


@dataclass
class ServerState:
    engine: BatchEngine
    model_name: str
    api_key: str | None = None
    embedder: Model | None = None
    limits: Limits = field(default_factory=Limits)
    cors_origins: tuple[str, ...] = ()  # --cors-origins: "*", "localhost" or origins; none: no CORS headers
    cors: CorsFlags = field(default_factory=lambda: CorsFlags())  # llama-server's other CORS flags
    model_aliases: tuple[str, ...] = ()  # --alias: the names the model also answers to (model_name is the first)
    model_tags: tuple[str, ...] = ()  # --tags: shown in /v1/models, used for nothing else
    # a new engine made as at start-up: what loads the model again once lost RPC workers are back (None: never)
    reopen: Callable[[], BatchEngine] | None = None
    slot_folder: SlotFolder | None = None  # --slot-save-path and its secret and quota (None: the slot actions are 501)
    executors: Executors = field(default_factory=Executors)  # the worker threads, one bounded pool per kind of work
    metrics_public: bool = False  # --metrics-public: /metrics answered without the API key
    slots_served: bool = True  # --no-slots: GET /slots is a 501, as llama-server's
    metrics_served: bool = True  # --no-metrics: GET /metrics is a 501, as llama-server's without --metrics
    response_store: ResponseStore = field(default_factory=ResponseStore)  # /v1/responses' (--responses-store)
    created: int = field(init=False, default_factory=lambda: int(time.time()))
    draining: bool = field(init=False, default=False)  # shutting down: new requests get 503

    def __post_init__(self) -> None:
        self.responses: Counter[tuple[str, int]] = Counter()
        self.timed: Counter[str] = Counter()  # finished requests' timings, summed: for llama-server's metrics
        self.embed_lock = threading.Lock()
        # system_fingerprint: what answers, in this server's version and the engine's KV types (no native call
        # per request: they are fixed)
        self.fingerprint = f"pyllama90a-{__version__}-{self.engine.model.ctk}-{self.engine.model.ctv}"
        self._mailbox: Mailbox | None = None
        self.kv_cache: KVCacheInfo = self.engine.model.kv_cache  # (read once per engine: see replace_engine)
        self.workers = WorkerRecovery(lambda: self.engine, self.replace_engine, self.reopen)

    def replace_engine(self, engine: BatchEngine) -> None:
        """Serve from `engine` (the model loaded again, with the old one's default LoRA scales: POST
        /lora-adapters may have changed them) and close the old one, and the embedder on its weights (made again
        on first use)."""
        engine.lora.set_defaults(dict(enumerate(self.engine.lora.defaults)))
        # the KV cache's facts, fixed with the context, for /metrics: Model.kv_cache takes the model's lock, which
        # long context work (a slot file's save or restore) holds for seconds, and /metrics must not wait for it on
        # the event loop
        self.kv_cache = engine.model.kv_cache
        old, self.engine = self.engine, engine
        with self.embed_lock:
            embedder, self.embedder = self.embedder, None
        with contextlib.suppress(LlamaError):
            old.close()
        if embedder is not None:
            embedder.close()


    def note_timings(self, shape: Shape) -> None:
        timings = shape.timings()
        self.timed.update({"prompt": timings["prompt_ms"] / 1e3, "predicted": timings["predicted_ms"] / 1e3,
                           "prompt_n": timings["prompt_n"], "predicted_n": timings["predicted_n"]})

    def mailbox(self, loop: asyncio.AbstractEventLoop) -> Mailbox:
        if self._mailbox is None or self._mailbox.loop is not loop:
            self._mailbox = Mailbox(loop)
        return self._mailbox


class Mailbox:
    """Chunks from the engine thread to the event loop's queues, with one loop wake-up per batch of chunks
    (a decode step makes one chunk per slot) instead of one per chunk."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._pending: list[tuple[asyncio.Queue[tuple[int, Chunk]], tuple[int, Chunk]]] = []
        self._lock = threading.Lock()
        self._scheduled = False

    def sender(self, queue: asyncio.Queue[tuple[int, Chunk]], choice: int = 0) -> Callable[[Chunk], None]:
        """The engine's on_chunk for choice `choice` of a request: its chunks reach `queue` as (choice, chunk)."""
        def send(chunk: Chunk) -> None:  # engine thread
            with self._lock:
                self._pending.append((queue, (choice, chunk)))
                if self._scheduled:
                    return
                self._scheduled = True
            try:
                self.loop.call_soon_threadsafe(self._deliver)
            except RuntimeError:  # the loop is closed (shutting down): the engine cancels this request
                with self._lock:
                    self._scheduled = False
                raise
        return send

    def _deliver(self) -> None:  # event loop
        with self._lock:
            pending, self._pending, self._scheduled = self._pending, [], False
        for queue, item in pending:
            queue.put_nowait(item)

