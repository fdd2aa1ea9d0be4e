"""Fake ggml-rpc peers for the RPC tests: a loopback listener that plays a worker, one connection at a time."""
from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def loopback_listener(answer: Callable[[socket.socket, threading.Event], None]) -> Iterator[str]:
    """A listener on 127.0.0.1 that hands each connection, one after another, to `answer` (with an event set once
    the listener is stopping), then closes it; yields its endpoint, "127.0.0.1:port"."""
    server = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(OSError):  # TimeoutError included: accept's wait for the stop event
                conn, _ = server.accept()
                with conn:
                    answer(conn, stop)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        server.close()
