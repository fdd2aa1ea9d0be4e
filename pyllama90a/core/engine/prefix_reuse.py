"""Which free slot a new request runs in, and where the cells of its prompt's cached prefix come from: that
slot's own cells, another slot's (idle or busy: its sequence state copied over), or the host-RAM prompt cache
(prompt_cache.py). Engine thread only.

A slot is chosen as llama-server chooses one: the free slot whose cache shares the longest prefix with the
prompt, when that prefix is at least a tenth of the prompt (its --slot-prompt-similarity 0.10); otherwise an
empty slot, else the least recently used one, so that a request unlike the others does not take the cells a
later request would reuse. Then the longest prefix anywhere wins: when another slot or the RAM cache holds at
least MIN_GAIN tokens more of it than the chosen slot, their cells are copied in (llama.cpp's sequence state,
get and set: each slot's KV stream is its own, and llama_memory_seq_cp copies across streams only whole
buffers). With the RAM cache on, cells a request is about to drop (MIN_GAIN tokens or more) are stored there
first.
"""
from __future__ import annotations

import logging
from collections.abc import Sequence

from ...errors import LlamaError
from ...native import ContextHandle
from ..generation.prefix_cache import common_prefix, keep_cached_prefix
from .prompt_cache import PromptCache
from .slots import Job, Slot

log = logging.getLogger(__name__)

SIMILARITY = 0.10  # the share of a prompt a slot's cache must hold for the slot to be chosen for it
MIN_GAIN = 32  # tokens: fewer are cheaper to decode again than a sequence state is to copy or store


def slot_preference(slot: Slot, prompt: Sequence[int]) -> tuple[int, bool, int]:
    """How much a request with `prompt` wants `slot` (the higher, the more): the prefix it reuses when that is
    at least SIMILARITY of the prompt, then an empty slot, then the least recently used."""
    shared = common_prefix(slot.cached, prompt)
    return (shared if shared >= SIMILARITY * len(prompt) else 0, not slot.cached, -slot.admitted)


class PrefixReuse:
    """The cached prefixes of one engine's `slots` and, if any, its RAM prompt cache."""

    def __init__(self, context: ContextHandle, slots: Sequence[Slot], ram: PromptCache | None) -> None:
        self._context, self._slots, self.ram = context, slots, ram
        self._admissions = 0

    def prepare(self, slot: Slot, job: Job) -> int:
        """Give `slot` (free, its scales job.lora's) the longest cached prefix of job's prompt found here, drop
        the rest of its cells; how many prompt tokens it keeps (at most all but the last, whose logits start the
        generation)."""
        self._admissions += 1
        slot.admitted = self._admissions
        prompt, most = job.prompt, len(job.prompt) - 1
        own = min(common_prefix(slot.cached, prompt), most)
        donors = [s for s in self._slots if s is not slot and s.lora == job.lora and s.cached]
        donor = max(donors, key=lambda s: common_prefix(s.cached, prompt), default=None)
        from_slot = min(common_prefix(donor.cached, prompt), most) if donor is not None else 0
        entry, from_ram = self.ram.longest(prompt, job.lora) if self.ram is not None else (None, 0)
        from_ram = min(from_ram, most)
        if max(from_slot, from_ram) - own >= MIN_GAIN:
            if from_slot >= from_ram and donor is not None:
                tokens, state = list(donor.cached), self._context.sequence_state_bytes(donor.seq)
            else:
                assert entry is not None and self.ram is not None  # (from_ram > from_slot >= 0)
                tokens, state = list(entry.tokens), entry.state
                self.ram.used(entry)  # (first: storing the slot's cells next drops the least recently used)
            self._store(slot)
            self._load(slot, tokens, state)
        elif len(slot.cached) - own >= MIN_GAIN:
            self._store(slot)
        return keep_cached_prefix(self._context, slot.seq, slot.cached, prompt)

    def _store(self, slot: Slot) -> None:
        """Keep the slot's cells in the RAM cache (if on) before a request replaces them."""
        if self.ram is None or len(slot.cached) < MIN_GAIN or self.ram.holds(slot.cached, slot.lora):
            return
        try:
            self.ram.store(slot.cached, slot.lora, self._context.sequence_state_bytes(slot.seq))
        except LlamaError:  # pragma: no cover - llama.cpp copies a KV cache's sequence; the request goes on
            log.warning("could not copy slot %d's state into the prompt cache", slot.seq, exc_info=True)

    def _load(self, slot: Slot, tokens: list[int], state: memoryview) -> None:
        """Give the slot cells holding `tokens` (their sequence state); the slot empty when llama.cpp refuses
        the state (the prompt is then decoded)."""
        self._context.clear_sequence(slot.seq)
        slot.cached.clear()
        try:
            self._context.set_sequence_state(slot.seq, state)
        except LlamaError:  # pragma: no cover - a state of this same context
            log.warning("llama.cpp refused a cached prefix for slot %d", slot.seq, exc_info=True)
            self._context.clear_sequence(slot.seq)
            return
        slot.cached[:] = tokens
