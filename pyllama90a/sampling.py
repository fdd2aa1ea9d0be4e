"""Sampling settings, validated in Python and turned into a llama.cpp sampler chain."""
from __future__ import annotations

from dataclasses import dataclass

from ._ffi import ffi, lib
from .errors import INT32_MAX, UINT32_MAX, InvalidArgumentError, LlamaError, check, int_in_range, number_in_range

RANDOM_SEED = UINT32_MAX  # llama.cpp's LLAMA_DEFAULT_SEED (a uint32): draw a random seed


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
        return self.temperature == 0.0


class SamplerChain:
    """A llama.cpp sampler chain; freed by close() or when garbage collected."""

    def __init__(self, params: SamplingParams, n_vocab: int) -> None:
        chain = check(lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params()),
                      LlamaError, "could not create a sampler chain")
        self._ptr = ffi.gc(chain, lib.llama_sampler_free)
        if (params.repeat_penalty, params.frequency_penalty, params.presence_penalty) != (1.0, 0.0, 0.0):
            # over the last 64 generated tokens
            self._add(lib.llama_sampler_init_penalties(n_vocab, 64, params.repeat_penalty, params.frequency_penalty,
                                                       params.presence_penalty))
        if params.greedy:
            self._add(lib.llama_sampler_init_greedy())
            return
        if params.top_k > 0:
            self._add(lib.llama_sampler_init_top_k(params.top_k))
        self._add(lib.llama_sampler_init_top_p(params.top_p, 1))
        self._add(lib.llama_sampler_init_min_p(params.min_p, 1))
        self._add(lib.llama_sampler_init_temp(params.temperature))
        self._add(lib.llama_sampler_init_dist(RANDOM_SEED if params.seed is None else params.seed))

    def _add(self, sampler) -> None:  # noqa: ANN001 - a cdata pointer
        # the chain takes ownership of each sampler added to it
        lib.llama_sampler_chain_add(self._ptr, check(sampler, LlamaError, "could not create a sampler"))

    def sample(self, ctx, index: int = -1) -> int:  # noqa: ANN001 - a cdata pointer
        """Sample from the logits of batch position `index` (default: the last output); llama_sampler_sample
        also accepts the token."""
        return lib.llama_sampler_sample(self._ptr, ctx, index)
