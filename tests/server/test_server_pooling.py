"""llama-server's --pooling (issue 36): embeddings pool as the GGUF says (else mean), so the flag is taken when it
names that pooling and refused at start, naming it, when it asks for another; `none` (a vector per token, which
llama.cpp's test_embedding.py asks for) is not served. Before the flag existed, argparse refused it without saying
why."""
from __future__ import annotations

import subprocess
import sys

import httpx
import pytest

import pyllama90a as pl
from pyllama90a.core.model.rerank import pooling_name
from pyllama90a.server.__main__ import parse_args
from pyllama90a.tools.server_process import ServerProcess
from pyllama90a.tools.synthetic_reranker import synthetic_reranker

pytestmark = pytest.mark.server  # (the test tier: tests/conftest.py)

FLAGS = ["--parallel", "1", "--n-ctx", "256", "--threads", "2"]


def test_the_pooling_of_a_causal_lm_and_of_a_reranker(model) -> None:
    assert pooling_name(model.handle) == "mean"  # (SmolLM2's GGUF says nothing: file.pooling_for's mean)
    with pl.Model(synthetic_reranker(), n_ctx=256, n_threads=1) as reranker:
        assert pooling_name(reranker.handle) == "rank"


def test_llama_servers_values_are_read() -> None:
    assert parse_args(["--pooling", "none"]).pooling == "none"
    assert parse_args([]).pooling is None


@pytest.mark.parametrize(("pooling", "words"), [("none", "a vector per token is not served"),
                                                 ("last", "another pooling is not served")])
def test_another_pooling_is_refused_at_start_naming_it(model_path, pooling: str, words: str) -> None:
    run = subprocess.run([sys.executable, "-m", "pyllama90a.server", "--model", str(model_path), "--pooling", pooling,
                          *FLAGS], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    assert f"--pooling {pooling}:" in run.stderr and "pool by mean" in run.stderr and words in run.stderr


def test_the_models_own_pooling_is_taken(model_path) -> None:
    with ServerProcess(["--model", str(model_path), "--pooling", "mean", *FLAGS]) as srv:
        answer = httpx.post(f"{srv.base_url}/v1/embeddings", json={"input": "hello"}, timeout=120)
    assert answer.status_code == 200 and len(answer.json()["data"][0]["embedding"]) > 1
