"""benchmarks/hip/sass_phases.py --stalls: ncu's source page of one launch summed by the kernel's tile phases.

The page (gpu_decode.sh's ncu_source stage) lists every SASS instruction under the innermost source line it came
from, an inlined helper's line included, and repeats an instruction under each of them; sass_phases maps each
instruction to its phase through the outermost kernel line of its own compile instead, matched by offset and
opcode. A small page and listing written here (no GPU, no nvcc) check the matching, the sums and the refusals.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from support.repo_scripts import script_module

sass_phases = script_module("sass_phases", Path("benchmarks") / "hip")

FUNCTION = "_Z17k_pyl_attn_decodeIL9ggml_type2ELi128ELi4ELb0EEvPKcS2_"
PAGE_NAME = "void k_pyl_attn_decode<(ggml_type)2, (int)128, (int)4, (bool)0>(const char *, const char *)"
STARTS = [(1, "before the tiles"), (10, "K/V copies"), (20, "K^T q"), (30, "softmax"), (40, "V^T p"),
          (50, "epilogue")]
# (instruction, outermost kernel line): one before the tiles, two copies, one V^T p instruction
CODE = [("LDC R1, c[0x0][0x28]", 2), ("@!P0 LDGSTS.E [R40], desc[UR12][R24.64]", 11), ("BRA `(.L_x_1)", 12),
        ("HFMA2 R39, R47, R49.H0_H0, R39", 41)]
REASONS = ["stall_barrier", "stall_long_sb", "stall_selected", "stall_wait"]


def listing(code: list[tuple[str, int]], function: str = FUNCTION) -> str:
    """nvdisasm -c -gi's form: a function's section, each instruction after the //## line naming its lines."""
    lines = [f".text.{function}:"]
    for i, (text, line) in enumerate(code):
        lines.append(f'        //## File "k.cuh", line {line + 500} inlined at "k.cuh", line {line}')
        lines.append(f"        /*{16 * i:04x}*/                   {text} ;")
    return "\n".join(lines) + "\n"


def page(tmp_path: Path, samples: list[tuple[str, int, int, dict[str, int]]], name: str = PAGE_NAME) -> Path:
    """ncu's CSV source page: instructions (SASS, samples, executed, stall counts) at runtime addresses, under
    source lines of two files, the second instruction repeated under an inlined line."""
    header = ["Line No", "Source", "Address", "Source", "Warp Stall Sampling (All Samples)",
              "Warp Stall Sampling (Not-issued Samples)", "Instructions Executed", *REASONS,
              *(f"{r} (Not Issued)" for r in REASONS)]
    base = 0x7FAE2FE41100

    def row(i: int) -> str:
        text, total, executed, stalls = samples[i]
        cells = ["", "", hex(base + 16 * i), f"      {text}", str(total), "0", str(executed),
                 *(str(stalls.get(r, 0)) for r in REASONS), *("0" for _ in REASONS)]
        return ",".join(f'"{c}"' for c in cells)

    out = ['"File Path","/src/common.cuh"', f'"Function Name","{name}"', ",".join(f'"{h}"' for h in header),
           '"135","a helper line","-","-","9","0","9"', row(1), row(2),
           '"File Path","/src/pyl-attn-decode-impl.cuh"', ",".join(f'"{h}"' for h in header),
           row(3), row(0), row(1)]
    path = tmp_path / "ncu-source.csv"
    path.write_text("\n".join(out) + "\n")
    return path


SAMPLES = [("LDC R1, c[0x0][0x28]", 2, 100, {"stall_wait": 2}),
           ("@!P0 LDGSTS.E [R40], desc[UR12][R24.64]", 30, 400, {"stall_long_sb": 20, "stall_selected": 10}),
           ("@P0 BRA 0x7fae2fe45230", 10, 400, {"stall_long_sb": 6, "stall_barrier": 4}),
           ("HFMA2 R39, R47, R49.H0_H0, R39", 58, 1600, {"stall_selected": 40, "stall_wait": 18})]


def test_the_samples_are_summed_by_the_phase_of_each_instruction_s_outermost_line(tmp_path: Path) -> None:
    table = sass_phases.stall_table(page(tmp_path, SAMPLES), listing(CODE), STARTS)
    rows = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines()[3:]}
    assert table.splitlines()[0] == "void k_pyl_attn_decode<(ggml_type)2, (int)128, (int)4, (bool)0>: 100 samples"
    # the copies: two instructions, the LDGSTS counted once though the page lists it under two lines
    assert rows["K/V copies"] == "| K/V copies | 40 | 40.0 % | 800 | long_sb 65 %, selected 25 %, barrier 10 % |"
    assert rows["V^T p"].startswith("| V^T p | 58 | 58.0 % | 1600 | selected 69 %, wait 31 %")
    assert rows["before the tiles"].startswith("| before the tiles | 2 | 2.0 % | 100 | wait 100 %")
    assert "K^T q" not in rows and "softmax" not in rows  # no instruction of theirs in this listing


def test_a_page_of_other_code_is_refused(tmp_path: Path) -> None:
    other = [*SAMPLES[:3], ("FFMA R39, R47, R49, R39", 58, 1600, {})]
    with pytest.raises(SystemExit, match=r"instruction 3 is FFMA .* on the page, HFMA2"):
        sass_phases.stall_table(page(tmp_path, other), listing(CODE), STARTS)
    with pytest.raises(SystemExit, match="the page has 4 instructions, this compile 3"):
        sass_phases.stall_table(page(tmp_path, SAMPLES), listing(CODE[:3]), STARTS)


def test_the_page_s_instance_must_be_one_of_the_compiled_functions(tmp_path: Path) -> None:
    vec16 = PAGE_NAME.replace("(bool)0", "(bool)1")
    with pytest.raises(SystemExit, match=r"0 compiled functions match .*Lb1E"):
        sass_phases.stall_table(page(tmp_path, SAMPLES, vec16), listing(CODE), STARTS)
    with pytest.raises(SystemExit, match="not an instance of k_pyl_attn_decode"):
        sass_phases.stall_table(page(tmp_path, SAMPLES, "void other_kernel<(int)1>(int)"), listing(CODE), STARTS)
