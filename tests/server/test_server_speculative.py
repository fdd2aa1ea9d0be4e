"""Speculative decoding over HTTP, in llama-server's fields (issue 36; llama.cpp's test_speculative.py reads them):
/slots' and /props' `speculative` say whether the slots draft, and a /completion's timings count its drafted
tokens (draft_n, draft_n_accepted), which llama-server adds only when something was drafted. One server whose
draft model is the default model itself (so it drafts at every step), one without speculation."""
from __future__ import annotations

import httpx
import pytest

from pyllama90a.tools.server_process import ServerProcess

pytestmark = pytest.mark.server  # (the test tier: tests/conftest.py)

SERVER = ["--parallel", "1", "--n-ctx", "512", "--threads", "2"]
GREEDY = {"prompt": "I believe the meaning of life is", "n_predict": 24, "temperature": 0}


@pytest.fixture(scope="module")
def drafting(model_path):
    with ServerProcess(["--model", str(model_path), *SERVER, "--model-draft", str(model_path),
                        "--spec-draft-n-max", "4"]) as srv, httpx.Client(base_url=srv.base_url, timeout=600) as client:
        yield client


@pytest.fixture(scope="module")
def plain(model_path):
    with ServerProcess(["--model", str(model_path), *SERVER]) as srv, \
            httpx.Client(base_url=srv.base_url, timeout=600) as client:
        yield client


def test_slots_and_props_say_the_slots_speculate(drafting, plain) -> None:
    assert [slot["speculative"] for slot in drafting.get("/slots").json()] == [True]
    assert drafting.get("/props").json()["default_generation_settings"]["speculative"] is True
    assert [slot["speculative"] for slot in plain.get("/slots").json()] == [False]
    assert plain.get("/props").json()["default_generation_settings"]["speculative"] is False


def test_completion_timings_count_the_drafted_tokens(drafting) -> None:
    timings = drafting.post("/completion", json=GREEDY).json()["timings"]
    # (the draft model is the target: at temperature 0 nearly every drafted token is kept)
    assert timings["draft_n"] > 0
    assert 0 < timings["draft_n_accepted"] <= timings["draft_n"]


def test_the_chat_route_counts_them_too(drafting) -> None:
    answer = drafting.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "Count to ten."}],
                                                         "max_tokens": 24, "temperature": 0}).json()
    assert answer["timings"]["draft_n"] >= answer["timings"]["draft_n_accepted"] > 0


def test_no_draft_fields_without_speculation(plain) -> None:
    timings = plain.post("/completion", json=GREEDY).json()["timings"]
    assert "draft_n" not in timings and "draft_n_accepted" not in timings
