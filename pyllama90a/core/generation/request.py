"""`GenerationRequest`: what to generate after a prompt, checked once where user input enters (Model.generate
and chat, BatchEngine.submit, the server's protocol layer) and trusted below.

Stop strings: an empty one is refused here (it would match at once and end every generation before its first
character). OpenAI's API accepts "" and means nothing by it, so the server's protocol layer drops empty stop
strings before it builds a request: the rule is the library's, the leniency the protocol's.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...errors import InvalidArgumentError, flag, positive_int, utf8
from ..constrained import Constraint
from .context_shift import check_n_keep
from .lora_request import RequestedLora, requested_lora
from .sampling import SamplingOptions, SamplingParams
from .thinking import Thinking

if TYPE_CHECKING:  # pragma: no cover (Python 3.11's typing.Unpack; only the type checker reads it)
    from typing_extensions import Unpack

MAX_TOP_LOGPROBS = 20  # alternatives reported per token, at most (OpenAI's top_logprobs bound)


def check_stops(stop: object) -> tuple[str, ...]:
    """Stop strings given as a str, a list or tuple of them, or None (none), checked: non-empty, valid UTF-8."""
    if stop is None:
        return ()
    stops = (stop,) if isinstance(stop, str) else tuple(stop) if isinstance(stop, (list, tuple)) else None
    if stops is None or not all(isinstance(s, str) and s for s in stops):
        raise InvalidArgumentError(f"stop must be a non-empty str, a list of them or None, got {stop!r}"[:200])
    for s in stops:
        utf8("a stop string", s)
    return stops


@dataclass(frozen=True)
class GenerationRequest:
    """One generation's settings after its prompt. Every instance is checked (in __post_init__, so
    dataclasses.replace checks again): the sampling, the stop strings, max_tokens, logprobs (None, or how many
    alternatives to report per token), ignore_eos (max_tokens generated, for benchmarks: the end-of-generation
    tokens banned, as llama.cpp does it), the output constraint and the logit_bias (token id -> bias; checked
    against a vocabulary when GenerationSequence compiles it), the LoRA adapters it runs with ((id, scale)
    pairs, or {id: scale} made into them; None: the defaults; see lora.py), a chat's thinking block (thinking.py:
    its markers, budget, and the constraint waiting for its end), and n_keep: the prompt tokens a context shift
    keeps (-1: all; context_shift.py)."""

    max_tokens: int = 256
    stops: tuple[str, ...] = ()
    sampling: SamplingParams = field(default_factory=SamplingParams)
    constraint: Constraint | None = None
    logit_bias: Mapping[object, object] | None = None
    logprobs: int | None = None
    ignore_eos: bool = False
    lora: RequestedLora | None = None
    thinking: Thinking | None = None
    n_keep: int = 0
    # llama-server's: logprobs are of the probabilities after the sampler chain's truncations (post_sampling.py)
    post_sampling_probs: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "lora", requested_lora(self.lora))
        positive_int("max_tokens", self.max_tokens)
        if not isinstance(self.stops, tuple) or check_stops(self.stops) != self.stops:  # (check_stops raises)
            raise InvalidArgumentError("stops must be a tuple of stop strings (see check_stops)")
        if not isinstance(self.sampling, SamplingParams):
            raise InvalidArgumentError(f"sampling must be a SamplingParams, got {type(self.sampling).__name__}")
        if self.constraint is not None and not isinstance(self.constraint, Constraint):
            raise InvalidArgumentError(f"constraint must be a pyllama90a.core.constrained Constraint, got "
                                       f"{type(self.constraint).__name__}", param="constraint")
        logprobs = self.logprobs
        if logprobs is not None and (isinstance(logprobs, bool) or not isinstance(logprobs, int)
                                     or not 0 <= logprobs <= MAX_TOP_LOGPROBS):
            raise InvalidArgumentError(f"logprobs must be an integer in [0, {MAX_TOP_LOGPROBS}], got {logprobs!r}",
                                       param="logprobs")
        flag("ignore_eos", self.ignore_eos)
        check_n_keep(self.n_keep)
        if flag("post_sampling_probs", self.post_sampling_probs) and self.sampling.penalized:
            raise InvalidArgumentError("post_sampling_probs cannot be combined with repeat, frequency or presence "
                                       "penalties", param="post_sampling_probs")
        if self.thinking is not None and not isinstance(self.thinking, Thinking):
            raise InvalidArgumentError(f"thinking must be a Thinking, got {type(self.thinking).__name__}")
        if self.constraint is not None and self.ignore_eos:
            raise InvalidArgumentError("ignore_eos cannot be combined with a constraint, which ends at the end of "
                                       "its match", param="ignore_eos")

    @classmethod
    def of(cls, *, max_tokens: int = 256, stop: str | Sequence[str] | None = (), logprobs: int | None = None,
           ignore_eos: bool = False, constraint: Constraint | None = None,
           logit_bias: Mapping[object, object] | None = None, lora: Mapping[int, float] | RequestedLora | None = None,
           n_keep: int = 0, **sampling: Unpack[SamplingOptions]) -> GenerationRequest:
        """A request from the arguments users pass (stop as a str, a list or None; lora as {id: scale}; the
        SamplingParams fields), checked as every request is (so also when a caller's types were wrong)."""
        return cls(max_tokens, check_stops(stop), SamplingParams(**sampling), constraint, logit_bias, logprobs,
                   ignore_eos, requested_lora(lora), n_keep=n_keep)


class RequestOptions(SamplingOptions, total=False):
    """GenerationRequest.of's keyword arguments: BatchEngine.submit's, which its stream, astream and acomplete
    pass on."""
    max_tokens: int
    stop: str | Sequence[str] | None
    logprobs: int | None
    ignore_eos: bool
    constraint: Constraint | None
    logit_bias: Mapping[object, object] | None
    lora: Mapping[int, float] | RequestedLora | None
    n_keep: int
