"""A tool-call stream reads each fed piece of text once (issue 20): the work of a feed is bounded by the new
text, not by the answer so far. Counted in characters, the parser's own measure: what the JSON object scanners
are fed, and how much text the search for the next call block may read."""
from __future__ import annotations

import pytest

from pyllama90a.core.toolcalls import get_format, reassemble
from pyllama90a.core.toolcalls.formats import hermes, llama3, mistral
from pyllama90a.core.toolcalls.json_scan import ObjectScanner
from support.tool_templates import TOOLS


@pytest.fixture
def counted(monkeypatch) -> dict[str, int]:
    """Counts of the characters the object scanners are fed and the characters a block search may read."""
    counts = {"scanned": 0, "searched": 0}
    feed = ObjectScanner.feed

    def counting_feed(self, text: str) -> None:
        counts["scanned"] += len(text)
        feed(self, text)

    monkeypatch.setattr(ObjectScanner, "feed", counting_feed)
    for family in (hermes, llama3, mistral):
        def counting_search(text: str, pos: int, _find=family.find_start) -> int | None:
            found = _find(text, pos)
            counts["searched"] += (len(text) if found is None else found) - pos  # (what it read to decide)
            return found
        monkeypatch.setattr(family, "find_start", counting_search)
    return counts


def _answer(fmt, words: int, calls: int) -> tuple[str, int]:
    """Prose of `words` words, then `calls` calls in `fmt`'s syntax; and the length of the calls' JSON."""
    call_list = [("get_weather", {"city": f"City number {i}", "unit": "c"}) for i in range(calls)]
    calls_text = fmt.call_text(call_list)
    return " ".join(f"word{i}" for i in range(words)) + "\n" + calls_text, len(calls_text)


@pytest.mark.parametrize("name", ["hermes", "llama3_json", "mistral"])
def test_each_feed_reads_only_its_own_text(counted, name) -> None:
    fmt = get_format(name)
    text, calls_length = _answer(fmt, 1500, 12)
    stream = fmt.stream(TOOLS)
    deltas = []
    for i in range(0, len(text), 3):  # a token's worth of text at a time
        deltas += stream.feed(text[i:i + 3])
    deltas += stream.finish()
    scanned, searched = counted["scanned"], counted["searched"]
    # the stream's answer is the whole-text parse's
    whole = fmt.parse(text, TOOLS)
    joined = reassemble(deltas)
    assert joined.content == whole.content and len(whole.tool_calls) == 12
    assert [(c.name, c.arguments) for c in joined.tool_calls] == [(c.name, c.arguments) for c in whole.tool_calls]
    # each character of a call object is scanned once
    assert scanned <= calls_length
    # the block search reads a bounded amount per character fed (rescanning the text so far on every feed
    # reads about len(text)**2 / 6 here: some 4 million characters)
    assert searched <= 2 * len(text), (scanned, searched)
