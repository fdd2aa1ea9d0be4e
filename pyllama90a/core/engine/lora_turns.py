"""LoRA adapter sets in a BatchEngine: llama.cpp applies adapters to a whole context, not per sequence, so one
decode step runs with one set of scales. Requests with different sets take turns, a step each, round-robin
over the sets that have work (none starves); a slot's cached cells are reused only by a request with the set
they were computed with.

With no adapters loaded every request has the same (empty) set: the engine runs as without this module.
"""
from __future__ import annotations

import threading
from collections.abc import Mapping

from ...errors import LoraAdapterError, NonFiniteOutputError
from ...native import ContextHandle
from ..generation.lora_request import RequestedLora, Scales, requested_lora
from ..model.lora import LoraAdapters
from .prefix_reuse import slot_preference
from .slots import Job, Slot


class LoraTurns:
    """The adapter sets of one engine: each request's scales (its own or the engine's defaults), and which set
    the next decode step runs with."""

    def __init__(self, adapters: LoraAdapters, context: ContextHandle) -> None:
        self.adapters, self._context = adapters, context
        self._lock = threading.Lock()
        self._defaults: Scales = adapters.scales  # a request that names no adapters runs with these
        self._applied: Scales = adapters.scales   # what the context runs with (Model set the loaded scales)
        self._last: Scales | None = None          # the set of the last step

    @property
    def defaults(self) -> Scales:
        with self._lock:
            return self._defaults

    def set_defaults(self, scales: Mapping[int, float] | RequestedLora) -> Scales:
        """Change the default scale of the adapters named ({id: scale}; the others keep theirs) for requests
        queued from now on; returns every adapter's default. LoraAdapterError for a bad id or scale."""
        named = dict(requested_lora(scales) or ())
        with self._lock:
            self.adapters.scales_for(tuple(named.items()))  # (checks the ids)
            self._defaults = tuple(named.get(i, s) for i, s in enumerate(self._defaults))
            return self._defaults

    def scales_for(self, requested: RequestedLora | None) -> Scales:
        """A request's scales, fixed when it is queued (caller's thread)."""
        return self.adapters.scales_for(requested, self.defaults)

    @staticmethod
    def blame(error: Exception, scales: Scales) -> Exception:
        """The error a request run with `scales` ends with: NaN or infinite output with an adapter on is its
        LoraAdapterError (a 400 on the server, not a server error: the request chose the adapters and scales,
        and the requests that run without them go on), any other error itself."""
        on = {i: s for i, s in enumerate(scales) if s}
        if not isinstance(error, NonFiniteOutputError) or not on:
            return error
        return LoraAdapterError(f"with the LoRA adapters at scales {on} (id: scale): {error}. A smaller scale, or "
                                f"an adapter with finite weights, may compute finite values")

    def take_turn(self, active: list[tuple[Slot, Job]]) -> list[tuple[Slot, Job]]:
        """The slots of `active` whose requests' set has the next turn, with the context set to it (engine
        thread): the set after the last one's in sorted order, wrapping around."""
        sets = sorted({job.lora for _, job in active})
        after = [s for s in sets if self._last is not None and s > self._last]
        turn = self._last = (after or sets)[0]
        if turn != self._applied:
            self.adapters.apply(self._context, turn)
            self._applied = turn
        return [(slot, job) for slot, job in active if job.lora == turn]

    @staticmethod
    def admit(free: list[Slot], job: Job) -> Slot:
        """The free slot for `job`: prefix_reuse.slot_preference's, whose shared prefix counts only in cells
        computed with its set; a slot whose cells another set computed forgets them (keep_cached_prefix then
        drops them)."""
        slot = max(free, key=lambda s: slot_preference(s, job.prompt) if s.lora == job.lora
                   else (0, not s.cached, -s.admitted))
        if slot.lora != job.lora:
            slot.cached.clear()
            slot.lora = job.lora
        return slot
