"""The fuzz harness (pyllama90a.fuzz): its mutator writes what it says, its runner classifies real outcomes,
and a bounded sample of mutated model files finds no crash, hang, memory blow-up or leaked exception.

test_bounded_sample_has_no_defects fails until every GGUF value that aborts llama.cpp today is turned into
a pyllama90a.errors exception (issue 9); its message lists each distinct failure with a minimal reproducer.
"""
from __future__ import annotations

import collections
import json
import math
import struct
from pathlib import Path

import pytest

import support.fuzz_probes as fuzz_probes
from pyllama90a.core.gguf.header import read_header
from pyllama90a.errors import ModelFormatError
from pyllama90a.fuzz.__main__ import main as fuzz_main
from pyllama90a.fuzz.bases import load_base
from pyllama90a.fuzz.campaign import Finding, Limits, shrink
from pyllama90a.fuzz.gguf_file import ARRAY, F32, STRING, U32
from pyllama90a.fuzz.gguf_generator import MUTATION_CLASSES, generate_case
from pyllama90a.fuzz.gguf_mutations import typed, write_case
from pyllama90a.fuzz.model_case import case_job
from pyllama90a.fuzz.runner import run_one

# with the real model's metadata: about a minute on 2 cores when nothing hangs. Seed 9's GGUF sample holds
# several tokenizer.ggml.model values that abort today (see tests/data/fuzz).
GGUF_SAMPLE_CASES, API_SAMPLE_CASES = 500, 40
UNTRUSTED_SAMPLE_CASES = 24  # hostile templates and constraint sizes (issue 18): about 40 s on 2 cores


def _mutation(*ops: dict) -> dict:
    return {"cls": "test", "ops": list(ops)}


def _write(tmp_path, *ops: dict, base: str = "tiny"):
    path = tmp_path / "case.gguf"
    write_case(load_base(base), [_mutation(*ops)], path)
    return path


def test_unmutated_base_is_written_byte_for_byte(tmp_path) -> None:
    base = load_base("tiny")
    path = _write(tmp_path)
    assert path.read_bytes() == base.data_path.read_bytes()


def test_value_mutations_parse_back(tmp_path) -> None:
    tokens = read_header(load_base("tiny").data_path).get("tokenizer.ggml.tokens")
    path = _write(tmp_path,
                  {"op": "set", "key": "llama.block_count", "value": typed(U32, 2**32 - 1)},
                  {"op": "set", "key": "llama.attention.layer_norm_rms_epsilon", "value": typed(F32, math.nan)},
                  {"op": "set", "key": "tokenizer.ggml.model", "value": typed(STRING, "bert")},
                  {"op": "set", "key": "general.name", "value": typed(STRING, {"hex": "fffe"})},
                  {"op": "set", "key": "llama.rope.freq_base", "value": typed(STRING, "500000")},
                  {"op": "set", "key": "llama.attention.head_count_kv", "value": typed(ARRAY, [2, 0, 2, 2], U32)},
                  {"op": "copy_item", "key": "tokenizer.ggml.tokens", "src": 1, "dst": 300},
                  {"op": "set_item", "key": "tokenizer.ggml.token_type", "index": 5, "value": -1},
                  {"op": "resize", "key": "tokenizer.ggml.scores", "length": 3},
                  {"op": "delete", "key": "llama.vocab_size"},
                  {"op": "set", "key": "llama.expert_count", "value": typed(U32, 8)})
    h = read_header(path)
    assert h.get("llama.block_count") == 2**32 - 1
    assert math.isnan(h.get("llama.attention.layer_norm_rms_epsilon"))
    assert h.get("tokenizer.ggml.model") == "bert"
    assert h.get("general.name") == "\ufffd\ufffd"  # not UTF-8: read_header replaces the bytes
    assert h.get("llama.rope.freq_base") == "500000"
    assert h.get("llama.attention.head_count_kv") == [2, 0, 2, 2]
    new_tokens = h.get("tokenizer.ggml.tokens")
    assert new_tokens[300] == tokens[1] == "<s>" and new_tokens[299] == tokens[299]
    assert h.get("tokenizer.ggml.token_type")[5] == -1
    assert h.get("tokenizer.ggml.scores") == [0.0, 0.0, 0.0]
    assert "llama.vocab_size" not in h.metadata
    assert h.get("llama.expert_count") == 8
    assert [t.name for t in h.tensors] == [t.name for t in read_header(load_base("tiny").data_path).tensors]


def test_structure_mutations(tmp_path) -> None:
    path = _write(tmp_path, {"op": "tensor", "name": "output_norm.weight", "field": "type", "value": 1},
                  {"op": "tensor", "name": "blk.0.attn_q.weight", "field": "name", "value": "blk.9.attn_q.weight"},
                  {"op": "drop_tensor", "name": "blk.3.ffn_up.weight"})
    infos = {t.name: t for t in read_header(path).tensors}
    assert infos["output_norm.weight"].type == 1 and "blk.9.attn_q.weight" in infos
    assert "blk.0.attn_q.weight" not in infos and "blk.3.ffn_up.weight" not in infos

    path = _write(tmp_path, {"op": "header", "field": "n_kv", "value": 7})
    with open(path, "rb") as f:
        assert struct.unpack("<4sIQQ", f.read(24))[3] == 7

    path = _write(tmp_path, {"op": "truncate", "of": "header", "fraction": 0.5})
    with pytest.raises(ModelFormatError, match="truncated"):
        read_header(path)

    original = load_base("tiny").data_path.read_bytes()
    path = _write(tmp_path, {"op": "flip", "at": 100, "xor": 0x41})
    flipped = path.read_bytes()
    assert flipped[100] == original[100] ^ 0x41 and flipped[:100] == original[:100]


def test_cases_are_deterministic_and_cover_every_class(tmp_path) -> None:
    bases = {"tiny": load_base("tiny")}
    cases = [generate_case(7, i, bases) for i in range(400)]
    assert cases == [generate_case(7, i, bases) for i in range(400)]
    assert cases != [generate_case(8, i, bases) for i in range(400)]
    assert {m["cls"] for c in cases for m in c["mutations"]} == set(MUTATION_CLASSES)
    assert collections.Counter(len(c["mutations"]) for c in cases).keys() == {1, 2, 3}
    for case in cases[:150]:  # every case is writable (what it contains is the loader's problem)
        write_case(bases["tiny"], case["mutations"], tmp_path / "c.gguf")


def test_real_header_base_keeps_the_real_metadata(model_path) -> None:
    real, mixed = read_header(model_path), load_base("real-header")
    assert mixed.get("tokenizer.chat_template").value.decode() == real.get("tokenizer.chat_template")
    assert len(mixed.get("tokenizer.ggml.merges").value) == len(real.get("tokenizer.ggml.merges"))
    assert mixed.get("llama.embedding_length").value < real.get("llama.embedding_length")


# -- the runner classifies what really happens in a child ----------------------------------------------

def test_runner_classifies_outcomes(tmp_path, model_path) -> None:
    # native threads (OpenMP's pool) have run in this process first, as in a test suite: a child forked from it
    # used to block in that runtime, and the good case below read as a hang at load
    import pyllama90a as pl

    with pl.Model(model_path, n_ctx=256, n_threads=2) as model:
        model.generate("Hello", max_tokens=4, temperature=0)

    ok = run_one(case_job({"base": "tiny", "mutations": []}, tmp_path / "ok.gguf"))
    assert (ok.kind, ok.stage) == ("ok", "close"), ok

    clean = run_one(case_job({"base": "tiny", "mutations": [_mutation({"op": "header", "field": "version",
                                                                        "value": 1})]}, tmp_path / "v1.gguf"))
    assert (clean.kind, clean.stage, clean.error_type) == ("clean", "load", "pyllama90a.errors.ModelFormatError")

    crash = run_one(fuzz_probes.native_abort)
    assert (crash.kind, crash.signal, crash.stage) == ("crash", "SIGABRT", "abort"), crash
    assert "GGML_ASSERT" in crash.message and "ggml.c:" in crash.message

    leaked = run_one(fuzz_probes.leak)
    assert (leaked.kind, leaked.error_type, leaked.stage) == ("leaked", "builtins.KeyError", "lookup")

    hang = run_one(fuzz_probes.sleep_long, timeout=1.0)
    assert (hang.kind, hang.stage) == ("hang", "sleeping")

    memory = run_one(fuzz_probes.grow, mem_limit_mb=512)
    assert (memory.kind, memory.stage) == ("memory", "allocating") and memory.peak_rss_mb > 512


def test_shrink_keeps_only_what_reproduces(tmp_path) -> None:
    harmless = _mutation({"op": "set", "key": "general.name", "value": typed(STRING, "renamed")})
    cause = _mutation({"op": "header", "field": "version", "value": 1})
    spec = {"base": "tiny", "mutations": [harmless, cause, harmless]}
    outcome = run_one(case_job(spec, tmp_path / "s.gguf"))
    finding = Finding(outcome.signature(), spec, outcome)
    shrink([finding], Limits(), tmp_path)
    assert finding.spec["mutations"] == [cause]


# -- failures found before: each must end cleanly now ------------------------------------------------------

REPRODUCERS = sorted((Path(__file__).parents[1] / "data" / "fuzz").glob("*.json"))


@pytest.mark.parametrize("path", REPRODUCERS, ids=[p.stem for p in REPRODUCERS])
def test_known_reproducer_ends_cleanly(path, tmp_path) -> None:
    spec = json.loads(path.read_text())
    outcome = run_one(case_job(spec, tmp_path / "case.gguf"))
    assert not outcome.is_defect, f"{spec['note']}; now: {outcome.signature()}\n" + "\n".join(outcome.stderr_tail)


# -- the bounded sample -----------------------------------------------------------------------------------

@pytest.mark.parametrize("target, n_cases, seed", [("gguf", GGUF_SAMPLE_CASES, 9), ("api", API_SAMPLE_CASES, 1),
                                                   ("untrusted", UNTRUSTED_SAMPLE_CASES, 1)])
def test_bounded_sample_has_no_defects(tmp_path, model_path, capsys, target: str, n_cases: int, seed: int) -> None:
    rc = fuzz_main(["--target", target, "--cases", str(n_cases), "--seed", str(seed), "--jobs", "2", "--timeout", "10",
                    "--out", str(tmp_path), "--real-model", "--batch", "1000"])
    report = capsys.readouterr().out
    assert (tmp_path / "results.jsonl").is_file() and (tmp_path / "findings.md").is_file()
    assert f"{n_cases} cases" in report
    assert rc == 0, "the fuzz sample found defects:\n" + report + "\n" + (tmp_path / "findings.md").read_text()
