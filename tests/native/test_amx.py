"""ggml's AMX kernels on a CPU that has AMX: mat-muls through the AMX buffer type against the plain CPU path,
and the default model (and a synthetic one) decoding with its weights in AMX buffers (patch 0010 fixed a SIGILL
at the first one).

Skipped, saying why, where the CPU has no AMX or the loaded CPU backend was not built with it. On such
machines tests/native/test_amx_tile_config.py still checks the AMX machine code.
"""
from __future__ import annotations

import logging

import numpy as np
import pytest

from pyllama90a.bench.cpu_features import cpu_has
from pyllama90a.native import ContextHandle, ContextParams, ModelHandle
from pyllama90a.native._ffi import ffi, lib
from pyllama90a.native.ggml import (
    compute_on_cpu,
    cpu_build_features,
    cpu_extra_buffer_types,
    devices,
    loaded_cpu_backend,
)

if not (cpu_has("AMX_INT8") and cpu_has("AMX_TILE")):
    pytest.skip("this CPU has no AMX (amx_int8 and amx_tile are not in /proc/cpuinfo's flags)", allow_module_level=True)
if cpu_build_features().get("AMX_INT8") != "1":
    pytest.skip(f"the loaded CPU backend ({loaded_cpu_backend()}) was built without AMX", allow_module_level=True)

K, N = 256, 128  # weights: N rows of K values (whole Q8/Q4 blocks, whole 32-row AMX blocks)


@pytest.fixture(scope="module")
def amx_buffer_type():
    bufts = cpu_extra_buffer_types()
    assert "AMX" in bufts, f"no AMX buffer type among the CPU's extra buffer types {sorted(bufts)}"
    return bufts["AMX"]


def _quantized(qtype: int, w: np.ndarray) -> bytes:
    out = bytearray(lib.ggml_row_size(qtype, K) * N)
    src = np.ascontiguousarray(w, dtype=np.float32)
    lib.ggml_quantize_chunk(qtype, ffi.cast("float *", src.ctypes.data), ffi.from_buffer(out), 0, N, K, ffi.NULL)
    return bytes(out)


def _result(t, m: int) -> np.ndarray:
    return np.frombuffer(ffi.buffer(t.data, 4 * N * m), dtype=np.float32).reshape(m, N).copy()


@pytest.mark.parametrize("m", [1, 7, 64], ids=lambda m: f"{m}-rows")
@pytest.mark.parametrize("type_name", ["Q4_0", "Q4_1", "Q8_0"])
def test_amx_mat_mul_matches_the_plain_cpu_path(amx_buffer_type, type_name, m) -> None:
    qtype = getattr(lib, f"GGML_TYPE_{type_name}")
    rng = np.random.default_rng(m)
    raw = _quantized(qtype, rng.standard_normal((N, K), dtype=np.float32))
    x = rng.standard_normal((m, K), dtype=np.float32)

    weights_ctx = lib.ggml_init({"mem_size": 1 << 20, "mem_buffer": ffi.NULL, "no_alloc": True})
    ctx = lib.ggml_init({"mem_size": 16 << 20, "mem_buffer": ffi.NULL, "no_alloc": False})
    buffer = ffi.NULL
    try:
        w_amx = lib.ggml_new_tensor_4d(weights_ctx, qtype, K, N, 1, 1)
        buffer = lib.ggml_backend_alloc_ctx_tensors_from_buft(weights_ctx, amx_buffer_type)
        assert buffer != ffi.NULL
        lib.ggml_backend_tensor_set(w_amx, raw, 0, len(raw))  # the AMX buffer repacks them into tiles
        w_plain = lib.ggml_new_tensor_4d(ctx, qtype, K, N, 1, 1)
        ffi.memmove(w_plain.data, raw, len(raw))
        act = lib.ggml_new_tensor_4d(ctx, lib.GGML_TYPE_F32, K, m, 1, 1)
        ffi.memmove(act.data, x.tobytes(), x.nbytes)
        y_amx, y_plain = lib.ggml_mul_mat(ctx, w_amx, act), lib.ggml_mul_mat(ctx, w_plain, act)
        graph = lib.ggml_new_graph(ctx)
        lib.ggml_build_forward_expand(graph, y_amx)
        lib.ggml_build_forward_expand(graph, y_plain)
        compute_on_cpu(graph, 2)
        got, want = _result(y_amx, m), _result(y_plain, m)
    finally:
        if buffer != ffi.NULL:
            lib.ggml_backend_buffer_free(buffer)
        lib.ggml_free(weights_ctx)
        lib.ggml_free(ctx)
    # the same quantized activations, summed in another order: read as plain rows, the tiles' packed
    # layout would give garbage, so agreement also shows that the AMX kernels ran
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * float(np.abs(want).max()))


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _first_logits(model_path, weight_repack: bool) -> tuple[np.ndarray, list[str]]:
    """The logits after the prompt, and llama.cpp's load log (INFO lines: where the weights went)."""
    native_log, lines = logging.getLogger("pyllama90a.native"), _Lines()
    level = native_log.level
    native_log.setLevel(logging.INFO)
    native_log.addHandler(lines)
    try:
        model = ModelHandle(model_path, n_gpu_layers=0, weight_repack=weight_repack)  # weights on the CPU
    finally:
        native_log.removeHandler(lines)
        native_log.setLevel(level)
    context = ContextHandle(model, ContextParams(n_ctx=256, n_threads=2, type_k="q4_0", type_v="q4_0",
                                                 flash_attn="off"))
    context.decode_tokens(model.tokenize(b"The capital of France is", True, False))
    logits = context.logits_row().copy()
    context.close()
    return logits, lines.lines


@pytest.fixture(params=["default", "synthetic-q8_0"])
def model_for_amx(request):
    """The default model (Q4_1 weights), and a synthetic one (Q8_0) for machines that cannot pull it."""
    if request.param == "default":
        return request.getfixturevalue("model_path")
    from pyllama90a.tools.synthetic import synthetic_model

    return synthetic_model("tiny", weight_type="q8_0")


def test_a_model_decodes_with_amx_weights(model_for_amx) -> None:
    if any(d.is_gpu for d in devices()):
        pytest.skip("a GPU is registered: llama.cpp then keeps CPU weights in the GPU's host buffers, not the CPU's "
                    "extra buffer types (CUDA_VISIBLE_DEVICES= hides it)")
    amx, load_log = _first_logits(model_for_amx, weight_repack=True)
    plain, plain_log = _first_logits(model_for_amx, weight_repack=False)
    assert any("AMX" in line for line in load_log), "the weights did not go to AMX buffers:\n" + "\n".join(load_log)
    assert not any("AMX" in line and "buffer size" in line for line in plain_log)
    assert np.isfinite(amx).all()
    np.testing.assert_allclose(amx, plain, atol=0.05 * float(np.abs(plain).max()))
    if model_for_amx.name.startswith("SmolLM2"):  # a real model's next token after this prompt is no near-tie
        assert int(np.argmax(amx)) == int(np.argmax(plain))
