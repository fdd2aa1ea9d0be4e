"""Request fields that would change the output but are not implemented here, with the value each may take
because it changes nothing (a client library may send it by default).

Any other value is refused with a 400 naming the field: a 200 with unconstrained text where the client asked
for JSON, a tool call or a biased vocabulary is a wrong answer the client cannot see. Fields known not to
change the output are accepted (protocol.Harmless). Any other field is unknown here (a typo, a newer API's
field): the server's --unknown-fields says whether it is served and named (X-Ignored-Fields) or refused.
Names come from OpenAI's request objects and from the extensions of llama.cpp's and vLLM's servers, which
clients written for those send.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

NoOp = Callable[[Any], bool]


def _same(value: Any, wanted: Any) -> bool:
    """Equal and of the same kind: True is not 1 here, though Python says so; 1 and 1.0 are the same number."""
    if isinstance(wanted, bool) or isinstance(value, bool):
        return value is wanted
    if isinstance(wanted, (int, float)):
        return isinstance(value, (int, float)) and value == wanted
    return type(value) is type(wanted) and value == wanted


def _is(*wanted: Any) -> NoOp:
    """None or one of `wanted` (of its type: {} is no empty suffix); _is() alone: only None."""
    return lambda value: value is None or any(_same(value, w) for w in wanted)


STRUCTURED = "not supported: use response_format (JSON mode, JSON schema) or grammar (GBNF)"
LEGACY_FUNCTIONS = "the deprecated functions API is not supported: use tools and tool_choice"

# field -> (its no-op values, why anything else is refused)
REQUEST_FIELDS: dict[str, tuple[NoOp, str]] = {
    "functions": (_is([]), LEGACY_FUNCTIONS),
    "function_call": (_is("none"), LEGACY_FUNCTIONS + "; only 'none'"),
    "best_of": (_is(1), "only best_of=1 is supported"),
    "echo": (_is(False), "echo is not supported"),
    "suffix": (_is(""), "suffix (insertion) is not supported"),
    "modalities": (lambda v: v is None or _same(v, ["text"]), "only the 'text' modality is supported"),
    "audio": (_is(), "audio output is not supported"),
    "reasoning_effort": (_is(), "reasoning_effort is not supported by this model"),
    "verbosity": (_is(), "verbosity is not supported by this model"),
    "web_search_options": (_is(), "web search is not supported"),
    # llama.cpp's server
    "n_predict": (_is(), "n_predict is not supported here: use max_tokens"),
    "n_probs": (_is(0), "n_probs is not supported here: use logprobs"),
    "samplers": (_is(), "a custom sampler order is not supported"),
    "mirostat": (_is(0), "mirostat sampling is not supported"),
    "typical_p": (_is(1), "typical_p is not supported"),
    "tfs_z": (_is(1), "tfs_z is not supported"),
    "top_n_sigma": (_is(-1), "top_n_sigma is not supported"),
    "xtc_probability": (_is(0), "XTC sampling is not supported"),
    "dry_multiplier": (_is(0), "DRY sampling is not supported"),
    "dynatemp_range": (_is(0), "dynamic temperature is not supported"),
    "penalty_last_n": (_is(64), "the penalties look at the last 64 tokens; penalty_last_n cannot change that"),
    "repeat_last_n": (_is(64), "the penalties look at the last 64 tokens; repeat_last_n cannot change that"),
    "image_data": (_is([]), "images are not supported: this server reads text only"),
    "multimodal_data": (_is([]), "multimodal input is not supported: this server reads text only"),
    # (llama-server: a limit on the generation phase's time when positive; none at 0 or below)
    "t_max_predict_ms": (lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 0),
                         "a time limit on generation is not supported: use max_tokens"),
    "response_fields": (_is([]), "choosing the answer's fields is not supported: the whole answer is sent"),
    "post_sampling_probs": (_is(False), "post-sampling probabilities are served on /completion only"),
    # vLLM's server
    "guided_json": (_is(), STRUCTURED),
    "guided_regex": (_is(), STRUCTURED),
    "guided_choice": (_is(), STRUCTURED),
    "guided_grammar": (_is(), STRUCTURED),
    "structured_outputs": (_is(), STRUCTURED),
    "repetition_penalty": (_is(1), "repetition_penalty is not supported here: use repeat_penalty"),
    "min_tokens": (_is(0), "min_tokens is not supported"),
    "stop_token_ids": (_is([]), "stop_token_ids is not supported: use stop"),
    "include_stop_str_in_output": (_is(False), "include_stop_str_in_output is not supported"),
    "use_beam_search": (_is(False), "beam search is not supported"),
    "length_penalty": (_is(1), "length_penalty is not supported"),
    "chat_template": (_is(""), "a request's own chat template is not supported"),
}

# chat fields that /v1/completions cannot honour (a prompt has no tools): their no-op values only
CHAT_ONLY_FIELDS: dict[str, tuple[NoOp, str]] = {
    "tools": (_is([]), "tools are a /v1/chat/completions field"),
    "tool_choice": (_is("none"), "tool_choice is a /v1/chat/completions field; only 'none' here"),
    "parallel_tool_calls": (lambda v: v is None or isinstance(v, bool), "parallel_tool_calls must be a boolean"),
    "add_generation_prompt": (_is(True), "add_generation_prompt is a /v1/chat/completions field"),
    "continue_final_message": (_is(False), "continue_final_message is a /v1/chat/completions field"),
    "reasoning_format": (_is("none"), "reasoning_format is a /v1/chat/completions field"),
}

# fields of one chat message that the chat template would drop
MESSAGE_FIELDS: dict[str, tuple[NoOp, str]] = {
    "function_call": (_is(), LEGACY_FUNCTIONS),
    "audio": (_is(), "audio is not supported"),
}


# /v1/embeddings: shorter vectors would be a different answer, not silently the full one
EMBEDDING_FIELDS: dict[str, tuple[NoOp, str]] = {
    "dimensions": (_is(), "shorter embeddings are not supported: embeddings have the model's size"),
}


def refused_field(body: dict[str, Any], fields: dict[str, tuple[NoOp, str]] = REQUEST_FIELDS) -> tuple[str, str] | None:
    """(field, why) for the first field of `body` with a value that would need a missing feature, else None."""
    for name, (no_op, why) in fields.items():
        if name in body and not no_op(body[name]):
            return name, f"'{name}': {why}"
    return None
