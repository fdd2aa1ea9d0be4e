"""A time limit on reading a request's headers (slowloris): uvicorn's HTTP protocol with a timer.

uvicorn (0.54) times out only an idle kept-alive connection, and only after a response: a client that opens a
connection and sends its headers a byte at a time holds it forever (50 such connections stayed open 20 s and
more). Its `http` setting takes a protocol class; this one closes a connection whose request headers are not
complete `--header-timeout` seconds after it opened or after its last response.
"""
from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol


def protocol_with_header_timeout(seconds: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol, closing connections whose request headers take more than `seconds`."""

    class HeaderTimeoutProtocol(H11Protocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._header_timer: asyncio.TimerHandle | None = None
            self._waiting_cycle: object = None  # the request cycle when the timer was armed

        def _arm(self) -> None:
            self._disarm()
            self._waiting_cycle = self.cycle
            self._header_timer = self.loop.call_later(seconds, self._headers_too_slow)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if self.cycle is self._waiting_cycle and not self.transport.is_closing():
                self.transport.close()  # no request began since the timer was armed

        # (uvicorn's own signature, which narrows asyncio.Protocol's BaseTransport to a Transport)
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._header_timer is not None and self.cycle is not self._waiting_cycle:
                self._disarm()  # the headers are complete: a request cycle began

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request's headers on this kept-alive connection

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return HeaderTimeoutProtocol
