"""The benchmark tool end to end on a tiny random-weight model (speed is not asserted: benchmarks prove it)."""
from __future__ import annotations

import gc
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyllama90a.bench import depths
from pyllama90a.bench.__main__ import main
from pyllama90a.bench.batched import attention_path
from pyllama90a.bench.depths import VARIANT_ENV, Mode
from pyllama90a.core.model.model import Model
from pyllama90a.tools.synthetic import synthetic_model
from support.mappings import mappings_of, needs_proc_maps


def test_mode_parsing() -> None:
    m = Mode.parse("fa-off:q4_0/q8_0+deq")
    assert (m.flash_attn, m.ctk, m.ctv, m.variant, str(m)) == ("off", "q4_0", "q8_0", "deq", "fa-off:q4_0/q8_0+deq")
    for bad in ("fa-maybe:f16/f16", "fa-off:f16", "fa-off:f16/q9", "fa-off:f16/f16+fast"):
        with pytest.raises(ValueError):
            Mode.parse(bad)


@pytest.mark.parametrize("variant, off", [("deq", ["vquant_direct"]), ("ungrouped", ["kq_grouped"]),
                                          ("mmq", ["kv_cublas"]), ("nock", ["ck_fa"]), ("norot", []), ("", []),
                                          ("fused", [])])
def test_variant_switches_only_its_path(variant: str, off: list[str]) -> None:
    mode = Mode.parse("fa-off:q4_0/q4_0" + (f"+{variant}" if variant else ""))
    assert mode.attention_paths.off() == off
    assert mode.attention_paths.fused_decode == (variant == "fused")  # the one opt-in path


def test_norot_sets_only_upstreams_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    (name, value), = VARIANT_ENV.values()
    monkeypatch.setenv(name, "stale")
    Mode.parse("fa-off:q4_0/q4_0+norot").apply_environment()
    assert os.environ[name] == value
    Mode.parse("fa-off:q4_0/q4_0+deq").apply_environment()
    assert name not in os.environ


def test_bench_writes_json_and_markdown_with_ratios(tmp_path: Path) -> None:
    assert main(["--synthetic", "tiny", "--depths", "0", "40", "--pp", "8", "--tg", "3", "--reps", "2",
                 "--modes", "fa-off:f16/f16", "fa-off:q4_0/q4_0", "fa-off:q4_0/q4_0+deq", "--threads", "2",
                 "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "bench.json").read_text())
    assert result["baseline"] == "fa-off:f16/f16"
    kinds = {(r["mode"], r["depth"], r["kind"]) for r in result["rows"]}
    for mode in result["modes"]:
        for depth in (0, 40):
            assert {(mode, depth, "pp"), (mode, depth, "tg")} <= kinds
    assert ("fa-off:f16/f16", 40, "gen") in kinds  # Model.generate vs the raw loop, baseline mode only
    for r in result["rows"]:
        assert len(r["samples"]) == 2 and r["tok_s_mean"] > 0 and r["ratio_vs_baseline"] > 0
        assert r["compute_buffer_bytes"] > 0
    q4 = next(r for r in result["rows"] if r["mode"] == "fa-off:q4_0/q4_0")
    f16 = next(r for r in result["rows"] if r["mode"] == "fa-off:f16/f16")
    assert q4["kv_v_bytes"] * 64 == f16["kv_v_bytes"] * 18
    table = (tmp_path / "bench.md").read_text()
    assert "| fa-off:q4_0/q4_0+deq | 40 | tg3 |" in table
    # each decode row's bytes: the weights plus K and V of every cached cell and its own
    assert result["copy_bandwidth_device"] == "CPU" and result["copy_bandwidth_bytes_s"] > 1e9
    tg = {(r["mode"], r["depth"]): r for r in result["rows"] if r["kind"] == "tg"}
    for (mode, depth), r in tg.items():
        per_cell = (r["kv_k_bytes"] + r["kv_v_bytes"]) / r["kv_cells"]
        assert r["bytes_per_token"] - tg[mode, 0]["bytes_per_token"] == int(per_cell * (depth + 1)) - int(per_cell)
        assert r["bandwidth_fraction"] == pytest.approx(
            r["tok_s_mean"] * r["bytes_per_token"] / result["copy_bandwidth_bytes_s"])
    assert all(r["bytes_per_token"] is None for r in result["rows"] if r["kind"] == "pp")


class _MappingsAtEachLine(io.StringIO):
    """The bench's progress stream, noting how many times the process maps the model file at each line."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path, self.counts = path, []

    def write(self, text: str) -> int:
        self.counts.append(mappings_of(self.path))
        return super().write(text)


@needs_proc_maps
def test_the_depth_bench_loads_the_weights_once_for_all_its_modes() -> None:
    # llama.cpp maps a model's file once per load: a load per mode put calibrate's 22 modes of an 8B model past
    # an 80 GB GPU
    path = synthetic_model("tiny")
    gc.collect()
    progress = _MappingsAtEachLine(path)
    progress.write("")
    with Model(path, n_ctx=64, n_threads=2, n_gpu_layers=0):
        progress.write("")
    before, one_load = progress.counts[0], progress.counts[1] - progress.counts[0]
    modes = [Mode.parse(m) for m in ("fa-off:f16/f16", "fa-on:q8_0/q8_0", "hybrid:q4_0/q4_0")]
    result = depths.run(path, modes, [0, 16], pp=8, tg=2, reps=1, n_threads=2, n_gpu_layers=0, overhead=False,
                        progress=progress)
    assert {r["mode"] for r in result["rows"]} == {str(m) for m in modes}
    assert one_load > 0 and max(progress.counts[2:]) == before + one_load


def test_weight_bytes_per_token_leave_out_the_embedding_only_when_an_output_matrix_exists() -> None:
    from gguf import GGUFReader

    from pyllama90a.bench.roofline import weight_bytes_per_token

    path = synthetic_model("tiny")
    sizes = {t.name: int(t.n_bytes) for t in GGUFReader(path).tensors}  # gguf's own reader, not ours
    expected = sum(sizes.values()) - (sizes["token_embd.weight"] if "output.weight" in sizes else 0)
    assert weight_bytes_per_token(path) == expected


def test_memory_only_report(tmp_path: Path) -> None:
    assert main(["--synthetic", "tiny", "--memory-only", "1024", "--modes", "fa-off:f16/f16", "fa-off:q4_0/q4_0",
                 "--out", str(tmp_path)]) == 0
    table = (tmp_path / "memory-1024.md").read_text()
    assert "| fa-off:q4_0/q4_0 |" in table and "0.281x" in table


def test_batched_bench_decodes_n_sequences_together_and_reports_memory(tmp_path: Path, model_path) -> None:
    modes = ["fa-off:f16/f16", "fa-off:q4_0/q4_0"]
    assert main(["batched", "--model", str(model_path), "--n-seq", "1", "3", "--depths", "40", "--tg", "2",
                 "--reps", "2", "--modes", *modes, "--threads", "2", "--kv-budget-gb", "0.1", "--budget-depth", "300",
                 "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "batched.json").read_text())
    rows = {(r["mode"], r["n_seq"]): r for r in result["rows"]}
    assert set(rows) == {(m, n) for m in modes for n in (1, 3)}
    for (mode, n), r in rows.items():
        assert r["depth"] == 40 and len(r["samples"]) == 2 and r["aggregate_tok_s"] > 0
        assert r["per_sequence_tok_s"] == pytest.approx(r["aggregate_tok_s"] / n)
        assert r["path"] == "non-flash" and r["compute_bytes"] > 0
        # a KV stream of 256 cells (40 + 2 + 1 rounded up) per sequence
        assert r["kv_bytes"] == n * rows[mode, 1]["kv_bytes"]
    assert rows["fa-off:q4_0/q4_0", 3]["kv_bytes"] * 64 == rows["fa-off:f16/f16", 3]["kv_bytes"] * 18
    assert rows["fa-off:f16/f16", 3]["ratio_vs_baseline"] == pytest.approx(1.0)
    # the largest N whose KV at depth 300 (512 cells) fits 100 MB, from one sequence's planned bytes
    budget = {b["mode"]: b for b in result["budget"]}
    for b in budget.values():
        assert b["n_seq_fit"] == int(1e8 // b["kv_bytes_per_sequence"]) and b["n_seq"] == min(b["n_seq_fit"], 256)
    assert budget["fa-off:q4_0/q4_0"]["n_seq_fit"] > 3 * budget["fa-off:f16/f16"]["n_seq_fit"] > 0
    assert budget["fa-off:f16/f16"]["kv_bytes_per_sequence"] == 2 * rows["fa-off:f16/f16", 1]["kv_bytes"]
    assert "| fa-off:q4_0/q4_0 | 40 | 3 |" in (tmp_path / "batched.md").read_text()


def test_batched_bench_names_the_tensor_core_kernel_for_several_f16_streams_under_fa() -> None:
    """fattn.cu (compute capability >= 8.9) runs its vector kernel over f16 with GQA for one stream only; N > 1
    f16 streams of a GQA model take flash_attn_ext_f16 (ncu, benchmarks/results/h200-8b-hd128-batched/). The label
    said "vector kernel" at every N."""
    f16, q4_0 = Mode.parse("fa-on:f16/f16"), Mode.parse("fa-on:q4_0/q4_0")
    vector, tensor_cores = "flash attention (vector kernel on CUDA)", "flash attention (tensor-core kernel on CUDA)"
    assert attention_path(f16, True, 1, 4) == vector
    assert attention_path(f16, True, 8, 4) == tensor_cores
    assert attention_path(f16, True, 8, 1) == vector  # no GQA: fattn.cu's vector kernel at any N
    assert "by depth" in attention_path(f16, True, 1, 8)
    assert attention_path(q4_0, True, 32, 4) == vector
    assert attention_path(Mode.parse("fa-on:f16/q8_0"), True, 8, 4) == vector
    assert attention_path(f16, False, 8, 4) == "flash attention"
    hybrid = Mode.parse("hybrid:q4_0/q4_0+fused")
    assert attention_path(hybrid, True, 32, 4) == "fused decode kernel, N streams in one launch"


def test_batched_bench_measures_each_mode_at_its_own_budget_n(tmp_path: Path) -> None:
    # equal KV memory: a budget of 2.5 f16 sequences holds 2 of f16 and 8 of q4_0 (18/64 the bytes); each is decoded
    # at its own N and compared with the baseline at its own
    modes = ["fa-off:f16/f16", "fa-off:q4_0/q4_0"]
    common = ["batched", "--synthetic", "tiny", "--n-seq", "1", "--depths", "40", "--budget-depth", "40", "--tg", "2",
              "--reps", "2", "--threads", "2", "--modes", *modes]
    assert main([*common, "--kv-budget-gb", "1", "--plan-only", "--out", str(tmp_path / "plan")]) == 0
    plan = json.loads((tmp_path / "plan" / "batched.json").read_text())
    (f16_one,) = [b["kv_bytes_per_sequence"] for b in plan["budget"] if b["mode"] == modes[0]]
    assert main([*common, "--kv-budget-gb", str(2.5 * f16_one / 1e9), "--measure-budget", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "batched.json").read_text())
    budget = {b["mode"]: b for b in result["budget"]}
    assert budget[modes[0]]["n_seq"] == 2 and budget[modes[1]]["n_seq"] == 8
    measured = {(r["mode"], r["n_seq"]): r["aggregate_tok_s"] for r in result["rows"]}
    for mode, b in budget.items():
        assert b["aggregate_tok_s"] == measured[mode, b["n_seq"]] > 0
    assert budget[modes[0]]["ratio_vs_baseline"] == pytest.approx(1.0)
    ratio = measured[modes[1], 8] / measured[modes[0], 2]
    assert budget[modes[1]]["ratio_vs_baseline"] == pytest.approx(ratio)
    assert f"| {modes[1]} | 40 | {2.5 * f16_one / 1e9:g} |" in (tmp_path / "batched.md").read_text()
    assert f"| 8 | 8 | {measured[modes[1], 8]:.1f} | {ratio:.2f}x |" in (tmp_path / "batched.md").read_text()


def test_batched_bench_skips_what_does_not_fit_the_memory_limit(tmp_path: Path) -> None:
    assert main(["batched", "--synthetic", "tiny", "--n-seq", "2", "--depths", "0", "--tg", "1", "--reps", "1",
                 "--modes", "fa-off:f16/f16", "--memory-limit-gib", "0.0001", "--out", str(tmp_path)]) == 0
    (row,) = json.loads((tmp_path / "batched.json").read_text())["rows"]
    assert row["skipped"] == "does not fit" and row["planned_bytes"] > 0.0001 * 2**30
    assert "exceed 0.0 GiB (--memory-limit-gib) is skipped" in (tmp_path / "batched.md").read_text()


def test_batched_bench_limits_itself_to_the_gpus_free_memory_unless_told(tmp_path: Path) -> None:
    """Without --memory-limit-gib a GPU's free memory bounds what is tried (the H200's 100 GB of KV on an H100
    failed to allocate and ended the bench, 2026-12-07); the CPU has no limit."""
    from pyllama90a.bench.batched import default_memory_limit
    from pyllama90a.native.devices import device_memory, local_offload_devices

    gpus = local_offload_devices()
    limit = default_memory_limit(-1)
    if gpus:
        assert 0 < limit <= sum(device_memory(d)[1] for d in gpus)
    else:
        assert limit is None
    assert default_memory_limit(0) is None  # no layers on a GPU: nothing of the plan is the GPU's
    assert main(["batched", "--synthetic", "tiny", "--n-seq", "1", "--depths", "0", "--modes", "fa-off:f16/f16",
                 "--plan-only", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "batched.json").read_text())
    assert result["memory_limit_bytes"] == (pytest.approx(limit, rel=0.05) if gpus else None)
    assert ("the GPUs' free memory less 1 GiB each" if gpus else "No memory limit: every N is tried.") in (
        tmp_path / "batched.md").read_text()


def test_batched_bench_plan_only_decodes_nothing(tmp_path: Path) -> None:
    # 32 sequences: more than the default n_ctx (4096) holds at 256 cells each, which MemoryPlanner once refused
    assert main(["batched", "--synthetic", "tiny", "--n-seq", "1", "32", "--depths", "100", "--modes", "fa-off:f16/f16",
                 "--memory-limit-gib", "1", "--plan-only", "--out", str(tmp_path)]) == 0
    rows = json.loads((tmp_path / "batched.json").read_text())["rows"]
    assert [(r["n_seq"], r["planned"]) for r in rows] == [(1, "fits"), (32, "fits")]
    assert not any("aggregate_tok_s" in r for r in rows) and rows[1]["kv_bytes"] == 32 * rows[0]["kv_bytes"]


def test_bench_rejects_bad_arguments() -> None:
    out = subprocess.run([sys.executable, "-m", "pyllama90a.bench", "--reps", "0", "--synthetic", "tiny"],
                         capture_output=True, text=True, cwd="/", timeout=120)
    assert out.returncode == 2 and "--reps" in out.stderr


def test_server_load_bench_runs_and_reports(tmp_path: Path, model_path) -> None:
    assert main(["server", "--model", str(model_path), "--clients", "1", "2", "--max-tokens", "6", "--reps", "2",
                 "--n-ctx", "1024", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "server.json").read_text())
    rows = {(r["server"], r["clients"]): r for r in result["rows"]}
    assert set(rows) == {("pyllama90a", 1), ("pyllama90a", 2)}
    for r in rows.values():
        assert r["tok_s"] > 0 and 0 < r["ttft_p50_ms"] <= r["ttft_p95_ms"]
    one, two = rows[("pyllama90a", 1)], rows[("pyllama90a", 2)]
    assert two["vs_one_client"] == pytest.approx(two["tok_s"] / one["tok_s"])  # the 2-client row against the 1
    assert "| pyllama90a | 2 |" in (tmp_path / "server.md").read_text()


def test_server_load_bench_rejects_bad_arguments(tmp_path: Path) -> None:
    for bad in (["--clients", "0"], ["--max-tokens", "4000", "--n-ctx", "4096"],
                ["--llama-server", str(tmp_path / "missing")]):
        with pytest.raises(SystemExit) as e:
            main(["server", *bad])
        assert e.value.code == 2


def test_constrained_bench_runs_both_modes(tmp_path, model_path) -> None:
    from pyllama90a.bench.constrained import main as constrained_main

    assert constrained_main(["--model", str(model_path), "--parallel", "2", "--tokens", "4", "--reps", "1",
                             "--threads", "2", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "constrained.json").read_text())
    assert len(result["free"]) == 1 and len(result["json_schema"]) == 1
    assert min(result["free"] + result["json_schema"]) > 0


def test_prompt_cache_bench_reports_each_setting(tmp_path: Path, model_path) -> None:
    assert main(["prompt-cache", "--model", str(model_path), "--system-tokens", "150", "--rounds", "1",
                 "--n-ctx-slot", "512", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "prompt-cache.json").read_text())
    rows = {r["setting"]: r for r in result["rows"]}
    assert set(rows) == {"no reuse", "RAM cache", "slot reuse"}
    assert rows["no reuse"]["cached_tokens"][0] < 16 and rows["no reuse"]["speedup"] == 1.0
    for name in ("RAM cache", "slot reuse"):  # the system prompt came from a cache: only the question decoded
        assert 150 <= rows[name]["cached_tokens"][0] < result["prompt_tokens"] - 5
    assert rows["RAM cache"]["ram_entries"] >= 1 and "| slot reuse | 2 |" in (tmp_path / "prompt-cache.md").read_text()


def test_prompt_cache_bench_rejects_bad_arguments() -> None:
    for bad in (["--rounds", "0"], ["--system-tokens", "4000", "--n-ctx-slot", "4096"]):
        with pytest.raises(SystemExit) as e:
            main(["prompt-cache", *bad])
        assert e.value.code == 2
