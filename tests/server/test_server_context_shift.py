"""--context-shift over HTTP (issue 36, item 8; llama-server's flag and its request field n_keep): a generation
goes on past its slot's cells, /completion says `truncated`, n_keep is checked. One server: 2 slots of 256."""
from __future__ import annotations

import httpx
import pytest

from pyllama90a.server.__main__ import parse_args
from pyllama90a.tools.server_process import ServerProcess

pytestmark = pytest.mark.server  # (the test tier: tests/conftest.py)

SLOT = 256


@pytest.fixture(scope="module")
def http(model_path):
    with ServerProcess(["--model", str(model_path), "--parallel", "2", "--n-ctx", str(2 * SLOT), "--threads", "2",
                        "--context-shift"]) as srv, httpx.Client(base_url=srv.base_url, timeout=600) as client:
        yield client


def test_the_flag_and_its_negation() -> None:
    assert parse_args(["--context-shift"]).context_shift
    assert not parse_args(["--context-shift", "--no-context-shift"]).context_shift
    assert not parse_args([]).context_shift


@pytest.mark.parametrize("n_keep", [0, -1])
def test_a_generation_goes_on_past_the_slot(http, n_keep: int) -> None:
    answer = http.post("/completion", json={"prompt": "Once upon a time", "n_predict": SLOT + 40, "temperature": 0,
                                            "ignore_eos": True, "n_keep": n_keep})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["timings"]["predicted_n"] == SLOT + 40 and body["truncated"] is True
    assert body["stop_type"] == "limit"


@pytest.mark.parametrize("n_keep", [-2, "all", 1.5])
def test_a_bad_n_keep_is_a_400_naming_it(http, n_keep) -> None:
    answer = http.post("/v1/completions", json={"prompt": "Hi", "max_tokens": 2, "n_keep": n_keep})
    assert answer.status_code == 400 and "n_keep" in answer.text, answer.text
