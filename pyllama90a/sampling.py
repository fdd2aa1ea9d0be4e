"""Sampling settings, validated in Python; native.SamplerChain turns them into a llama.cpp sampler chain."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TypedDict

from .errors import INT32_MAX, UINT32_MAX, InvalidArgumentError, int_in_range, number_in_range

# llama.cpp's LLAMA_DEFAULT_SEED (native.sampler.RANDOM_SEED): a uint32 that means "draw a random seed". Not
# imported from native/, so that this dataclass loads no native library and native/ imports it without a circle
RANDOM_SEED = UINT32_MAX
# below this temperature sampling is greedy, its limit: llama.cpp divides the logits by the temperature as a C
# float, and a temperature under about 1e-36 made them +-inf and the softmax NaN (one fixed token, whatever the
# seed); 1e-30 keeps logits up to 3e8 finite
GREEDY_BELOW = 1e-30


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0  # OpenAI's: subtract n * this from the logit of a token seen n times
    presence_penalty: float = 0.0   # OpenAI's: subtract this from the logit of a token seen at all
    seed: int | None = None

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

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW


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
