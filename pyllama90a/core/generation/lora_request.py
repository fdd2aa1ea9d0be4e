"""A request's LoRA adapters as values: {id: scale} checked and sorted, what GenerationRequest carries. Which
adapters exist is the model's business (core/model/lora.py); this is what any request may name."""
from __future__ import annotations

from collections.abc import Mapping

from ...errors import INT32_MAX, InvalidArgumentError, LoraAdapterError, int_in_range, number_in_range

# |scale| at most this: 1 applies an adapter as trained, 0 turns it off, a few times 1 (or below 0) amplifies or
# inverts it. A scale of 3.4e38 (a C float's maximum) turned every logit into NaN; 100 leaves room to experiment.
MAX_SCALE = 100.0

# scales of every loaded adapter, by id: what a context is set to (one per adapter, 0.0 for "off")
Scales = tuple[float, ...]
# a request's adapters: (id, scale) pairs by id, each id once (what GenerationRequest carries)
RequestedLora = tuple[tuple[int, float], ...]


def lora_scale(name: str, value: object) -> float:
    """`value` as a scale (a finite number, |value| <= MAX_SCALE); LoraAdapterError naming `name` otherwise."""
    try:
        return float(number_in_range(name, value, -MAX_SCALE, MAX_SCALE))
    except InvalidArgumentError as e:
        raise LoraAdapterError(str(e)) from None


def requested_lora(value: object) -> RequestedLora | None:
    """A request's adapters, {id: scale} or the (id, scale) pairs this returns (None: the defaults), checked as
    values and sorted by id; whether the ids were loaded is LoraAdapters.scales_for's check."""
    if value is None:
        return None
    pairs = value.items() if isinstance(value, Mapping) else value if isinstance(value, tuple) and all(
        isinstance(p, tuple) and len(p) == 2 for p in value) else None
    if pairs is None:
        raise LoraAdapterError(f"lora must map adapter ids to scales, e.g. {{0: 0.5}}, got {type(value).__name__}")
    checked = {}
    for key, scale in pairs:
        try:
            int_in_range("a lora adapter id", key, 0, INT32_MAX)
        except InvalidArgumentError as e:
            raise LoraAdapterError(str(e)) from None
        if key in checked:
            raise LoraAdapterError(f"lora names adapter {key} twice")
        checked[key] = lora_scale(f"lora[{key}]", scale)
    return tuple(sorted(checked.items()))
