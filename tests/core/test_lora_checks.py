"""LoRA adapters checked like model files (issue 33, items 6, 7 and 9): every tensor type the check allows decodes
(an adapter of that type changes the logits as merging its dequantized values into the weights does); each
file that crashed llama.cpp at the first decode is a LoraAdapterError at load naming the tensor (run in a child,
so that a regression fails the test instead of ending the run); scales are bounded; on the server a bad adapter
or scale is a 400 for the request that names it, and POST /lora-adapters names its unknown fields."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import httpx
import numpy as np
import pytest

import pyllama90a as pl
from pyllama90a.core.generation.lora_request import MAX_SCALE
from pyllama90a.core.gguf.header import GGML_TYPE_SIZES
from pyllama90a.core.gguf.tensor_roles import type_problem
from pyllama90a.fuzz.__main__ import main as fuzz_main
from pyllama90a.fuzz.adapter_cases import adapter_job, generate_adapter_case, load_adapter_base
from pyllama90a.fuzz.gguf_file import Tensor, read_gguf
from pyllama90a.fuzz.gguf_mutations import write_case
from pyllama90a.fuzz.runner import run_one
from pyllama90a.fuzz.tensor_types import retype
from pyllama90a.native._ffi import ffi, lib
from pyllama90a.native.ggml import type_info
from pyllama90a.tools.server_process import ServerProcess
from pyllama90a.tools.synthetic import BOS_ID, write_synthetic
from pyllama90a.tools.synthetic_lora import write_synthetic_lora

SHAPE = "tiny"  # n_embd 256, n_ff 512: rows of every block size
TARGETS = ("blk.0.attn_q.weight", "blk.1.ffn_down.weight", "output.weight")
PROMPT = [BOS_ID, 300, 301, 302, 310, 400, 450, 500, 270, 333]
EXACT = {"n_ctx": 256, "ctk": "f32", "ctv": "f32", "flash_attn": "off", "n_threads": 2}
ALLOWED = [t for t in GGML_TYPE_SIZES if t != 0 and type_problem("matrix", t) is None]
NVFP4 = 40
REFUSED = [t for t in GGML_TYPE_SIZES if type_problem("matrix", t) is not None]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return write_synthetic(SHAPE, tmp_path_factory.mktemp("lora-checks") / "base.gguf", weight_type="f32")


def _quantized(values: np.ndarray, ggml_type: int) -> tuple[bytes, np.ndarray]:
    """`values` (rows, n) as ggml_type's bytes (ggml's own quantization), and those bytes dequantized."""
    values = np.ascontiguousarray(values, dtype=np.float32)
    rows, n = values.shape
    out = ffi.new("char[]", lib.ggml_row_size(ggml_type, n) * rows)
    imatrix = np.ones(n, dtype=np.float32)  # (the i-quants need one; the others take it as equal weights)
    lib.ggml_quantize_chunk(ggml_type, ffi.cast("float *", values.ctypes.data), out, 0, rows, n,
                            ffi.cast("float *", imatrix.ctypes.data))
    back = np.empty(values.shape, dtype=np.float32)
    lib.ggml_get_type_traits(ggml_type).to_float(out, ffi.cast("float *", back.ctypes.data), values.size)
    return ffi.buffer(out)[:], back


def _typed_adapter(folder: Path, ggml_type: int, rank: int) -> tuple[Path, dict]:
    """An adapter of TARGETS whose every tensor is of `ggml_type`, and name -> (A, B) as ggml reads them back."""
    f32 = folder / f"f32-{ggml_type}.gguf"
    pairs = write_synthetic_lora(SHAPE, f32, TARGETS, rank=rank, alpha=float(rank), std=0.1, seed=3)
    adapter = read_gguf(f32)
    blob, tensors, read_back = bytearray(), [], {}
    for t in adapter.tensors:
        target, _, which = t.name.rpartition(".")
        data, back = _quantized(pairs[target][which == "lora_b"], ggml_type)
        tensors.append(Tensor(t.name, t.dims, ggml_type, len(blob)))
        blob += data + b"\0" * (-len(data) % adapter.alignment)
        read_back.setdefault(target, [None, None])[which == "lora_b"] = back
    data_path = folder / f"data-{ggml_type}.bin"
    data_path.write_bytes(bytes(blob))
    path = folder / f"typed-{ggml_type}.gguf"
    replace(adapter, tensors=tensors, data_path=data_path, data_offset=0, data_size=len(blob)).write(path)
    return path, read_back


def _logits(path: Path, lora=()) -> np.ndarray:
    with pl.Model(path, lora=lora, **EXACT) as m:
        return m.logits(PROMPT)


@pytest.mark.parametrize("ggml_type", ALLOWED, ids=lambda t: type_info(t).name)
def test_every_type_the_check_allows_decodes_as_its_values(base, tmp_path, ggml_type) -> None:
    rank = max(GGML_TYPE_SIZES[ggml_type][0], 8)  # (lora_b's rows are `rank` values: whole blocks)
    adapter, read_back = _typed_adapter(tmp_path, ggml_type, rank)

    def merge(name: str, w: np.ndarray) -> np.ndarray:  # W + s * alpha / rank * B @ A, alpha = rank, s = 1
        return w + read_back[name][1] @ read_back[name][0] if name in read_back else w
    merged = _logits(write_synthetic(SHAPE, tmp_path / "merged.gguf", weight_type="f32", adjust=merge))
    adapted, plain = _logits(base, [(adapter, 1.0)]), _logits(base)
    effect, error = np.abs(adapted - plain).max(), np.abs(adapted - merged).max()
    # (ggml quantizes the activations for a quantized mat-mul: near the merged values, not equal)
    assert np.isfinite(adapted).all() and effect > 0.05 and error < 0.1 * effect, (effect, error)


def _adapter_case(tmp_path: Path, base: str, *ops: dict, scale: float = 1.0, engine: bool = False):
    spec = {"target": "adapter", "base": base, "mutations": [{"cls": "test", "ops": list(ops)}],
            "model_args": {"scale": scale, "engine": engine}}
    return run_one(adapter_job(spec, tmp_path / "case"), timeout=120)


def _refused(outcome, message: str) -> None:
    expected = ("clean", "load", "pyllama90a.errors.LoraAdapterError")
    assert (outcome.kind, outcome.stage, outcome.error_type) == expected, outcome
    assert message in outcome.message, outcome.message


def _retyped(name: str, ggml_type: int) -> dict:
    return {"op": "retype", "name": name, "type": ggml_type, "fill": 0}


def _reshaped(name: str, dims: list[int]) -> list[dict]:
    return [{"op": "tensor", "name": name, "field": "dims", "value": dims}, _retyped(name, 0)]


def _renamed(old: str, new: str) -> list[dict]:
    return [{"op": "tensor", "name": f"{old}.lora_{x}", "field": "name", "value": f"{new}.lora_{x}"} for x in "ab"]


@pytest.mark.parametrize("ggml_type", REFUSED, ids=lambda t: str(type_info(t).name if type_info(t) else t))
@pytest.mark.parametrize("which", ["lora_a", "lora_b"])
def test_a_type_ggml_cannot_multiply_by_is_refused_at_load(tmp_path, ggml_type, which) -> None:
    # before: I32, F64, Q8_K, I8, I16 (and Q8_1, I64) ended the process with SIGSEGV at the first decode
    name = f"blk.0.attn_q.weight.{which}"
    _refused(_adapter_case(tmp_path, "adapter-tiny", _retyped(name, ggml_type)), f"tensor {name} has type")


@pytest.mark.parametrize("ops, message", [
    # SIGABRT in ggml_can_mul_mat before: a 3-D lora_a, a 4-D lora_b (llama.cpp compares two dimensions)
    (_reshaped("blk.0.attn_q.weight.lora_a", [576, 32, 2]), "tensor blk.0.attn_q.weight.lora_a has 3 dimensions"),
    (_reshaped("blk.1.ffn_down.weight.lora_b", [32, 576, 1, 2]), "tensor blk.1.ffn_down.weight.lora_b has 4 dim"),
    # SIGABRT: a token_embd pair on a model whose output projection is token_embd (SmolLM2 has no output.weight)
    (_renamed("blk.0.attn_q.weight", "token_embd.weight"), "which this model also uses as its output projection"),
    # llama.cpp's own refusals, said first and with the tensor's name
    (_reshaped("blk.0.attn_v.weight.lora_b", [16, 192]), "lora_b has shape [16, 192], expected [32, 192]"),
    ([{"op": "tensor", "name": "blk.0.attn_q.weight.lora_a", "field": "name", "value": "blk.0.attn_q.weight.lora_c"}],
     "tensor blk.0.attn_q.weight.lora_c is neither"),
    (_renamed("blk.0.attn_q.weight", "blk.0.attn_norm.weight"), "which llama.cpp applies no LoRA to"),
    # SIGABRT in gguf's type assert: alpha read as f32 whatever its type
    ([{"op": "set", "key": "adapter.lora.alpha", "value": {"type": "u32", "value": 16}}],
     "adapter.lora.alpha must be a finite float32, got 16"),
])
def test_adapters_that_crashed_the_real_model_are_refused_at_load(tmp_path, ops, message) -> None:
    _refused(_adapter_case(tmp_path, "adapter-real", *ops), message)


def test_a_token_embd_pair_decodes_with_its_own_output_and_its_ranks_are_checked(tmp_path) -> None:
    # the tiny model has its own output.weight: a token_embd pair ([rank, n_vocab], [rank, n_embd]) decodes; one
    # whose ranks differ aborted in ggml_can_mul_mat (llama.cpp checks no rank for token_embd)
    pair = [*_reshaped("blk.0.attn_q.weight.lora_a", [8, 512]), *_reshaped("blk.0.attn_q.weight.lora_b", [8, 256]),
            *_renamed("blk.0.attn_q.weight", "token_embd.weight")]
    assert _adapter_case(tmp_path, "adapter-tiny", *pair).kind == "ok"
    _refused(_adapter_case(tmp_path, "adapter-tiny", *pair, *_reshaped("token_embd.weight.lora_b", [4, 256])),
             "tensor token_embd.weight.lora_b has shape [4, 256], expected [8, 256]")


def test_a_pair_on_an_nvfp4_weight_with_a_scale_is_refused(base, tmp_path) -> None:
    # llama.cpp loads a ".scale" beside any weight; for an NVFP4 feed-forward weight with one, build_ffn asserts
    # that no LoRA adapts it (SIGABRT at the first decode before)
    model = read_gguf(base)
    retype(model, "blk.0.ffn_up.weight", NVFP4, 0x00)
    model.tensors.append(Tensor("blk.0.ffn_up.scale", [1], 0, 0))
    model.layout.append((None, 4, 0x00))
    retype(model, "blk.0.ffn_up.scale", 0, 0x00)  # (lays the data section out again, the scale included)
    model.write(tmp_path / "nvfp4.gguf")
    write_synthetic_lora(SHAPE, tmp_path / "up.gguf", ["blk.0.ffn_up.weight"])
    code = ("import sys, pyllama90a as pl\n"
            "try:\n"
            "    with pl.Model(sys.argv[1], lora=[(sys.argv[2], 1.0)], n_ctx=64, n_threads=1) as m:\n"
            "        m.generate([1, 300, 301], max_tokens=2, temperature=0)\n"
            "except pl.LoraAdapterError as e:\n"
            "    print('refused:', e)\n")
    child = subprocess.run([sys.executable, "-c", code, str(tmp_path / "nvfp4.gguf"), str(tmp_path / "up.gguf")],
                           capture_output=True, text=True, timeout=120)
    assert child.returncode == 0, child.stderr[-2000:]
    assert "refused:" in child.stdout and "adapts blk.0.ffn_up.weight, an NVFP4 weight with a .scale" in child.stdout


@pytest.mark.parametrize("scale", [MAX_SCALE + 0.5, -1e30, 3.4028234663852886e38])
def test_scales_are_bounded(base, tmp_path, scale) -> None:
    adapter = tmp_path / "a.gguf"
    write_synthetic_lora(SHAPE, adapter, TARGETS)
    with pytest.raises(pl.InvalidArgumentError, match=r"in \[-100.0, 100.0\]") as e:
        pl.Model(base, lora=[(adapter, scale)], **EXACT)
    assert e.value.param == "lora"
    with pl.BatchEngine(base, lora=[(adapter, MAX_SCALE)], parallel=1, n_ctx=256, n_threads=2) as engine, \
            pytest.raises(pl.InvalidArgumentError, match=r"in \[-100.0, 100.0\]"):
        engine.submit(PROMPT, print, lora={0: scale})


# -- the server ---------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def adapters(base) -> dict[str, Path]:
    folder = base.parent
    write_synthetic_lora(SHAPE, folder / "good.gguf", TARGETS)
    # NaN weights: types and shapes are right, so it loads; any scale but 0 makes the logits NaN
    write_synthetic_lora(SHAPE, folder / "f32.gguf", TARGETS[:1])
    nan = read_gguf(folder / "f32.gguf")
    retype(nan, "blk.0.attn_q.weight.lora_a", 0, 0xff)
    nan.write(folder / "nan.gguf")
    return {"good": folder / "good.gguf", "nan": folder / "nan.gguf"}


def _server(base: Path, adapters: dict[str, Path], *flags: str) -> ServerProcess:
    return ServerProcess(["--model", str(base), "--lora", f"{adapters['good']}:0.5", "--lora", f"{adapters['nan']}:0",
                          "--parallel", "1", "--n-ctx", "256", "--threads", "2", *flags])


def _completion(http: httpx.Client, **fields) -> httpx.Response:
    return http.post("/completion", json={"prompt": PROMPT, "n_predict": 2, "temperature": 0, **fields})


def _error(response: httpx.Response, param: str) -> str:
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param, response.text
    return response.json()["error"]["message"]


@pytest.mark.server
def test_server_answers_a_bad_adapter_or_scale_with_the_request_400(base, adapters) -> None:
    with _server(base, adapters) as srv, httpx.Client(base_url=srv.base_url, timeout=120) as http:
        # the NaN adapter named: that request's 400 (was a 500), and the server goes on
        message = _error(_completion(http, lora=[{"id": 1, "scale": 1.0}]), "lora")
        assert "NaN or infinite" in message and "{1: 1.0}" in message
        assert _completion(http).status_code == 200
        # a scale past the bound, in a request or as a default: a 400 naming the field (was a 500, then every
        # later request's 500)
        assert "between -100.0 and 100.0" in _error(_completion(http, lora=[{"id": 0, "scale": 3.4e38}]),
                                                    "lora[0].scale")
        _error(http.post("/lora-adapters", json=[{"id": 0, "scale": 3.4e38}]), "lora[0].scale")
        assert [a["scale"] for a in http.get("/lora-adapters").json()] == [0.5, 0.0]
        # the NaN adapter made a default: requests with the defaults are 400s, the others are served
        assert http.post("/lora-adapters", json=[{"id": 1, "scale": 1.0}]).status_code == 200
        _error(_completion(http), "lora")
        assert _completion(http, lora=[{"id": 0, "scale": 1.0}]).status_code == 200
        # unknown item fields are named, as /completion names its own
        answer = http.post("/lora-adapters", json=[{"id": 1, "scale": 0.0, "scal": 2}])
        assert answer.status_code == 200 and answer.headers["X-Ignored-Fields"] == "lora[0].scal", answer.headers
        assert _completion(http).status_code == 200


@pytest.mark.server
def test_server_rejects_unknown_lora_adapter_fields_when_told(base, adapters) -> None:
    with _server(base, adapters, "--unknown-fields", "reject") as srv, \
            httpx.Client(base_url=srv.base_url, timeout=120) as http:
        message = _error(http.post("/lora-adapters", json=[{"id": 0, "scale": 0.2, "sacle": 1}]), "lora[0].sacle")
        assert "unknown request field(s): lora[0].sacle" in message
        assert [a["scale"] for a in http.get("/lora-adapters").json()] == [0.5, 0.0]


@pytest.mark.server
def test_server_with_an_adapter_it_cannot_multiply_by_does_not_start(base, adapters, tmp_path) -> None:
    # before: it started, served, and the first request naming adapter 1 ended the process (SIGSEGV)
    bad = read_gguf(adapters["good"])
    retype(bad, "output.weight.lora_b", 26, 0)  # I32
    bad.write(tmp_path / "i32.gguf")
    with pytest.raises(RuntimeError, match=r"tensor output.weight.lora_b has type i32"), \
            _server(base, {"good": adapters["good"], "nan": tmp_path / "i32.gguf"}):
        pass


# -- the fuzz target ----------------------------------------------------------------------------------------------

def test_adapter_cases_are_deterministic_and_cover_every_class(tmp_path) -> None:
    cases = [generate_adapter_case(3, i) for i in range(300)]
    assert cases == [generate_adapter_case(3, i) for i in range(300)]
    classes = {m["cls"] for c in cases for m in c["mutations"]}
    assert {f"adapter:{c}" for c in ("rank", "dims", "transpose", "target", "type", "values", "alpha", "unpaired")} \
        <= classes and len(classes) > 15
    assert {c["base"] for c in cases} == {"adapter-real", "adapter-tiny"}
    for case in cases[:100]:  # every case is writable
        write_case(load_adapter_base(case["base"]), case["mutations"], tmp_path / "a.gguf")


def test_bounded_adapter_sample_has_no_defects(tmp_path, capsys) -> None:
    rc = fuzz_main(["--target", "adapter", "--cases", "40", "--seed", "2", "--jobs", "2", "--timeout", "60",
                    "--out", str(tmp_path), "--batch", "1000"])
    report = capsys.readouterr().out
    assert "40 cases" in report and " ok " in report  # (some adapters decode: the sample reaches the graph)
    assert rc == 0, "the adapter fuzz sample found defects:\n" + report
