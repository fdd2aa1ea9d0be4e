"""A generation's prompt as tokens: text tokenized as the model wants it (BOS added where the model adds one), or
token ids checked against the vocabulary and used as they are. Model.prompt_tokens, thus BatchEngine's too."""
from __future__ import annotations

from ...errors import InvalidArgumentError, utf8
from ...native import ModelHandle


def prompt_tokens(vocabulary: ModelHandle, prompt: object) -> list[int]:
    """`prompt` (a non-empty str, or a non-empty list or tuple of token ids of `vocabulary`) as tokens."""
    if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(t, int) for t in prompt):
        return vocabulary.check_token_ids(prompt)
    if not isinstance(prompt, str):
        raise InvalidArgumentError(f"prompt must be a str or a list of token ids, got {type(prompt).__name__}")
    if not prompt:
        raise InvalidArgumentError("prompt is empty")
    return vocabulary.tokenize(utf8("text", prompt), True, False)
