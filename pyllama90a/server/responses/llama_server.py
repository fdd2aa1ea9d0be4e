"""llama-server's answers of POST /completion, from the engine's Chunks: `content`, `tokens`, `stop`,
`stop_type` ("eos", "word" with its `stopping_word`, "limit"), `timings`, `generation_settings`, and
`completion_probabilities` when n_probs asks for them. A stream sends one event per chunk (content and tokens
so far) and a last one with stop: true and the whole answer's fields; it ends without `[DONE]`, as
llama-server's does."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ...core.engine.engine import Chunk
from ...core.generation.request import GenerationRequest
from ...core.generation.sequence import TokenLogprob
from .openai import Shape, _text  # one decoding of a token piece for both answer formats


def completion_probabilities(items: Sequence[TokenLogprob], post_sampling: bool = False) -> list[dict[str, Any]]:
    """llama-server's completion_probabilities: logprob and top_logprobs, or (post_sampling_probs) prob and
    top_probs, the probabilities after the sampler chain (core/generation/post_sampling.py)."""
    if post_sampling:
        return [{"id": i.token, "token": _text(i.piece), "bytes": list(i.piece), "prob": math.exp(i.logprob),
                 "top_probs": [{"id": t, "token": _text(p), "bytes": list(p), "prob": math.exp(lp)}
                               for t, p, lp in i.top]} for i in items]
    return [{"id": i.token, "token": _text(i.piece), "bytes": list(i.piece), "logprob": i.logprob,
             "top_logprobs": [{"id": t, "token": _text(p), "bytes": list(p), "logprob": lp} for t, p, lp in i.top]}
            for i in items]


def generation_settings(request: GenerationRequest, *, n_ctx: int, model: str, stream: bool,
                        eog: Sequence[int] = ()) -> dict[str, Any]:
    """llama-server's generation_settings (in answers, /props, /slots) of a request: what it samples with. eog:
    the model's end-of-generation tokens when ignore_eos bans them (listed in logit_bias, as llama-server does)."""
    sampling = request.sampling
    bias: dict[object, object] = {**(request.logit_bias or {}), **dict.fromkeys(eog, -100.0)}
    return {"n_ctx": n_ctx, "model": model, "n_predict": request.max_tokens, "max_tokens": request.max_tokens,
            "seed": 0xFFFFFFFF if sampling.seed is None else sampling.seed,  # (llama.cpp's "random")
            "temperature": sampling.temperature, "top_k": sampling.top_k, "top_p": sampling.top_p,
            "min_p": sampling.min_p, "repeat_last_n": 64, "repeat_penalty": sampling.repeat_penalty,
            "presence_penalty": sampling.presence_penalty, "frequency_penalty": sampling.frequency_penalty,
            "stop": list(request.stops), "ignore_eos": request.ignore_eos, "stream": stream,
            "n_probs": request.logprobs or 0, "constrained": request.constraint is not None,
            # llama-server's list form, the bias each token gets (a ban, false, is -100 here)
            "logit_bias": [{"token": token, "bias": value} for token, value in bias.items()]}


def picked(answer: dict[str, Any], paths: tuple[str, ...]) -> dict[str, Any]:
    """llama-server's response_fields: only the fields named, each under its path ("a/b" reads answer["a"]["b"]);
    a path the answer does not have is left out."""
    picked: dict[str, Any] = {}
    for path in paths:
        value: Any = answer
        for key in path.split("/"):
            if not (isinstance(value, dict) and key in value):
                break
            value = value[key]
        else:
            picked[path] = value
    return picked


class NativeCompletionShape(Shape):
    """One choice per prompt: /completion's n is 1, and a list of prompts (llama-server's batch) answers a list,
    one answer per prompt, by index."""
    done_marker = False
    ends_in_model = True  # (the prompt's text, and the stop word found in the generated tokens' text)

    def __init__(self, ident: str, model: str, *, prompts: list[list[int]], settings: dict[str, Any],
                 detokenize: Callable[[list[int]], str], return_tokens: bool, probabilities: bool,
                 several: bool = False, post_sampling: bool = False, **common: Any) -> None:
        """probabilities: the request asked for logprobs (n_probs, or logprobs 0: the chosen tokens' alone), after
        the sampler chain with post_sampling; several: the request gave a list of prompts (a whole answer is a
        list, even of one)."""
        super().__init__(ident, model, len(prompts), **common)
        self.prompts, self.settings, self.detokenize = prompts, settings, detokenize
        self.return_tokens, self.probabilities, self.several = return_tokens, probabilities, several
        self.post_sampling = post_sampling
        self._generated: list[list[int]] = [[] for _ in prompts]

    def _counts(self, choice: int) -> dict[str, Any]:
        return {"index": choice, "id_slot": -1, "tokens_predicted": len(self._generated[choice]),
                "tokens_evaluated": len(self.prompts[choice])}

    def add(self, choice: int, chunk: Chunk) -> None:
        super().add(choice, chunk)
        self._generated[choice] += chunk.tokens

    def opening(self) -> list[dict[str, Any]]:
        return []

    def events(self, choice: int, chunk: Chunk) -> list[dict[str, Any]]:
        if chunk.progress is not None:
            return [{"content": "", "tokens": [], "stop": False, **self._counts(choice), **r}
                    for r in self._progress_reports(choice, chunk)]
        self._seen(choice, chunk)
        self._generated[choice] += chunk.tokens
        if chunk.finish_reason is not None:
            return [self._final(choice, chunk.text, list(chunk.tokens), chunk.logprobs, chunk.finish_reason,
                                stream=True)]
        if not (chunk.text or chunk.tokens):
            return []
        event = {"content": chunk.text, "tokens": list(chunk.tokens), "stop": False, **self._counts(choice),
                 **self._timings_if_finished()}
        if self.probabilities:
            event["completion_probabilities"] = completion_probabilities(chunk.logprobs, self.post_sampling)
        return [event]

    def _stop(self, choice: int, reason: str) -> tuple[str, str]:
        """stop_type and stopping_word: a stop string is the first of them in the generated text."""
        if reason == "length":
            return "limit", ""
        stops = self.settings["stop"]
        if stops:
            raw = self.detokenize(self._generated[choice])
            found = sorted((raw.find(s), s) for s in stops if s in raw)
            if found:
                return "word", found[0][1]
        return "eos", ""

    def _final(self, choice: int, content: str, tokens: list[int], logprobs: Sequence[TokenLogprob], reason: str,
               *, stream: bool) -> dict[str, Any]:
        stop_type, word = self._stop(choice, reason)
        n_ctx, prompt = self.settings["n_ctx"], self.prompts[choice]
        answer = {"content": content, "tokens": tokens, "stop": True, "model": self.model, **self._counts(choice),
                  "generation_settings": self.settings, "prompt": self.detokenize(prompt),
                  "has_new_line": "\n" in content, "stop_type": stop_type, "stopping_word": word,
                  "truncated": reason == "length" and len(prompt) + len(self._generated[choice]) >= n_ctx,
                  "timings": self.timings()}
        if self.probabilities and (logprobs or not stream):
            answer["completion_probabilities"] = completion_probabilities(logprobs, self.post_sampling)
        return picked(answer, self.response_fields) if self.response_fields else answer

    def whole(self) -> Any:
        answers = []
        for choice, parts in enumerate(self.parts):
            text = "".join(c.text for c in parts)
            tokens = self._generated[choice] if self.return_tokens else []
            logprobs = [item for c in parts for item in c.logprobs]
            answers.append(self._final(choice, text, tokens, logprobs, parts[-1].finish_reason or "stop",
                                       stream=False))
        return answers if self.several else answers[0]
