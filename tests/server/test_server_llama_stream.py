"""llama-server's stream extensions that need a prompt longer than one batch (issue 36): return_progress reports
after each batch of the prompt. One real server on the default model with a small --n-batch, over loopback."""
from __future__ import annotations

import socket
import time

import httpx
import pytest

from pyllama90a.tools.server_process import ServerProcess
from support.sse import stream_events

pytestmark = pytest.mark.server

N_BATCH = 16
LONG = [{"role": "user", "content": "This is a test. " * 12}]


@pytest.fixture(scope="module")
def http(model_path):
    with ServerProcess(["--model", str(model_path), "--parallel", "1", "--n-ctx", "512", "--n-batch", str(N_BATCH),
                        "--threads", "2", "--temp", "0"]) as srv, \
            httpx.Client(base_url=srv.base_url, timeout=120) as client:
        yield client


def _progress(events: list[dict]) -> list[dict]:
    return [e["prompt_progress"] for e in events if "prompt_progress" in e]


@pytest.mark.parametrize("path,body", [
    ("/chat/completions", {"messages": LONG, "max_tokens": 3, "stream_options": {"include_usage": True}}),
    ("/completion", {"prompt": "This is a test. " * 12, "n_predict": 3})])
def test_return_progress_reports_each_batch_of_the_prompt(http, path, body) -> None:
    for again in (False, True):  # (the second time, most of the prompt comes from the slot's cache)
        events = stream_events(http, path, {**body, "return_progress": True})
        reports = _progress(events)
        first, last = reports[0], reports[-1]
        total = last["total"]
        assert first["processed"] == first["cache"] and (first["cache"] > 0) == again
        assert [r["processed"] for r in reports] == sorted({r["processed"] for r in reports})  # each batch further
        assert all(r["total"] == total and r["cache"] == first["cache"] for r in reports)
        assert last["processed"] == total
        assert len(reports) == 1 + -(-(total - first["cache"]) // N_BATCH)  # the first, then one per batch
        if path == "/chat/completions":
            assert total == events[-1]["usage"]["prompt_tokens"]
            assert all(e["choices"][0]["delta"] == {"role": "assistant", "content": None}
                       for e in events if "prompt_progress" in e)
        else:
            assert total == events[-1]["tokens_evaluated"]
    plain = stream_events(http, path, body)  # (asked for only)
    assert not _progress(plain)


PROBS = {"prompt": "Today was the day. Today I would finally become a", "n_probs": 10, "n_predict": 4,
         "post_sampling_probs": True}


def test_post_sampling_probs_are_over_the_candidates_the_sampler_kept(http) -> None:
    for sampling, most in (({"temperature": 1.0, "top_k": 3, "top_p": 1.0, "min_p": 0.0}, 3),
                           ({"temperature": 0.7}, 10), ({"temperature": 0.0}, 1)):
        response = http.post("/completion", json={**PROBS, **sampling, "seed": 3})
        assert response.status_code == 200, response.text
        steps = response.json()["completion_probabilities"]
        assert len(steps) == 4
        for step in steps:
            top = step["top_probs"]
            assert "logprob" not in step and 0.0 < step["prob"] <= 1.0
            assert 1 <= len(top) <= most and all(0.0 < t["prob"] <= 1.0 for t in top)
            assert [t["prob"] for t in top] == sorted((t["prob"] for t in top), reverse=True)
            assert step["prob"] == next(t["prob"] for t in top if t["id"] == step["id"])  # (it was kept)
            if len(top) < 10:  # all the kept candidates: their probabilities sum to 1
                assert sum(t["prob"] for t in top) == pytest.approx(1.0)
        if most == 1:
            assert all(step["prob"] == 1.0 for step in steps)
    plain = http.post("/completion", json={**PROBS, "post_sampling_probs": False, "temperature": 1.0}).json()
    assert "logprob" in plain["completion_probabilities"][0]


@pytest.mark.parametrize("path,body", [("/v1/completions", {"prompt": "Hi", "logprobs": 2}),
                                       ("/completion", {**PROBS, "repeat_penalty": 1.3})])
def test_post_sampling_probs_where_they_cannot_be_served_are_a_400_naming_the_field(http, path, body) -> None:
    response = http.post(path, json={**body, "post_sampling_probs": True})
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "post_sampling_probs"


def test_no_slots_and_no_metrics_answer_501_as_llama_server_does(model_path) -> None:
    with ServerProcess(["--model", str(model_path), "--parallel", "1", "--n-ctx", "512", "--threads", "2",
                        "--no-slots", "--no-metrics"]) as srv:
        for path in ("/slots", "/metrics"):
            response = httpx.get(srv.base_url + path, timeout=60)
            assert response.status_code == 501
            assert response.json()["error"]["type"] == "not_supported_error"
        assert httpx.get(srv.base_url + "/health", timeout=60).status_code == 200


def test_several_host_addresses_are_each_served(model_path) -> None:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback here")
    with ServerProcess(["--model", str(model_path), "--parallel", "1", "--n-ctx", "512", "--threads", "2",
                        "--host", "127.0.0.1,::1", "--api-key", "k"]) as srv:
        for host in ("127.0.0.1", "[::1]"):
            base = f"http://{host}:{srv.port}"
            assert httpx.get(base + "/health", timeout=60).status_code == 200
            assert httpx.post(base + "/v1/completions", json={}, timeout=60).status_code == 401
            answer = httpx.post(base + "/v1/completions", json={"prompt": "Hi", "max_tokens": 2},
                                headers={"Authorization": "Bearer k"}, timeout=60)
            assert answer.status_code == 200 and answer.json()["usage"]["completion_tokens"] > 0
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as taken:  # (an address in use: a clear exit)
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        busy = ServerProcess(["--model", str(model_path), "--host", "::1,127.0.0.1"], timeout=60)
        busy.port = taken.getsockname()[1]
        busy.argv[-1] = str(busy.port)
        with pytest.raises(RuntimeError, match=r"--host .127\.0\.0\.1., port"):
            busy.start()


def test_an_embedding_input_over_the_batch_is_too_large_in_llama_servers_words(http) -> None:
    response = http.post("/v1/embeddings", json={"input": "This is a test " * 1000})
    assert response.status_code == 400
    assert "too large" in response.json()["error"]["message"]


def test_generation_settings_show_the_logit_bias_in_llama_servers_list_form(http) -> None:
    hello = http.post("/tokenize", json={"content": " Hello"}).json()["tokens"]
    body = {"prompt": "I believe", "n_predict": 2, "temperature": 0}
    plain = http.post("/completion", json=body).json()
    assert plain["generation_settings"]["logit_bias"] == []
    biased = http.post("/completion", json={**body, "logit_bias": [[7, -5.5], [" Hello", False]]}).json()
    assert biased["generation_settings"]["logit_bias"] == [{"token": 7, "bias": -5.5},
                                                           *({"token": t, "bias": -100.0} for t in hello)]


def test_progress_reports_carry_the_timings_so_far_with_timings_per_token(http) -> None:
    events = stream_events(http, "/completion", {"prompt": "This is a test. " * 12, "n_predict": 3,
                                           "return_progress": True, "timings_per_token": True})
    timings = [e["timings"] for e in events if "prompt_progress" in e]
    assert len(timings) > 2 and timings[0]["prompt_n"] == timings[0]["prompt_ms"] == timings[0]["predicted_n"] == 0
    assert [t["prompt_n"] for t in timings] == [e["prompt_progress"]["processed"] - e["prompt_progress"]["cache"]
                                               for e in events if "prompt_progress" in e]
    assert [t["prompt_ms"] for t in timings] == sorted(t["prompt_ms"] for t in timings) and timings[-1]["prompt_ms"] > 0
    assert all(v is not None and v >= 0 for t in timings for v in t.values())


def test_predicted_rates_are_over_the_tokens_after_the_first(http) -> None:
    one = http.post("/completion", json={"prompt": "I believe", "n_predict": 1}).json()["timings"]
    assert one["predicted_n"] == 1 and one["predicted_per_second"] == one["predicted_per_token_ms"] == 0.0
    more = http.post("/completion", json={"prompt": "I believe", "n_predict": 8, "ignore_eos": True}).json()["timings"]
    assert more["predicted_n"] == 8
    assert more["predicted_per_second"] == pytest.approx(1e3 * 7 / more["predicted_ms"])


def test_metrics_have_llama_servers_decode_counts_and_start_time(http) -> None:
    before = http.get("/metrics")
    assert int(before.headers["Process-Start-Time-Unix"]) <= time.time()
    http.post("/completion", json={"prompt": "This is a test. " * 4, "n_predict": 3, "ignore_eos": True})
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in http.get("/metrics").text.splitlines()
              if line.startswith("llamacpp:")}
    old = {line.split(" ")[0]: float(line.split(" ")[1]) for line in before.text.splitlines()
           if line.startswith("llamacpp:")}
    # a prompt of about 20 tokens in batches of 16, then 2 decodes of one token each (the first comes with the
    # prompt's last batch)
    assert 3 <= values["llamacpp:n_decode_total"] - old["llamacpp:n_decode_total"] <= 5
    assert values["llamacpp:n_tokens_max"] >= 20 and values["llamacpp:n_busy_slots_per_decode"] == 1
    assert values["llamacpp:spec_decode_num_drafts_total"] == 0
    assert "# TYPE llamacpp:n_decode_total counter" in before.text


def test_llama_servers_metrics_count_an_embeddings_prompt_and_decodes(http) -> None:
    def values() -> dict[str, float]:
        return {line.split(" ")[0]: float(line.split(" ")[1]) for line in http.get("/metrics").text.splitlines()
                if line.startswith("llamacpp:")}
    before = values()
    usage = http.post("/v1/embeddings", json={"input": ["hello world", "goodbye world"]}).json()["usage"]
    after = values()
    assert after["llamacpp:prompt_tokens_total"] - before["llamacpp:prompt_tokens_total"] == usage["prompt_tokens"]
    assert after["llamacpp:n_decode_total"] - before["llamacpp:n_decode_total"] == 2
    assert after["llamacpp:tokens_predicted_total"] == before["llamacpp:tokens_predicted_total"]
