"""The host-RAM prompt cache of a BatchEngine (llama-server's --cache-ram): sequence states kept in memory, keyed
by the tokens their cells hold, so that a prompt whose prefix a slot once held restores those cells instead of
decoding them again.

An entry is what a slot held when a request was about to replace its cells: the tokens, the LoRA scales they
were computed with, and llama.cpp's state of that one sequence (ContextHandle.sequence_state_bytes, the payload
of the project's slot files; set_sequence_state gives it back to any slot of the same context). The cache holds
at most `max_bytes` of states, dropping the least recently used; an entry whose tokens another entry's start
with is dropped as that one is stored (the longer one serves every prompt the shorter one did).
"""
from __future__ import annotations

import collections
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from ...errors import positive_int
from ..generation.lora_request import Scales
from ..generation.prefix_cache import common_prefix


@dataclass(frozen=True)
class CachedPrompt:
    """One sequence's cells: the tokens they hold, the adapter scales they were computed with, llama.cpp's
    state of the sequence."""
    tokens: tuple[int, ...]
    lora: Scales
    state: memoryview

    @property
    def n_bytes(self) -> int:
        return self.state.nbytes


@dataclass(frozen=True)
class PromptCacheStats:
    entries: int
    bytes: int
    max_bytes: int
    hits: int      # prompts whose prefix was restored from the cache
    stores: int    # states stored (each one a slot's cells about to be replaced)


class PromptCache:
    """Sequence states in host RAM, at most `max_bytes` of them, least recently used dropped first. Used by the
    engine thread; stats() from any thread."""

    def __init__(self, max_bytes: int) -> None:
        positive_int("max_bytes", max_bytes, hi=1 << 50)
        self.max_bytes = max_bytes
        self._entries: collections.OrderedDict[int, CachedPrompt] = collections.OrderedDict()  # LRU first
        self._next_key = 0
        self._bytes = self._hits = self._stores = 0
        self._lock = threading.Lock()  # (for stats(); the engine thread is the only one that changes entries)

    def holds(self, tokens: Sequence[int], lora: Scales) -> bool:
        """Whether an entry already covers `tokens` (its tokens start with them, same scales): storing them would
        add nothing."""
        n = len(tokens)
        return any(e.lora == lora and len(e.tokens) >= n and common_prefix(e.tokens, tokens) == n
                   for e in self._entries.values())

    def store(self, tokens: Sequence[int], lora: Scales, state: memoryview) -> bool:
        """Keep `state` (of cells holding `tokens`); False when it alone is larger than the cache."""
        entry = CachedPrompt(tuple(tokens), lora, state)
        if entry.n_bytes > self.max_bytes:
            return False
        with self._lock:
            covered = [k for k, e in self._entries.items()
                       if e.lora == lora and common_prefix(e.tokens, entry.tokens) == len(e.tokens)]
            for key in covered:
                self._drop(key)
            while self._entries and self._bytes + entry.n_bytes > self.max_bytes:
                self._drop(next(iter(self._entries)))
            self._entries[self._next_key] = entry
            self._next_key += 1
            self._bytes += entry.n_bytes
            self._stores += 1
        return True

    def longest(self, prompt: Sequence[int], lora: Scales) -> tuple[CachedPrompt | None, int]:
        """The entry of scales `lora` sharing the longest prefix with `prompt`, and that length (None, 0: none)."""
        best: tuple[int, int] | None = None
        for key, entry in self._entries.items():
            if entry.lora == lora:
                n = common_prefix(entry.tokens, prompt)
                if n and (best is None or n > best[1]):
                    best = (key, n)
        if best is None:
            return None, 0
        return self._entries[best[0]], best[1]

    def used(self, entry: CachedPrompt) -> None:
        """`entry` was restored: it becomes the most recently used."""
        with self._lock:
            for key, e in self._entries.items():
                if e is entry:
                    self._entries.move_to_end(key)
                    self._hits += 1
                    return

    def stats(self) -> PromptCacheStats:
        with self._lock:
            return PromptCacheStats(len(self._entries), self._bytes, self.max_bytes, self._hits, self._stores)

    def _drop(self, key: int) -> None:
        self._bytes -= self._entries.pop(key).n_bytes
