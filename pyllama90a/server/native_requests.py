"""Bodies of llama-server's native routes (/completion, /tokenize, /detokenize, /apply-template) to what the
engine and the model take, with the OpenAI routes' checks: a bad field is a 400 naming it, an unknown one is
served and named (or refused, --unknown-fields reject).

/completion takes /v1/completions' fields (api_requests.py checks them) and llama-server's names for three:
n_predict (max_tokens; -1, its default, means until the slot is full: the --max-tokens-limit), n_probs (the
top logprobs per token, 0-20) and return_tokens; and its prompt may mix token ids and strings.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..core import GenerationRequest
from ..toolcalls import Tools
from ..core.request import MAX_TOP_LOGPROBS
from .api_requests import (MISSING, Generation, Limits, _bad, _boolean, _integer, _settle_unknown, _tools, _unknown,
                           chat_messages, completion_request)
from .errors import APIError
from .refused_fields import HARMLESS_FIELDS

Tokenize = Callable[[str, bool], list[int]]  # (text, add_special) -> token ids


def prompt_tokenizer(model: Any) -> Tokenize:
    """How /completion (and /infill) read a prompt's text: special-token text stays text, as llama-server reads it."""
    return lambda text, bos: model.tokenize(text, add_special=bos, parse_special=False)

# the fields /completion takes under llama-server's names, translated here (the others are /v1/completions')
NATIVE_COMPLETION_FIELDS = frozenset({"n_predict", "n_probs", "return_tokens"})
TOKENIZE_FIELDS = frozenset({"content", "add_special", "parse_special", "with_pieces"}) | HARMLESS_FIELDS
DETOKENIZE_FIELDS = frozenset({"tokens"}) | HARMLESS_FIELDS
APPLY_TEMPLATE_FIELDS = (frozenset({"messages", "tools", "tool_choice", "parallel_tool_calls", "chat_template_kwargs",
                                    "model"}) | HARMLESS_FIELDS)


def _object(body: Any) -> dict:
    if not isinstance(body, dict):
        raise APIError(400, "the request body must be a JSON object")
    return body


@dataclass
class NativeCompletion:
    gen: Generation
    return_tokens: bool  # the generated token ids in `tokens` of a whole answer (a stream always has them)
    n_probs: int         # top logprobs per token in completion_probabilities (0: none)


def _mixed_prompt(prompt: list, tokenize: Tokenize) -> list[int]:
    """llama-server's prompt of token ids and strings: each string tokenized (BOS only before a first one)."""
    tokens: list[int] = []
    for i, part in enumerate(prompt):
        if isinstance(part, str) and part:
            tokens += tokenize(part, i == 0)
        elif isinstance(part, int) and not isinstance(part, bool):
            tokens.append(part)  # (checked against the vocabulary with the rest of the prompt)
        else:
            raise _bad(f"prompt[{i}]", "a prompt list holds token ids and non-empty strings")
    return tokens


def native_completion_request(body: Any, limits: Limits, tokenize: Tokenize) -> NativeCompletion:
    """POST /completion."""
    body = _object(body)
    n_predict = _integer(body, "n_predict", None, -1, limits.max_tokens_limit)
    if n_predict == 0:
        raise _bad("n_predict", "'n_predict' must be -1 (until the slot is full) or at least 1 (0, evaluating "
                                "the prompt only, is not supported)")
    n_probs = _integer(body, "n_probs", 0, 0, MAX_TOP_LOGPROBS) or 0
    return_tokens = _boolean(body, "return_tokens", False)
    rest = {k: v for k, v in body.items() if k not in NATIVE_COMPLETION_FIELDS}
    openai_names = [name for name in ("max_tokens", "max_completion_tokens") if rest.get(name) is not None]
    if n_predict is not None and openai_names:
        raise _bad("n_predict", f"give n_predict or {openai_names[0]}, not both")
    if n_predict is not None:
        rest["max_tokens"] = limits.max_tokens_limit if n_predict == -1 else n_predict
    elif not openai_names:
        rest["max_tokens"] = limits.max_tokens_default  # (not /v1/completions' 16)
    prompt = rest.get("prompt")
    if isinstance(prompt, list) and any(isinstance(p, str) for p in prompt) and any(
            isinstance(p, int) for p in prompt):
        rest["prompt"] = _mixed_prompt(prompt, tokenize)
    gen = completion_request(rest, limits)
    if gen.n != 1:
        raise _bad("n", "/completion gives one completion: use /v1/completions for n > 1")
    if n_probs:
        gen.request = replace(gen.request, logprobs=n_probs)
    return NativeCompletion(gen, return_tokens, n_probs)


@dataclass
class TokenizeRequest:
    content: str
    add_special: bool
    parse_special: bool
    with_pieces: bool
    ignored: list[str]


def tokenize_request(body: Any, limits: Limits) -> TokenizeRequest:
    """POST /tokenize: llama-server's defaults (no BOS, special tokens parsed, ids only)."""
    body = _object(body)
    content = body.get("content", MISSING)
    if not isinstance(content, str):
        raise _bad("content", "'content' is required: the text to tokenize, a string")
    return TokenizeRequest(content, _boolean(body, "add_special", False), _boolean(body, "parse_special", True),
                           _boolean(body, "with_pieces", False),
                           _settle_unknown(_unknown(body, TOKENIZE_FIELDS), limits))


def detokenize_request(body: Any, limits: Limits) -> tuple[list[int], list[str]]:
    """POST /detokenize: the token ids (checked against the vocabulary by the model) and the unknown fields."""
    body = _object(body)
    tokens = body.get("tokens", MISSING)
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise _bad("tokens", "'tokens' is required: a list of token ids")
    return tokens, _settle_unknown(_unknown(body, DETOKENIZE_FIELDS), limits)


@dataclass
class TemplateRequest:
    messages: list[dict]
    tools: Tools | None            # the tools the template is shown (none with tool_choice "none")
    template_kwargs: dict[str, Any]
    ignored: list[str]


def apply_template_request(body: Any, limits: Limits) -> TemplateRequest:
    """POST /apply-template: a chat request's messages, tools and template variables, checked as
    /v1/chat/completions checks them."""
    body = _object(body)
    messages, unknown_in_messages = chat_messages(body)
    chat = Generation(GenerationRequest(), stream=False, include_usage=False)  # (only its tool fields are used)
    _tools(body, chat)
    unknown = _unknown(body, APPLY_TEMPLATE_FIELDS) + unknown_in_messages
    return TemplateRequest(list(messages), chat.tools if chat.tool_choice != "none" else None,
                           chat.template_kwargs or {}, _settle_unknown(unknown, limits))
