"""The two native vocabulary calls, on a llama_vocab pointer (no Model lock): tokenize text and render one token.
Their only call sites; Model and the constraint library's vocabulary (constrained/vocab.py) both use them."""
from __future__ import annotations

from ._ffi import ffi, lib
from .errors import LlamaError, check


def vocab_tokenize(vocab, data: bytes, add_special: bool, parse_special: bool) -> list[int]:  # noqa: ANN001
    """llama_tokenize of `data` (at most INT32_MAX - 8 bytes) on a vocab pointer, no lock: the one call site of it."""
    cap = len(data) + 8
    buf = ffi.new("llama_token[]", cap)
    n = lib.llama_tokenize(vocab, data, len(data), buf, cap, add_special, parse_special)
    if n < 0:  # never for cap > bytes, but llama.cpp tells the size needed
        cap = -n
        buf = ffi.new("llama_token[]", cap)
        n = lib.llama_tokenize(vocab, data, len(data), buf, cap, add_special, parse_special)
    check(n, LlamaError, "tokenization failed")
    return list(ffi.unpack(buf, n))


def token_piece(vocab, token: int, special: bool = False) -> bytes:  # noqa: ANN001
    """The bytes of one token (llama_token_to_piece); special=True renders control tokens too."""
    buf = ffi.new("char[]", 64)
    n = lib.llama_token_to_piece(vocab, token, buf, 64, 0, special)
    if n < 0:  # the buffer was too small; -n is the size needed
        buf = ffi.new("char[]", -n)
        n = lib.llama_token_to_piece(vocab, token, buf, -n, 0, special)
    return ffi.unpack(buf, check(n, LlamaError, f"llama_token_to_piece failed for token {token}"))
