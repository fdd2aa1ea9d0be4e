"""Sampling settings, checked in Python; native.SamplerChain turns them into a llama.cpp sampler chain."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from ...errors import INT32_MAX, InvalidArgumentError, int_in_range, number_in_range
from ...native.sampler import RANDOM_SEED, SamplerSettings


@dataclass(frozen=True)
class SamplingParams(SamplerSettings):
    """SamplerSettings (the fields and their defaults), each checked: InvalidArgumentError names the bad one."""

    def __post_init__(self) -> None:
        number_in_range("temperature", self.temperature, 0.0, 100.0)
        int_in_range("top_k", self.top_k, 0, INT32_MAX)  # an int32 in llama_sampler_init_top_k
        number_in_range("top_p", self.top_p, 0.0, 1.0)
        number_in_range("min_p", self.min_p, 0.0, 1.0)
        number_in_range("repeat_penalty", self.repeat_penalty, 0.0, 100.0)
        if self.repeat_penalty == 0.0:
            raise InvalidArgumentError("repeat_penalty must be > 0 (1.0 disables it)")
        number_in_range("frequency_penalty", self.frequency_penalty, -2.0, 2.0)
        number_in_range("presence_penalty", self.presence_penalty, -2.0, 2.0)
        if self.seed is not None:  # a uint32 whose top value means "random"
            int_in_range("seed", self.seed, 0, RANDOM_SEED - 1)


class SamplingOptions(TypedDict, total=False):
    """SamplingParams' fields as keyword arguments (GenerationRequest.of's, BatchEngine.submit's)."""
    temperature: float
    top_k: int
    top_p: float
    min_p: float
    repeat_penalty: float
    frequency_penalty: float
    presence_penalty: float
    seed: int | None
