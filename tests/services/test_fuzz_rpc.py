"""The RPC worker's fuzzer (pyllama90a.fuzz, target rpc; issue 33): its wire format, its recorded sessions, the
runner's verdict on a worker that dies or goes silent, and a bounded sample of cases against the real worker.

test_known_crash_case_is_survived and test_bounded_sample_has_no_defects fail on a worker without the RPC
hardening patch: the first case ends ggml-rpc's unpatched server with a GGML_ASSERT, and unpatched buffers carry
one client's bytes to the next.
"""
from __future__ import annotations

import json
import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from pyllama90a.fuzz.__main__ import main as fuzz_main
from pyllama90a.fuzz.rpc_cases import ATTACKS, auth_peer, generate_rpc_case, known_crash_case
from pyllama90a.fuzz.rpc_protocol import (
    ALLOC_BUFFER,
    GRAPH_COMPUTE,
    SET_TENSOR,
    TENSOR_SIZE,
    Message,
    pack_field,
    split_requests,
    tensor_bytes,
    tensor_field,
    tensor_offsets,
)
from pyllama90a.fuzz.rpc_replay import Replay, corpus_sessions, rpc_job
from pyllama90a.fuzz.rpc_sessions import ensure_corpus, free_port, wait_for_port
from pyllama90a.fuzz.runner import run_one

SAMPLE_CASES = 40  # about 10 s on 2 cores against the patched worker


@pytest.fixture(scope="module")
def sessions(model_path):
    ensure_corpus()  # records them (about 20 s) on first use
    return corpus_sessions()


def test_tensor_layout_round_trips() -> None:
    data = tensor_bytes({"id": 7, "type": 26, "buffer": 2**64 - 1, "ne": [3, 4, 5, 6], "op": 37,
                         "op_params": [-1, 2**31 - 1], "src": [0, 9], "data": 4096}, b"name")
    assert len(data) == TENSOR_SIZE == 296
    assert [tensor_field(data, 0, "ne", i) for i in range(4)] == [3, 4, 5, 6]
    assert tensor_field(data, 0, "op_params", 0) == -1 and tensor_field(data, 0, "src", 1) == 9
    assert (tensor_field(data, 0, "buffer"), tensor_field(data, 0, "data")) == (2**64 - 1, 4096)
    assert pack_field("I", -1) == b"\xff" * 4 and pack_field("Q", 2**64 + 5) == pack_field("Q", 5)
    stream = Message(SET_TENSOR, data + b"\0" * 9).frame() + Message(ALLOC_BUFFER, b"\0" * 12).frame()
    assert [(m.cmd, len(m.payload)) for m in split_requests(stream + b"\x00\x05")] == [(SET_TENSOR, 305),
                                                                                       (ALLOC_BUFFER, 12)]


def test_recorded_sessions_carry_a_model(sessions) -> None:
    for s in sessions.values():
        assert s.indices(ALLOC_BUFFER) and s.indices(GRAPH_COMPUTE), s.name
        assert all(base for base, _ in s.bases), "every buffer's recorded base address is known"
        graph = s.requests[s.indices(GRAPH_COMPUTE)[0]]
        ops = {tensor_field(graph.payload, at, "op") for at in tensor_offsets(GRAPH_COMPUTE, graph.payload)}
        assert {29, 40, 48} <= ops  # MUL_MAT, GET_ROWS, ROPE: a real transformer's graph


def test_replay_puts_live_addresses_in(sessions) -> None:
    s = sessions["load-generate"]
    replay = Replay(0, sessions, 1.0)  # no connection: translation only
    replay.live = [[0x1000 * (k + 1), size, 0x100000 * (k + 1)] for k, (_, size) in enumerate(s.bases)]
    graph = s.requests[s.indices(GRAPH_COMPUTE)[0]]
    live = replay.translate(s, graph)
    moved = 0
    for at in tensor_offsets(GRAPH_COMPUTE, graph.payload):
        found = s.buffer_of(tensor_field(graph.payload, at, "data"))
        if found:
            k, offset = found
            assert tensor_field(live.payload, at, "data") == 0x100000 * (k + 1) + offset
            assert tensor_field(live.payload, at, "buffer") == 0x1000 * (k + 1)
            moved += 1
    assert moved > 100


def test_cases_are_deterministic_and_cover_every_class(sessions) -> None:
    cases = [generate_rpc_case(3, i, sessions) for i in range(400)]
    assert cases[:20] == [generate_rpc_case(3, i, sessions) for i in range(20)]
    classes = {m["cls"] for c in cases for m in c["mutations"]}
    assert set(ATTACKS) | {"replay", "field", "structure", "splice", "recompute"} <= classes


# a worker that answers HELLO and then ends by SIGSEGV at its first request; and one that never answers
_DYING_WORKER = r"""
import os, signal, socket, struct, sys
server = socket.create_server(("127.0.0.1", int(sys.argv[1])))
while True:
    conn, _ = server.accept()
    head = conn.recv(9)
    if len(head) < 9:
        continue  # the fuzzer's readiness probe
    conn.recv(struct.unpack_from("<Q", head, 1)[0])
    conn.sendall(struct.pack("<Q", 28) + bytes([7, 0, 0, 0]) + bytes(24))
    conn.recv(1)
    os.kill(os.getpid(), signal.SIGSEGV)
"""
_SILENT_WORKER = r"""
import socket, sys
server = socket.create_server(("127.0.0.1", int(sys.argv[1])))
held = [server.accept() for _ in range(100)]
"""


def test_a_dying_or_silent_worker_is_a_defect(sessions, tmp_path) -> None:
    case = known_crash_case()
    dying = {**case, "model_args": {"worker": [sys.executable, "-c", _DYING_WORKER, "{port}"]}}
    outcome = run_one(rpc_job(dying, tmp_path), timeout=30)
    assert (outcome.kind, outcome.signal, outcome.stage) == ("crash", "SIGSEGV", "check"), outcome
    assert outcome.is_defect and "rpc worker died by SIGSEGV" in outcome.stderr_tail

    silent = {**case, "model_args": {"worker": [sys.executable, "-c", _SILENT_WORKER, "{port}"],
                                     "reply_timeout": 0.5, "check_timeout": 1.0}}
    outcome = run_one(rpc_job(silent, tmp_path), timeout=6)
    assert (outcome.kind, outcome.stage) == ("hang", "check"), outcome


def test_known_crash_case_is_survived(sessions, tmp_path) -> None:
    # issue 33: a tensor 4096 bytes before its buffer was a GGML_ASSERT (SIGABRT) in the worker
    outcome = run_one(rpc_job(known_crash_case(), tmp_path), timeout=30)
    assert not outcome.is_defect, outcome.signature() + "\n" + "\n".join(outcome.stderr_tail)


def test_bounded_sample_has_no_defects(sessions, tmp_path, capsys) -> None:
    rc = fuzz_main(["--target", "rpc", "--cases", str(SAMPLE_CASES), "--seed", "5", "--jobs", "2", "--timeout", "30",
                    "--out", str(tmp_path), "--batch", "1000"])
    report = capsys.readouterr().out
    assert f"{SAMPLE_CASES} cases" in report
    assert rc == 0, "the RPC fuzz sample found defects:\n" + report + "\n" + (tmp_path / "findings.md").read_text()


def test_graph_counts_are_read_as_the_payload_holds_them() -> None:
    payload = struct.pack("<II", 0, 2) + struct.pack("<QQ", 1, 2) + struct.pack("<I", 1) + bytes(TENSOR_SIZE)
    assert tensor_offsets(GRAPH_COMPUTE, payload) == [28]
    assert tensor_offsets(GRAPH_COMPUTE, payload[:-1]) == []


def test_a_recorded_session_replays_whole_without_a_refusal(sessions) -> None:
    # what the worker refuses from a fuzz case must still include nothing a real client sends
    port = free_port()
    worker = subprocess.Popen([sys.executable, "-m", "pyllama90a.worker", "--port", str(port), "--threads", "2"],
                              stderr=subprocess.PIPE)
    try:
        wait_for_port(port, 60)
        for name, session in sessions.items():
            replay = Replay(port, sessions, 60.0)
            replay.connect()
            for m in range(len(session.requests)):
                replay.run({"op": "send", "s": name, "m": m})
            assert (replay.refused, len(replay.live)) == (0, len(session.bases)), name
            replay.close()
    finally:
        worker.kill()
        worker.wait()


def test_peers_without_the_secret_are_closed(sessions, tmp_path) -> None:
    # patch 0023: a worker with --secret-file answers no command of a peer that fails the challenge, and serves
    # the next client (which holds the secret: the check authenticates)
    secret = tmp_path / "secret"
    secret.write_text("fuzz-" + "0123456789abcdef" * 2 + "\n")
    secret.chmod(0o600)
    settings = {"secret_file": str(secret), "worker_args": ["--timeout", "1", "--idle-timeout", "1"]}
    for seed in range(6):
        ops = auth_peer(random.Random(seed))
        case = {"target": "rpc", "base": "two-layers", "model_args": settings,
                "mutations": [{"cls": "auth_peer", "ops": ops}]}
        outcome = run_one(rpc_job(case, tmp_path), timeout=30)
        assert not outcome.is_defect, outcome.signature() + "\n" + "\n".join(outcome.stderr_tail)


def test_a_lying_tensor_count_costs_nothing() -> None:
    # a mutated n_nodes moves where n_tensors is read: 2**32-1 there once made the fuzzer list 4 billion offsets
    payload = struct.pack("<II", 0, 1) + struct.pack("<Q", 1) + struct.pack("<I", 2**32 - 1) + bytes(TENSOR_SIZE)
    assert tensor_offsets(GRAPH_COMPUTE, payload) == [20]


# -- failures found before: each must leave the worker serving now ---------------------------------------

REPRODUCERS = sorted((Path(__file__).parents[1] / "data" / "fuzz-rpc").glob("*.json"))


@pytest.mark.parametrize("path", REPRODUCERS, ids=[p.stem for p in REPRODUCERS])
def test_known_reproducer_is_survived(path, sessions, tmp_path) -> None:
    spec = json.loads(path.read_text())
    outcome = run_one(rpc_job(spec, tmp_path), timeout=30)
    assert not outcome.is_defect, f"{spec['note']}; now: {outcome.signature()}\n" + "\n".join(outcome.stderr_tail)
