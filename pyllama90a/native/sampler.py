"""SamplerChain: a llama.cpp sampler chain built from SamplerSettings, sampling from a context's logits."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import UINT32_MAX, LlamaError
from ._ffi import ffi, lib
from .context import ContextHandle
from .log import NativeCall

RANDOM_SEED = UINT32_MAX  # llama.cpp's LLAMA_DEFAULT_SEED (a uint32): draw a random seed
PENALTY_LAST_N = 64  # the penalties count the last 64 tokens the chain picked
# below this temperature sampling is greedy, its limit: llama.cpp divides the logits by the temperature as a C
# float, and a temperature under about 1e-36 made them +-inf and the softmax NaN (one fixed token, whatever the
# seed); 1e-30 keeps logits up to 3e8 finite
GREEDY_BELOW = 1e-30


@dataclass(frozen=True)
class SamplerSettings:
    """The values a sampler chain is built from, as llama.cpp's samplers take them. Unchecked here: the library's
    SamplingParams (core/generation/sampling.py) is these fields, checked where user input enters."""
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    frequency_penalty: float = 0.0  # OpenAI's: subtract n * this from the logit of a token seen n times
    presence_penalty: float = 0.0   # OpenAI's: subtract this from the logit of a token seen at all
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    @property
    def penalized(self) -> bool:
        """The chain starts with llama.cpp's penalties sampler (repeat, frequency or presence)."""
        return (self.repeat_penalty, self.frequency_penalty, self.presence_penalty) != (1.0, 0.0, 0.0)


class SamplerChain:
    """A llama.cpp sampler chain for one generation (it remembers the tokens it picked, for the penalties). It
    needs no context to be made, so a request can build its own on any thread; freed when garbage collected."""

    def __init__(self, params: SamplerSettings, n_vocab: int) -> None:
        with NativeCall() as call:
            chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
        call.check(chain != ffi.NULL, LlamaError, "could not create a sampler chain")
        self._ptr = ffi.gc(chain, lib.llama_sampler_free)
        penalties = params.penalized
        # greedy without penalties is the logits row's argmax (the first of equal maxima, as llama.cpp's greedy
        # sampler picks): numpy finds it without llama.cpp building its n_vocab candidate array per token
        self.argmax_only = params.greedy and not penalties
        if penalties:
            self._add(lib.llama_sampler_init_penalties, n_vocab, PENALTY_LAST_N, params.repeat_penalty,
                      params.frequency_penalty, params.presence_penalty)
        if params.greedy:
            self._add(lib.llama_sampler_init_greedy)
            return
        if params.top_k > 0:
            self._add(lib.llama_sampler_init_top_k, params.top_k)
        self._add(lib.llama_sampler_init_top_p, params.top_p, 1)
        self._add(lib.llama_sampler_init_min_p, params.min_p, 1)
        self._add(lib.llama_sampler_init_temp, params.temperature)
        self._add(lib.llama_sampler_init_dist, RANDOM_SEED if params.seed is None else params.seed)

    def _add(self, init: Callable[..., Any], *args: object) -> None:
        with NativeCall() as call:
            sampler = init(*args)
        call.check(sampler != ffi.NULL, LlamaError, "could not create a sampler")
        lib.llama_sampler_chain_add(self._ptr, sampler)  # the chain owns it from now on

    def sample(self, context: ContextHandle, index: int = -1) -> int:
        """Sample from the logits of batch position `index` (default: the last output) and accept the token."""
        row = context.logits_row(index)  # llama.cpp aborts the process on a position without logits: checked first
        if self.argmax_only:
            return int(row.argmax())
        return lib.llama_sampler_sample(self._ptr, context.ptr, index)
