"""The constraint library's view of a loaded model's vocabulary: every token's bytes and the end-of-generation ids.

Built once per Model (about 0.1 s for 49,152 tokens) and cached for as long as the Model lives.
"""
from __future__ import annotations

import functools
import threading
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._ffi import lib
from ..errors import ClosedError, LlamaError
from .._vocab import token_piece, vocab_tokenize

if TYPE_CHECKING:  # pragma: no cover
    from ..model import Model

# llguidance's convention: the bytes of a special (control) token start with 0xFF, which no UTF-8 text holds, so
# free text can never spell one; a grammar names them as <|im_end|> or <[id]>.
SPECIAL_PREFIX = b"\xff"

_INSTALL_HINT = ('constrained decoding needs the llguidance package: pip install "pyllama90a[structured]" '
                 '(or pip install llguidance)')


def llguidance() -> Any:
    """The llguidance module, or ImportError saying how to install it."""
    try:
        import llguidance as llg
    except ImportError as e:  # pragma: no cover - the test extra installs it
        raise ImportError(_INSTALL_HINT) from e
    return llg


@dataclass(frozen=True, eq=False)
class Vocab:
    """A model's vocabulary as llguidance needs it. `tokenizer` is an llguidance.LLTokenizer."""

    n_vocab: int
    pieces: tuple[bytes, ...]   # raw bytes of every token; special tokens rendered, prefixed with 0xFF
    eog: tuple[int, ...]        # end-of-generation ids (llama_vocab_is_eog), EOS first
    special: frozenset[int]     # control tokens (rendered only with special=True)
    tokenizer: Any = field(repr=False)

    def piece(self, token: int) -> bytes:
        """The text bytes of `token` (a special token without the 0xFF marker)."""
        raw = self.pieces[token]
        return raw[1:] if token in self.special else raw

    def special_token(self, text: str) -> int | None:
        """The id of the special token whose text is `text`, or None."""
        want = SPECIAL_PREFIX + text.encode("utf-8")
        for t in self.special:
            if self.pieces[t] == want:
                return t
        return None


_cache: weakref.WeakKeyDictionary[Model, Vocab] = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()


def vocab_for(model: Model) -> Vocab:
    """The Vocab of `model`, built on first use and cached for the Model's lifetime."""
    with _cache_lock:
        cached = _cache.get(model)
    if cached is not None:
        return cached
    built = _build(model)
    with _cache_lock:
        return _cache.setdefault(model, built)


def _token_pieces(vocab_ptr: Any, n_vocab: int) -> tuple[list[bytes], set[int], list[int]]:
    piece = functools.partial(token_piece, vocab_ptr)
    pieces: list[bytes] = []
    special: set[int] = set()
    eog: list[int] = []
    for t in range(n_vocab):
        rendered = piece(t, True)
        # a control token is empty without special=True; a normal or user-defined token reads the same both ways
        if rendered != piece(t, False):
            special.add(t)
            rendered = SPECIAL_PREFIX + rendered
        pieces.append(rendered)
        if lib.llama_vocab_is_eog(vocab_ptr, t):
            eog.append(t)
    return pieces, special, eog


def _build(model: Model) -> Vocab:
    llg = llguidance()
    if model.closed:
        raise ClosedError("the model is closed")
    vocab_ptr = model._vocab
    n_vocab = int(model._n_vocab)
    pieces, special, eog = _token_pieces(vocab_ptr, n_vocab)
    eos = lib.llama_vocab_eos(vocab_ptr)
    if eos in eog:  # EOS first: llguidance reports the first one as its eos_token
        eog.remove(eos)
        eog.insert(0, eos)
    if not eog:
        raise LlamaError("the model's vocabulary has no end-of-generation token; a constraint could not end")
    model_ref = weakref.ref(model)

    def tokenize(text: str | bytes) -> list[int]:
        # llguidance calls this (rarely: forced text, canonical tokenization); no Model lock here, so a mask
        # computed on another thread while the Model is busy cannot deadlock
        m = model_ref()
        if m is None or m.closed:
            raise ClosedError("the model of this constraint was closed")
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        return vocab_tokenize(m._vocab, data, False, False)

    class _Wrapped:  # what llguidance.TokenizerWrapper reads
        eos_token_id = eog[0]
        bos_token_id = None
        tokens = pieces
        special_token_ids = sorted(special)

        def __call__(self, text: str | bytes) -> list[int]:
            return tokenize(text)

    tokenizer = llg.LLTokenizer(llg.TokenizerWrapper(_Wrapped()), n_vocab=n_vocab, eos_token=list(eog))
    return Vocab(n_vocab, tuple(pieces), tuple(eog), frozenset(special), tokenizer)
