"""LoRA adapters (issue 21, item 4) on the real library: a LoRA GGUF written for the synthetic tiny model
(pyllama90a.tools.synthetic_lora.write_synthetic_lora) changes the logits exactly as merging it into the weights by hand
does (W + s * alpha / rank * B @ A, computed with numpy, written as a second f32 model); scale 0 is the base
model; bad files and scales are LoraAdapterErrors saying why; a BatchEngine serves requests with different
adapter sets at once, each getting the tokens a Model with that set generates; the server's --lora,
/lora-adapters and per-request `lora`."""
from __future__ import annotations

import argparse
import queue
from pathlib import Path

import httpx
import numpy as np
import pytest

import pyllama90a as pl
from pyllama90a.errors import LoraAdapterError
from pyllama90a.server.__main__ import lora_flag, parse_args
from pyllama90a.tools.server_process import ServerProcess
from pyllama90a.tools.synthetic import BOS_ID, GQA_SHAPES, write_synthetic
from pyllama90a.tools.synthetic_lora import write_synthetic_lora

SHAPE, RANK, ALPHA = "tiny", 4, 8.0
# weight matrices of attention (Q, V), the feed-forward and the output projection
TARGETS = ("blk.0.attn_q.weight", "blk.1.attn_v.weight", "blk.2.ffn_down.weight", "output.weight")
PROMPT = [BOS_ID, 300, 301, 302, 310, 400, 450, 500, 270, 333]
# exact comparisons: f32 weights and KV, standard attention
EXACT = {"n_ctx": 256, "ctk": "f32", "ctv": "f32", "flash_attn": "off", "n_threads": 2}
TOLERANCE = 5e-4  # max abs logit difference between the adapter and the merged weights (float sums' order)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("lora")
    base = write_synthetic(SHAPE, d / "base.gguf", weight_type="f32")
    pairs = write_synthetic_lora(SHAPE, d / "a.gguf", TARGETS, rank=RANK, alpha=ALPHA, seed=1)
    write_synthetic_lora(SHAPE, d / "b.gguf", TARGETS[1:], rank=2, alpha=4.0, seed=2)
    return {"dir": d, "base": base, "a": d / "a.gguf", "b": d / "b.gguf", "pairs": pairs}


def _merged(files: dict, scale: float) -> Path:
    """The base model with adapter a merged into its weights at `scale`, by numpy."""
    pairs = files["pairs"]

    def merge(name: str, w: np.ndarray) -> np.ndarray:
        if name not in pairs:
            return w
        a, b = pairs[name]
        return w + np.float32(scale * ALPHA / RANK) * (b @ a)
    return write_synthetic(SHAPE, files["dir"] / f"merged-{scale}.gguf", weight_type="f32", adjust=merge)


def _logits(path: Path, lora=()) -> np.ndarray:
    with pl.Model(path, lora=lora, **EXACT) as m:
        return m.logits(PROMPT)


@pytest.mark.parametrize("scale", [1.0, -0.5])
def test_adapter_logits_equal_merged_weights(files, scale) -> None:
    adapted = _logits(files["base"], [(files["a"], scale)])
    merged = _logits(_merged(files, scale))
    base = _logits(files["base"])
    assert np.abs(adapted - merged).max() < TOLERANCE
    assert np.abs(adapted - base).max() > 100 * TOLERANCE  # (the adapter's effect is far above the tolerance)


def test_scale_zero_is_the_base_model(files) -> None:
    assert np.array_equal(_logits(files["base"], [(files["a"], 0.0)]), _logits(files["base"]))


def test_model_reports_its_adapters(files) -> None:
    with pl.Model(files["base"], lora=[(files["a"], 0.5), files["b"]], **EXACT) as m:
        assert [(i.id, i.path, i.scale) for i in m.lora] == [(0, files["a"], 0.5), (1, files["b"], 1.0)]
    with pl.Model(files["base"], **EXACT) as m:
        assert list(m.lora) == []


def _bad_file(files: dict, kind: str) -> Path:
    d = files["dir"]
    if kind == "architecture":
        write_synthetic_lora(SHAPE, d / "qwen.gguf", TARGETS, architecture="qwen2")
        return d / "qwen.gguf"
    if kind == "alora":
        write_synthetic_lora(SHAPE, d / "alora.gguf", TARGETS, extra={"adapter.alora.invocation_tokens": [300, 301]})
        return d / "alora.gguf"
    if kind == "not-gguf":
        (d / "text.gguf").write_text("not gguf at all, just some text")
        return d / "text.gguf"
    return files["base"]  # a model, not an adapter


@pytest.mark.parametrize("kind, message", [
    ("architecture", r"architecture 'qwen2', but the model's is 'llama'"),
    ("alora", r"is an activated LoRA \(aLoRA"),
    ("a-model", r"is not a LoRA adapter: its general.type is None"),
    ("not-gguf", r"not a GGUF file"),
])
def test_bad_adapter_files_are_refused_before_loading(files, kind, message) -> None:
    with pytest.raises(LoraAdapterError, match=message) as e:
        pl.Model(files["base"], lora=[(_bad_file(files, kind), 1.0)], **EXACT)
    assert e.value.param == "lora"
    assert not e.value.native_log  # (refused by pyllama90a: llama.cpp never read it)


def test_an_adapter_of_other_dimensions_is_refused_before_loading(files) -> None:
    other = files["dir"] / "wide.gguf"
    write_synthetic_lora(GQA_SHAPES["gqa4-hd64"], other, ("blk.0.attn_q.weight",))  # n_embd 512 against tiny's 256
    with pytest.raises(LoraAdapterError, match=r"tensor blk.0.attn_q.weight.lora_a has shape \[512, 4\], expected "
                                               r"\[256, 4\]") as e:
        pl.Model(files["base"], lora=[(other, 1.0)], **EXACT)
    assert not e.value.native_log


@pytest.mark.parametrize("lora, message", [
    ("a.gguf", "list of \\(path, scale\\) pairs"),
    ([("X", float("nan"))], "finite number"),
    ([("X", "1")], "finite number"),
    ([("X", 1.0, 2.0)], r"lora\[0\] must be a \(path, scale\) pair"),
])
def test_bad_lora_arguments(files, lora, message) -> None:
    lora = lora if isinstance(lora, str) else [(files["a"], *spec[1:]) for spec in lora]
    with pytest.raises(LoraAdapterError, match=message):
        pl.Model(files["base"], lora=lora, **EXACT)


# -- the engine ------------------------------------------------------------------------------------------------

# request sets: None (the engine's defaults: a 1.0, b 0.5), only a, b negated, none
SETS = [None, {0: 1.0}, {1: -1.0}, {}]
DEFAULTS = (1.0, 0.5)


def _reference(files: dict, scales: tuple[float, float]) -> list[int]:
    """The greedy tokens of a Model with adapters a and b at `scales`."""
    with pl.Model(files["base"], lora=[(files["a"], scales[0]), (files["b"], scales[1])], **EXACT) as m:
        return m.generate(PROMPT, max_tokens=8, temperature=0).tokens


def _reference_logprobs(files: dict, scales: tuple[float, float], tokens: list[int]) -> np.ndarray:
    """The log-probability of each of `tokens` after the prompt and those before it, from a Model's logits."""
    with pl.Model(files["base"], lora=[(files["a"], scales[0]), (files["b"], scales[1])], **EXACT) as m:
        logits = m.logits(PROMPT + tokens[:-1])[len(PROMPT) - 1:].astype(np.float64)
    logprobs = logits - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True)) \
        - logits.max(1, keepdims=True)
    return logprobs[np.arange(len(tokens)), tokens]


def _collect(engine: pl.BatchEngine, lora) -> queue.Queue:
    chunks: queue.Queue = queue.Queue()
    engine.submit(PROMPT, chunks.put, max_tokens=8, temperature=0, logprobs=0, lora=lora)
    return chunks


def _generated(chunks: queue.Queue) -> tuple[list[int], list[float]]:
    tokens: list[int] = []
    logprobs: list[float] = []
    while True:
        chunk = chunks.get(timeout=60)
        assert chunk.error is None, chunk.error
        tokens += chunk.tokens
        logprobs += [lp.logprob for lp in chunk.logprobs]
        if chunk.finish_reason is not None:
            return tokens, logprobs


def _scales(lora) -> tuple[float, float]:
    return DEFAULTS if lora is None else (lora.get(0, 0.0), lora.get(1, 0.0))


def test_engine_serves_different_adapter_sets_at_once(files) -> None:
    expected = [_reference(files, _scales(s)) for s in SETS]
    assert len({tuple(t) for t in expected}) == len(SETS)  # (each set makes other text: the test can fail)
    expected_logprobs = [_reference_logprobs(files, _scales(s), t) for s, t in zip(SETS, expected, strict=True)]
    settings = {k: v for k, v in EXACT.items() if k != "n_ctx"}
    with pl.BatchEngine(files["base"], lora=[(files["a"], 1.0), (files["b"], 0.5)], parallel=4, n_ctx=1024,
                        **settings) as engine:
        # one at a time (the same prompt each time: a slot's cells serve only a request with their set), then
        # all four at once, taking turns by set: each as a Model with its set, to the logprobs
        one_at_a_time = [_generated(_collect(engine, s)) for s in SETS]
        at_once = [_generated(c) for c in [_collect(engine, s) for s in SETS]]
        for results in one_at_a_time, at_once:
            assert [tokens for tokens, _ in results] == expected
            for (_, logprobs), want in zip(results, expected_logprobs, strict=True):
                assert np.abs(np.array(logprobs) - want).max() < 1e-3
        assert engine.lora.defaults == DEFAULTS


def test_engine_refuses_bad_sets_when_queued(files) -> None:
    with pl.BatchEngine(files["base"], lora=[(files["a"], 1.0)], parallel=1, n_ctx=256, n_threads=2) as engine:
        with pytest.raises(LoraAdapterError, match="no LoRA adapter has id 1"):
            engine.submit(PROMPT, print, lora={1: 1.0})
        with pytest.raises(LoraAdapterError, match="finite"):
            engine.submit(PROMPT, print, lora={0: float("inf")})
        with pytest.raises(LoraAdapterError, match="adapter id"):
            engine.submit(PROMPT, print, lora={-1: 1.0})
        with pytest.raises(LoraAdapterError, match="no LoRA adapter has id 3"):
            engine.lora.set_defaults({3: 0.5})
        assert engine.lora.set_defaults({0: 0.25}) == (0.25,)


# -- state files ------------------------------------------------------------------------------------------------

def test_model_state_files_name_their_adapters_and_scales(files, tmp_path) -> None:
    a_at = [(files["a"], 1.0)]
    with pl.Model(files["base"], lora=a_at, **EXACT) as m:
        m.eval(PROMPT)
        m.save_state(tmp_path / "a.state")
    with pl.Model(files["base"], **EXACT) as m:
        m.eval(PROMPT)
        m.save_state(tmp_path / "base.state")
        with pytest.raises(pl.StateFileError, match=r"saved with LoRA adapters of fingerprint .* this Model has no "
                                                    r"LoRA adapters"):
            m.load_state(tmp_path / "a.state")
    with pl.Model(files["base"], lora=[(files["a"], 0.5)], **EXACT) as m:
        with pytest.raises(pl.StateFileError, match=r"saved with LoRA scales \[1.0\], this Model applies \[0.5\]"):
            m.load_state(tmp_path / "a.state")
        with pytest.raises(pl.StateFileError, match="saved with no LoRA adapters loaded"):
            m.load_state(tmp_path / "base.state")
    with pl.Model(files["base"], lora=[(files["b"], 1.0)], **EXACT) as m, \
            pytest.raises(pl.StateFileError, match="this Model has LoRA adapters of fingerprint"):
        m.load_state(tmp_path / "a.state")  # (another adapter file at the same scale)
    with pl.Model(files["base"], lora=a_at, **EXACT) as m:
        m.load_state(tmp_path / "a.state")
        again = m.generate(PROMPT, max_tokens=8, temperature=0)
        assert again.timings.prompt_tokens_evaluated == 1 and again.tokens == _reference(files, (1.0, 0.0))


def test_a_restored_slot_runs_with_the_scales_its_cells_were_computed_with(files, tmp_path) -> None:
    # one slot: a file saved after set A, restored into the slot while set B ran there last. A request with set B
    # and the same prompt must not take A's cells (its tokens and logprobs are a Model's with B); one with set A
    # takes them (only the last prompt token is decoded again)
    set_a, set_b = {0: 1.0}, {1: 0.5}
    settings = {k: v for k, v in EXACT.items() if k != "n_ctx"}
    with pl.BatchEngine(files["base"], lora=[(files["a"], 1.0), (files["b"], 0.5)], parallel=1, n_ctx=256,
                        **settings) as engine:
        with_a = _generated(_collect(engine, set_a))
        engine.save_slot(0, tmp_path / "a.slot")
        _generated(_collect(engine, set_b))
        engine.restore_slot(0, tmp_path / "a.slot")
        tokens, logprobs = _generated(_collect(engine, set_b))
        assert tokens == _reference(files, _scales(set_b))
        assert np.abs(np.array(logprobs) - _reference_logprobs(files, _scales(set_b), tokens)).max() < 1e-3
        engine.restore_slot(0, tmp_path / "a.slot")
        decoded = engine.stats().prompt_tokens_decoded
        assert _generated(_collect(engine, set_a))[0] == with_a[0]
        assert engine.stats().prompt_tokens_decoded - decoded <= 1


def test_a_server_loaded_again_keeps_its_default_scales(files) -> None:
    # (what the server does when lost RPC workers come back: a new engine in place of the old)
    from pyllama90a.server.state import ServerState

    def engine() -> pl.BatchEngine:
        return pl.BatchEngine(files["base"], lora=[(files["a"], 1.0), (files["b"], 0.5)], parallel=1, n_ctx=256,
                              n_threads=2)
    state = ServerState(engine(), "base")
    try:
        state.engine.lora.set_defaults({0: 0.25})  # (as POST /lora-adapters)
        state.replace_engine(engine())
        assert state.engine.lora.defaults == (0.25, 0.5)
    finally:
        state.engine.close()


# -- the server ------------------------------------------------------------------------------------------------

def test_lora_flag() -> None:
    assert lora_flag("x.gguf") == ("x.gguf", 1.0)
    assert lora_flag("x.gguf:0.25") == ("x.gguf", 0.25)
    assert lora_flag("dir:with:colons/x.gguf") == ("dir:with:colons/x.gguf", 1.0)
    with pytest.raises(argparse.ArgumentTypeError, match="finite"):
        lora_flag("x.gguf:nan")
    assert parse_args(["--lora", "a.gguf:2", "--lora", "b.gguf"]).lora == [("a.gguf", 2.0), ("b.gguf", 1.0)]
    assert parse_args([]).lora == []


@pytest.fixture(scope="module")
def http(files):
    flags = ["--model", str(files["base"]), "--lora", f"{files['a']}:1.0", "--lora", f"{files['b']}:0.5",
             "--parallel", "2", "--n-ctx", "512", "--threads", "2", "--ctk", "f32", "--ctv", "f32",
             "--flash-attn", "off"]
    with ServerProcess(flags) as srv, httpx.Client(base_url=srv.base_url, timeout=120) as client:
        yield client


def _completion(http: httpx.Client, **fields) -> httpx.Response:
    return http.post("/completion", json={"prompt": PROMPT, "n_predict": 8, "temperature": 0,
                                          "return_tokens": True, **fields})


def _error(response: httpx.Response, param: str) -> str:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param, error
    return error["message"]


@pytest.mark.server
def test_server_lora_adapters(files, http) -> None:
    listed = http.get("/lora-adapters").json()
    assert listed == [{"id": 0, "path": str(files["a"]), "scale": 1.0},
                      {"id": 1, "path": str(files["b"]), "scale": 0.5}]
    # per request: the adapters named, the others off; without `lora`, the defaults
    for lora, scales in (([{"id": 0, "scale": 1.0}], (1.0, 0.0)), ([{"id": 1, "scale": -1}], (0.0, -1.0)),
                         (None, DEFAULTS)):
        answer = _completion(http, **({} if lora is None else {"lora": lora}))
        assert answer.status_code == 200, answer.text
        assert answer.json()["tokens"] == _reference(files, scales), lora
    # new defaults for later requests (as llama-server's POST /lora-adapters)
    assert http.post("/lora-adapters", json=[{"id": 0, "scale": 0.0}, {"id": 1, "scale": 0}]).json() == {
        "success": True}
    assert [a["scale"] for a in http.get("/lora-adapters").json()] == [0.0, 0.0]
    assert _completion(http).json()["tokens"] == _reference(files, (0.0, 0.0))
    chat = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
                                                   "lora": [{"id": 0, "scale": 0.5}]})
    assert chat.status_code == 200, chat.text


@pytest.mark.server
def test_server_refuses_bad_lora(http) -> None:
    assert "no LoRA adapter has id 7" in _error(_completion(http, lora=[{"id": 7, "scale": 1.0}]), "lora")
    assert "twice" in _error(_completion(http, lora=[{"id": 0, "scale": 1}, {"id": 0, "scale": 2}]), "lora")
    _error(_completion(http, lora=[{"id": 0, "scale": "1"}]), "lora[0].scale")
    _error(http.post("/v1/completions", json={"prompt": "a", "lora": {"id": 0}}), "lora")
    before = http.get("/lora-adapters").json()
    _error(http.post("/lora-adapters", json=[{"id": 0, "scale": 0.3}, {"id": 2, "scale": 1.0}]), "lora")
    _error(http.post("/lora-adapters", json={"id": 0, "scale": 1.0}), "lora")
    assert http.get("/lora-adapters").json() == before  # (unchanged by the 400s)
    body = http.get("/openapi.json").json()["paths"]["/v1/completions"]["post"]["requestBody"]
    assert "lora" in body["content"]["application/json"]["schema"]["properties"]


@pytest.mark.server
def test_server_with_a_bad_adapter_file_does_not_start(files) -> None:
    with pytest.raises(RuntimeError, match="is not a LoRA adapter"), \
            ServerProcess(["--model", str(files["base"]), "--lora", str(files["base"]), "--n-ctx", "256",
                           "--parallel", "1", "--threads", "2"]):
        pass
