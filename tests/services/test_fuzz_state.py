"""The fuzz runner's "state" target (pyllama90a/fuzz/state_cases.py): its cases cover every field and kind of
edit, its field map finds llama.cpp's fields in real files, a sealed mutant reaches llama.cpp, and a bounded
sample of mutated state and slot files ends in no crash, hang, memory blow-up or leaked exception."""
from __future__ import annotations

import struct

from pyllama90a.fuzz.__main__ import main as fuzz_main
from pyllama90a.fuzz.runner import run_one
from pyllama90a.fuzz.state_cases import BASES, FIELDS, PATH_KINDS, PROMPT, _File, generate_state_case, state_job

STATE_SAMPLE_CASES = 24  # about 40 s on 2 cores


def test_cases_are_deterministic_and_cover_every_field_and_base() -> None:
    cases = [generate_state_case(3, i) for i in range(600)]
    assert cases == [generate_state_case(3, i) for i in range(600)]
    classes = {m["cls"] for c in cases for m in c["mutations"]}
    assert {f"state:u32:{f}" for f in FIELDS} <= classes
    assert {f"state:path:{k}" for k in PATH_KINDS} <= classes
    assert {c["base"] for c in cases} == set(BASES)


def test_the_field_map_finds_llama_cpp_fields(model_path, tmp_path) -> None:
    import pyllama90a as pl

    with pl.Model(model_path, n_ctx=256, n_threads=2) as m:
        m.generate(PROMPT, max_tokens=4, temperature=0)
        m.save_state(tmp_path / "s")
        n_layer = int(m.metadata("llama.block_count"))
        file = _File((tmp_path / "s").read_bytes(), n_layer, sequence=False)
    words = {name: struct.unpack_from("<I", file.payload, at)[0] for name, at in file.fields.items()}
    assert words["arch_len"] == 5 and file.payload[4:9] == b"llama" and words["n_stream"] == 1
    assert words["cell_count"] == len(file.tokens) // 4 and words["n_seq_id"] == 1 and words["n_layer"] == n_layer


def test_an_architecture_length_reaching_llama_cpp_ends_cleanly(tmp_path) -> None:
    # the mutant of issue 33, item 10, sealed: before the payload's pre-check it went over 1.5 GB of memory
    spec = {"target": "state", "base": "model-state", "mutations": [
        {"cls": "state:u32:arch_len", "ops": [{"op": "state_u32", "field": "arch_len", "value": 0xFFFFFFFF}]}]}
    outcome = run_one(state_job(spec, tmp_path / "case"), timeout=120, mem_limit_mb=1500)
    assert outcome.kind == "clean" and "names an architecture of" in outcome.message, outcome.signature()


def test_bounded_sample_has_no_defects(tmp_path, model_path, capsys) -> None:
    rc = fuzz_main(["--target", "state", "--cases", str(STATE_SAMPLE_CASES), "--seed", "5", "--jobs", "2",
                    "--timeout", "60", "--mem-limit-mb", "1500", "--out", str(tmp_path), "--batch", "1000"])
    report = capsys.readouterr().out
    assert f"{STATE_SAMPLE_CASES} cases" in report
    assert rc == 0, "the fuzz sample found defects:\n" + report + "\n" + (tmp_path / "findings.md").read_text()
