"""ignore_eos as llama-server does it (issue 36; llama.cpp's test_ignore_eos.py): every end-of-generation token
is banned (logit bias -inf) for the whole generation, so the answer runs to n_predict without one among its
tokens, and generation_settings.logit_bias lists the bans. Here a ban is -100 (OpenAI's; JSON has no -inf,
which llama-server writes as null)."""
from __future__ import annotations

import httpx
import pytest

from pyllama90a.tools.server_process import ServerProcess

pytestmark = pytest.mark.server  # (the test tier: tests/conftest.py)

# a chat turn the default model answers in a few tokens, then ends with <|im_end|> (at temperature 0)
SHORT_ANSWER = "<|im_start|>user\nWhat is 2+2? Answer with one number.<|im_end|>\n<|im_start|>assistant\n"
N_PREDICT = 48


@pytest.fixture(scope="module")
def http(model_path):
    with ServerProcess(["--model", str(model_path), "--parallel", "1", "--n-ctx", "512", "--threads", "2"]) as srv, \
            httpx.Client(base_url=srv.base_url, timeout=600) as client:
        yield client


@pytest.fixture(scope="module")
def eog(model) -> list[int]:
    return [t for t in range(model.handle.n_vocab) if model.handle.is_eog(t)]


def completion(http: httpx.Client, **fields: object) -> dict[str, object]:
    body = {"prompt": SHORT_ANSWER, "n_predict": N_PREDICT, "temperature": 0, "return_tokens": True, **fields}
    answer = http.post("/completion", json=body)
    assert answer.status_code == 200, answer.text
    result: dict[str, object] = answer.json()
    return result


def test_the_prompt_ends_early_without_it(http) -> None:
    plain = completion(http)
    assert plain["stop_type"] == "eos" and len(plain["tokens"]) < N_PREDICT  # type: ignore[arg-type]


def test_no_end_of_generation_token_is_generated(http, eog) -> None:
    answer = completion(http, ignore_eos=True)
    assert answer["stop_type"] == "limit"
    assert len(answer["tokens"]) == N_PREDICT  # type: ignore[arg-type]
    assert not set(answer["tokens"]) & set(eog)  # type: ignore[arg-type]
    assert "<|im_end|>" not in http.post("/detokenize", json={"tokens": answer["tokens"]}).json()["content"]


def test_generation_settings_list_the_bans(http, eog) -> None:
    def listed(**fields: object) -> dict[int, float]:
        settings = completion(http, n_predict=2, **fields)["generation_settings"]
        return {entry["token"]: entry["bias"] for entry in settings["logit_bias"]}  # type: ignore[index]

    assert listed(ignore_eos=True) == dict.fromkeys(eog, -100.0)
    assert listed(ignore_eos=True, logit_bias=[[7, 2.5], [eog[0], 50]]) == {7: 2.5, **dict.fromkeys(eog, -100.0)}
    assert listed() == {}
