"""Models split over pyllama90a.worker processes (ggml-rpc) on 127.0.0.1: the same greedy output as one process
with the quantized K/V paths (FA off and on), the placement reaching llama.cpp (buffers per worker), the attention
path the remote CPU ran, and the failures: no worker, a silent or wrong-version peer, a worker killed
mid-generation (patch 0014: an error for that generation, the process lives on, a reload works once the worker is
back)."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import threading

import pytest

import pyllama90a as pl
from pyllama90a.native import ModelHandle, rpc
from pyllama90a.native._ffi import ffi, lib
from pyllama90a.native.ggml import ggml_type
from pyllama90a.native.placement import Placement
from pyllama90a.tools.server_process import free_port
from pyllama90a.tools.worker_process import WorkerProcess
from support.native_lines import buffer_mib, native_info_lines
from support.rpc_fakes import loopback_listener

SETTINGS = {"ctk": "q4_0", "ctv": "q4_0", "n_ctx": 512, "n_threads": 1}
PROMPT = "The three primary colors are"
N_TOKENS = 24


@pytest.fixture(scope="module")
def two_workers():
    workers = [WorkerProcess().start(), WorkerProcess().start()]
    yield workers
    for w in workers:
        w.stop()


@pytest.fixture(scope="module")
def local_tokens(model_path):
    """Greedy tokens of one process, per flash_attn setting."""
    found = {}
    for flash_attn in ("off", "on"):
        with pl.Model(model_path, flash_attn=flash_attn, **SETTINGS) as m:
            found[flash_attn] = m.generate(PROMPT, max_tokens=N_TOKENS, temperature=0).tokens
    return found


def remote_buffer(worker: WorkerProcess) -> str:
    return f"RPC0[{worker.endpoint}]"  # ggml-rpc's buffer type name: the worker's device 0


@pytest.mark.parametrize("flash_attn", ["off", "on"])
def test_split_over_two_workers_gives_the_local_greedy_output(model_path, two_workers, local_tokens, flash_attn):
    with native_info_lines() as lines:
        split = pl.Model(model_path, flash_attn=flash_attn, rpc=[w.endpoint for w in two_workers], **SETTINGS)
    with split:
        assert [d.split(" ", 1)[1] for d in split.devices] == [f"({w.endpoint})" for w in two_workers]
        got = split.generate(PROMPT, max_tokens=N_TOKENS, temperature=0).tokens
    weights, kv = buffer_mib(lines, "model"), buffer_mib(lines, "KV")
    for w in two_workers:  # the layers and their KV cache are on the workers
        assert weights.get(remote_buffer(w), 0) > 10 and kv.get(remote_buffer(w), 0) > 0, lines
    assert got == local_tokens[flash_attn]


def test_placement_reaches_llama_cpp(model_path, two_workers):
    endpoints = [w.endpoint for w in two_workers]
    first, second = (remote_buffer(w) for w in two_workers)
    with native_info_lines() as lines:
        pl.Model(model_path, rpc=endpoints, tensor_split=[1, 3], **SETTINGS).close()
    weights, kv = buffer_mib(lines, "model"), buffer_mib(lines, "KV")
    assert weights[second] > 2 * weights[first] and kv[second] > 2 * kv[first], (weights, kv)
    with native_info_lines() as lines:
        pl.Model(model_path, rpc=endpoints, split_mode="none", main_gpu=1, **SETTINGS).close()
    weights = buffer_mib(lines, "model")
    assert first not in weights and weights[second] > 50, weights
    with pytest.raises(pl.InvalidArgumentError, match="tensor_split has 3 shares, but the model has 2 devices"):
        pl.Model(model_path, rpc=endpoints, tensor_split=[1, 1, 1], **SETTINGS)
    with pytest.raises(pl.InvalidArgumentError, match="main_gpu=2 names a device that does not exist"):
        pl.Model(model_path, rpc=endpoints, split_mode="none", main_gpu=2, **SETTINGS)


def test_batch_engine_over_workers(model_path, two_workers, local_tokens):
    with pl.BatchEngine(model_path, parallel=2, n_ctx=1024, flash_attn="off", ctk="q4_0", ctv="q4_0",
                        n_threads=1, rpc=[w.endpoint for w in two_workers]) as engine:
        tokens = [t for chunk in engine.stream(PROMPT, max_tokens=N_TOKENS, temperature=0) for t in chunk.tokens]
    assert tokens == local_tokens["off"]


def test_the_remote_cpu_runs_the_quantized_attention_paths(model_path, two_workers):
    """The graphs the scheduler sends a worker (nodes in its buffers) hold patch 0003's OUT_PROD on the q4_0 V
    cache, the K-cache mark on the prefill's K^T q and patch 0005's grouped K^T q in decode (3 query heads per KV
    head): the worker's CPU computes them (the output equality above shows it computes them right)."""
    nodes: list[tuple[str, int, int, tuple[int, ...], str]] = []  # op, src0 type, mark, shape, buffer

    @ffi.callback("bool(struct ggml_tensor *, bool, void *)")
    def on_node(t, ask, _user):
        if ask:
            where = ffi.string(lib.ggml_backend_buffer_name(t.buffer)).decode() if t.buffer != ffi.NULL else ""
            nodes.append((ffi.string(lib.ggml_op_desc(t)).decode(), t.src[0].type if t.src[0] != ffi.NULL else -1,
                          lib.ggml_pyl_get_mark(t), tuple(t.ne), where))
        return False

    handle = ModelHandle(model_path, placement=Placement.checked(rpc=[two_workers[0].endpoint]))
    cparams = lib.llama_context_default_params()
    cparams.n_ctx, cparams.n_batch, cparams.n_ubatch = 512, 64, 64
    cparams.type_k = cparams.type_v = ggml_type("q4_0")
    cparams.flash_attn_type = lib.LLAMA_FLASH_ATTN_TYPE_DISABLED
    cparams.n_threads = cparams.n_threads_batch = 1
    cparams.cb_eval = on_node
    ctx = lib.llama_init_from_model(handle.ptr, cparams)
    assert ctx != ffi.NULL
    try:
        prompt = ffi.new("llama_token[]", handle.tokenize(PROMPT.encode(), True, False))
        assert lib.llama_decode(ctx, lib.llama_batch_get_one(prompt, len(prompt))) == 0
        prefill = list(nodes)
        nodes.clear()
        assert lib.llama_decode(ctx, lib.llama_batch_get_one(prompt, 1)) == 0
        decode = list(nodes)
    finally:
        lib.llama_free(ctx)
    n_layer, q4_0 = int(handle.metadata("llama.block_count")), ggml_type("q4_0")
    remote = remote_buffer(two_workers[0])
    for step in (prefill, decode):
        out_prods = [n for n in step if n[0] == "OUT_PROD"]
        assert len(out_prods) == n_layer and {(n[1], n[4]) for n in out_prods} == {(q4_0, remote)}
    marked = [n for n in prefill if n[0] == "MUL_MAT" and n[2] & lib.GGML_PYL_MARK_K_CACHE]
    assert len(marked) == n_layer and {(n[1], n[4]) for n in marked} == {(q4_0, remote)}
    grouped = [n for n in decode if n[0] == "MUL_MAT" and n[1] == q4_0 and n[3][1:] == (3, 3, 1)]
    assert len(grouped) == n_layer and {n[4] for n in grouped} == {remote}


# -- failures ------------------------------------------------------------------------------------------------


def test_no_worker_is_a_load_error(model_path):
    endpoint = f"127.0.0.1:{free_port()}"
    with pytest.raises(pl.ModelLoadError, match=f"cannot reach RPC worker {endpoint}"):
        pl.Model(model_path, rpc=[endpoint], **SETTINGS)


@contextlib.contextmanager
def fake_peer(reply: bytes | None):
    """A listener on 127.0.0.1 that answers every connection with `reply` (None: never answers)."""
    def answer(conn: socket.socket, stop: threading.Event) -> None:
        conn.recv(1 + 8 + 24)
        if reply is not None:
            conn.sendall(reply)
        stop.wait(3)

    with loopback_listener(answer) as endpoint:
        yield endpoint


def test_a_worker_of_another_protocol_version_is_refused(model_path):
    major = rpc.protocol_version()[0]
    old = struct.pack("<Q", 28) + bytes([major - 1, 0, 0, 0]) + bytes(24)
    with (fake_peer(old) as endpoint,
          pytest.raises(pl.ModelLoadError, match=rf"speaks protocol {major - 1}\.0\.0, this build {major}\.")):
        pl.Model(model_path, rpc=[endpoint], **SETTINGS)


def test_a_silent_peer_is_a_load_error_not_a_hang(model_path, monkeypatch):
    monkeypatch.setattr(rpc, "PROBE_TIMEOUT_S", 1.0)
    with fake_peer(None) as endpoint, pytest.raises(pl.ModelLoadError, match="did not answer within 1 s"):
        pl.Model(model_path, rpc=[endpoint], **SETTINGS)


def test_a_worker_killed_mid_generation_fails_that_generation_only(model_path, local_tokens):
    worker = WorkerProcess().start()
    try:
        model = pl.Model(model_path, flash_attn="off", rpc=[worker.endpoint], **SETTINGS)
        pieces = model.generate(PROMPT, max_tokens=200, temperature=0, stream=True)
        next(pieces)
        worker.stop(signal.SIGKILL)
        assert model.lost_workers == ()
        with pytest.raises(pl.DecodeError, match=f"lost the connection to RPC worker {worker.endpoint}"):
            for _ in pieces:
                pass
        assert model.lost_workers == (worker.endpoint,)
        model.close()
        # this process lives on; the worker, back on its port, serves a new load of the model
        worker = WorkerProcess(worker.port).start()
        with pl.Model(model_path, flash_attn="off", rpc=[worker.endpoint], **SETTINGS) as again:
            assert again.generate(PROMPT, max_tokens=N_TOKENS, temperature=0).tokens == local_tokens["off"]
    finally:
        worker.stop()


def test_an_engine_request_fails_when_its_worker_dies_and_the_engine_goes_on(model_path):
    worker = WorkerProcess().start()
    try:
        engine = pl.BatchEngine(model_path, parallel=1, n_ctx=512, flash_attn="off", ctk="q4_0", ctv="q4_0",
                                n_threads=1, rpc=[worker.endpoint])
        with engine:
            chunks = engine.stream(PROMPT, max_tokens=200, temperature=0)
            next(chunks)
            worker.stop(signal.SIGKILL)
            with pytest.raises(pl.DecodeError, match="lost the connection to RPC worker"):
                for _ in chunks:
                    pass
            with pytest.raises(pl.DecodeError):  # the layers are gone: later requests fail the same way
                list(engine.stream(PROMPT, max_tokens=4, temperature=0))
    finally:
        worker.stop()


def test_a_worker_beyond_loopback_needs_a_secret_or_says_it_has_none(tmp_path):
    """Bound to another address, a worker without --secret-file refuses to start; --allow-unauthenticated starts it
    with a warning."""
    run = [sys.executable, "-m", "pyllama90a.worker", "--host", "0.0.0.0", "--port", str(free_port()), "--threads",
           "1"]
    refused = subprocess.run(run, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "give --secret-file" in refused.stderr, refused.stderr
    proc = subprocess.Popen([*run, "--allow-unauthenticated"], stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stderr.readline()
    finally:
        proc.send_signal(signal.SIGINT)  # (the worker lets SIGINT end it: ggml's loop never returns to Python)
        proc.wait(timeout=30)
    assert "WARNING" in first and "no authentication" in first
    assert proc.returncode == -signal.SIGINT


def test_worker_flags_are_checked():
    run = [sys.executable, "-m", "pyllama90a.worker", "--port", str(free_port())]
    for extra, words in ((["--host", "worker.example"], "IPv4"), (["--device", "TPU9"], "no device TPU9"),
                         (["--threads", "0"], "--threads"), (["--secret-file", "/nonexistent"], "cannot read"),
                         (["--timeout", "0"], "--timeout")):
        proc = subprocess.run(run + extra, capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONWARNINGS": "ignore"})
        assert proc.returncode == 2 and words in proc.stderr, proc.stderr


def test_a_worker_cache_saves_sending_large_tensors_again(model_path, tmp_path):
    """--cache DIR: ggml-rpc sends tensors over 10 MiB as a hash first; a worker that has them in DIR is not sent
    them again (the default model's output matrix, about 28 MiB)."""
    sent = []
    with WorkerProcess(extra=("--cache", str(tmp_path / "cache"))) as worker:
        for _ in range(2):
            with pl.Model(model_path, rpc=[worker.endpoint], **SETTINGS) as model:
                sent.append(worker.link_bytes())
                assert model.generate(PROMPT, max_tokens=2, temperature=0).tokens
    assert list((tmp_path / "cache").iterdir())
    assert sent[1] < sent[0] - 20 * 2**20, sent


def test_a_worker_cache_is_bounded(model_path, tmp_path):
    """--cache-max-mib: a client made the worker write without bound; a tensor that would take the cache past its
    cap is set, not saved (the output matrix, about 28 MiB, against 20 MiB)."""
    cache = tmp_path / "cache"
    with WorkerProcess(extra=("--cache", str(cache), "--cache-max-mib", "20")) as worker:
        with pl.Model(model_path, rpc=[worker.endpoint], **SETTINGS) as model:
            assert model.generate(PROMPT, max_tokens=2, temperature=0).tokens
        assert "not cached" in worker.text()
    assert not list(cache.iterdir())
