"""GET /v1/models (and /models) in llama-server's shape (issue 36; llama.cpp's test_vision_api.py reads it): besides
OpenAI's `data`, a `models` list in Ollama's form whose `capabilities` say what the model can do (`completion`;
never `multimodal` here: images are not served)."""
from __future__ import annotations

import httpx
import pytest

from pyllama90a.tools.server_process import ServerProcess

pytestmark = pytest.mark.server  # (the test tier: tests/conftest.py)


@pytest.fixture(scope="module")
def http(model_path):
    with ServerProcess(["--model", str(model_path), "--parallel", "1", "--n-ctx", "256", "--threads", "2",
                        "--alias", "smol", "--tags", "small,test"]) as srv, \
            httpx.Client(base_url=srv.base_url, timeout=120) as client:
        yield client


@pytest.mark.parametrize("path", ["/v1/models", "/models"])
def test_the_models_list_says_what_the_model_can_do(http, path: str) -> None:
    body = http.get(path).json()
    (listed,) = body["models"]
    assert listed["name"] == listed["model"] == body["data"][0]["id"] == "smol"
    assert listed["capabilities"] == ["completion"]
    assert listed["tags"] == ["small", "test"]
