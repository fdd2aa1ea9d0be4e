"""Generated token pieces to text: incremental UTF-8 decoding and stop strings.

Shared by Model.generate and the batch engine, so both stream and stop identically.
"""
from __future__ import annotations

import codecs
from collections.abc import Sequence


class TextStream:
    """Feed the bytes of each generated token; get back the text that is safe to show.

    A stop string may still be forming at the end of the text, so the last len(longest stop) - 1 characters
    are held back until they can no longer start one. Text from a stop string on is cut and never shown.
    """

    def __init__(self, stops: Sequence[str] = ()) -> None:
        self._stops = list(stops)
        self._hold = max((len(s) for s in self._stops), default=1) - 1
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.text = ""       # all text so far (cut at a stop string once one is seen)
        self._emitted = 0    # how much of `text` was returned
        self.stopped = False

    def add(self, piece: bytes) -> str:
        """Append one token's bytes; returns the newly showable text (may be empty). Sets `stopped`; the text
        before the stop string that is still held back then comes from flush()."""
        if self.stopped:
            raise RuntimeError("the stream already hit a stop string")
        self.text += self._decoder.decode(piece)
        start = max(0, self._emitted - self._hold)
        cut = min((i for i in (self.text.find(s, start) for s in self._stops) if i >= 0), default=-1)
        if cut >= 0:
            self.text = self.text[:cut]
            self.stopped = True  # the rest comes from flush()
            return ""
        safe = len(self.text) - self._hold if self._stops else len(self.text)
        if safe <= self._emitted:
            return ""
        out = self.text[self._emitted:safe]
        self._emitted = safe
        return out

    def flush(self) -> str:
        """The text held back so far (at the end of generation). A character cut off mid-way is dropped."""
        out = self.text[self._emitted:]
        self._emitted = len(self.text)
        return out
