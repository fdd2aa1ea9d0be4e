"""The Responses API's stored responses (POST /v1/responses with `store`, the default): what
`previous_response_id` continues and GET /v1/responses/{id} answers. In memory, bounded by a count
(--responses-store, 0 keeps none): past it the least recently used response is forgotten, and a request that
names it gets a 400 (`previous_response_not_found`), as OpenAI answers an id it does not know. Each entry holds
its whole conversation (every earlier turn's input and output items, then its own), so a chain of follow-ups
needs only its last response to be kept."""
from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

DEFAULT_STORED_RESPONSES = 256


@dataclass(frozen=True)
class StoredResponse:
    """A response as answered (GET returns it), and the conversation's items up to and including its output."""
    response: dict[str, Any]
    items: tuple[dict[str, Any], ...]


class ResponseStore:
    """An LRU map from response id to StoredResponse, at most `limit` entries; read and written from the event
    loop and the request threads (a follow-up's input is resolved where its body is parsed)."""

    def __init__(self, limit: int = DEFAULT_STORED_RESPONSES) -> None:
        if limit < 0:
            raise ValueError(f"the responses store's limit must be 0 or more, got {limit}")
        self.limit = limit
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, ident: str, stored: StoredResponse) -> None:
        with self._lock:
            if self.limit == 0:
                return
            self._entries[ident] = stored
            self._entries.move_to_end(ident)
            while len(self._entries) > self.limit:
                self._entries.popitem(last=False)

    def get(self, ident: str) -> StoredResponse | None:
        """The stored response (now the most recently used), or None when unknown or forgotten."""
        with self._lock:
            stored = self._entries.get(ident)
            if stored is not None:
                self._entries.move_to_end(ident)
            return stored

    def delete(self, ident: str) -> bool:
        with self._lock:
            return self._entries.pop(ident, None) is not None

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
