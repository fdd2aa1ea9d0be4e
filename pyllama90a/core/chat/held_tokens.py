"""The tokens (and logprobs) of a streamed chat's pieces whose text a reader (the reasoning and tool-call
splitters) holds back, until the piece that shows that text takes them."""
from __future__ import annotations

from ..generation.outputs import Piece
from ..generation.sequence import TokenLogprob


class HeldTokens:
    """The held tokens and their logprobs: taken by the piece that shows their text, so each token stays with it."""

    def __init__(self) -> None:
        self._tokens: list[int] = []
        self._logprobs: list[TokenLogprob] = []

    def add(self, piece: Piece) -> None:
        self._tokens += piece.tokens
        if piece.logprobs:  # (none asked for: nothing more per piece)
            self._logprobs += piece.logprobs

    def take_tokens(self) -> list[int]:
        tokens, self._tokens = self._tokens, []
        return tokens

    def take_logprobs(self) -> tuple[TokenLogprob, ...]:
        if not self._logprobs:
            return ()
        taken = tuple(self._logprobs)
        self._logprobs.clear()
        return taken
