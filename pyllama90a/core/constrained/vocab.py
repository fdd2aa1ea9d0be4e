"""The constraint library's view of a loaded model's vocabulary: every token's bytes and the end-of-generation ids.

Built once per loaded model (about 0.1 s for 49,152 tokens; Models made by with_context share it) and cached for
as long as the weights stay loaded.
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any, Protocol

from ...errors import ClosedError, LlamaError
from ...native import ModelHandle


class HasWeights(Protocol):
    """What vocab_for needs of a Model: its loaded weights."""

    @property
    def handle(self) -> ModelHandle: ...


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


_cache: weakref.WeakKeyDictionary[ModelHandle, Vocab] = weakref.WeakKeyDictionary()
_cache_lock = threading.Lock()
_eog_cache: weakref.WeakKeyDictionary[ModelHandle, tuple[int, ...]] = weakref.WeakKeyDictionary()


def end_of_generation(vocab: ModelHandle) -> tuple[int, ...]:
    """The end-of-generation ids of the weights' vocabulary (llama_vocab_is_eog), EOS first; found once per loaded
    model (without llguidance: ignore_eos bans them) and cached while the weights stay loaded."""
    with _cache_lock:
        cached = _eog_cache.get(vocab)
    if cached is not None:
        return cached
    eog = [t for t in range(vocab.n_vocab) if vocab.is_eog(t)]
    if vocab.eos in eog:  # EOS first: llguidance reports the first one as its eos_token
        eog.remove(vocab.eos)
        eog.insert(0, vocab.eos)
    with _cache_lock:
        return _eog_cache.setdefault(vocab, tuple(eog))


def vocab_for(model: HasWeights | ModelHandle) -> Vocab:
    """The Vocab of a Model's loaded weights, built on first use and cached while they stay loaded."""
    handle = model if isinstance(model, ModelHandle) else model.handle  # (ClosedError for a closed Model)
    with _cache_lock:
        cached = _cache.get(handle)
    if cached is not None:
        return cached
    built = _build(handle)
    with _cache_lock:
        return _cache.setdefault(handle, built)


def _token_pieces(vocab: ModelHandle) -> tuple[list[bytes], set[int]]:
    pieces: list[bytes] = []
    special: set[int] = set()
    for t in range(vocab.n_vocab):
        rendered = vocab.token_piece(t, True)
        # a control token is empty without special=True; a normal or user-defined token reads the same both ways
        if rendered != vocab.token_piece(t, False):
            special.add(t)
            rendered = SPECIAL_PREFIX + rendered
        pieces.append(rendered)
    return pieces, special


def _build(handle: ModelHandle) -> Vocab:
    llg = llguidance()
    n_vocab = handle.n_vocab
    pieces, special = _token_pieces(handle)
    eog = end_of_generation(handle)
    if not eog:
        raise LlamaError("the model's vocabulary has no end-of-generation token; a constraint could not end")
    # weak: the cache's value must not keep its key (the weights) alive
    handle_ref = weakref.ref(handle)

    def tokenize(text: str | bytes) -> list[int]:
        # llguidance calls this (rarely: forced text, canonical tokenization); no Model lock here, so a mask
        # computed on another thread while the Model is busy cannot deadlock
        vocab = handle_ref()
        if vocab is None:
            raise ClosedError("the model of this constraint was closed")
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        return vocab.tokenize(data, False, False)

    class _Wrapped:  # what llguidance.TokenizerWrapper reads
        eos_token_id = eog[0]
        bos_token_id = None
        tokens = pieces
        special_token_ids = sorted(special)

        def __call__(self, text: str | bytes) -> list[int]:
            return tokenize(text)

    tokenizer = llg.LLTokenizer(llg.TokenizerWrapper(_Wrapped()), n_vocab=n_vocab, eos_token=list(eog))
    return Vocab(n_vocab, tuple(pieces), eog, frozenset(special), tokenizer)
