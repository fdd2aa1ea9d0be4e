"""Tokenizing a huge text is an InvalidArgumentError before llama.cpp allocates for it (issue 18): 390 MB of
text under a 3 GB address-space limit ended the process with std::bad_alloc. Run in a child under that limit."""
from __future__ import annotations

import subprocess
import sys

CHILD = r"""
import resource, sys
import pyllama90a as pl
m = pl.Model(sys.argv[1], n_ctx=256)
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
text = "word " * (390_000_000 // 5)
try:
    m.tokenize(text)
    print("TOKENIZED")
except pl.InvalidArgumentError as e:
    print("REFUSED", e)
"""


def test_huge_text_is_refused_not_a_crash(model_path) -> None:
    out = subprocess.run([sys.executable, "-c", CHILD, str(model_path)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, f"rc {out.returncode}: {out.stderr[-1500:]}"
    assert "REFUSED" in out.stdout and "at most 67108864" in out.stdout, out.stdout


def test_text_under_the_limit_tokenizes(model) -> None:
    assert len(model.tokenize("word " * 100_000, add_special=False)) >= 50_000
