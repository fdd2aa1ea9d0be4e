#!/usr/bin/env python3
"""Generate the CK fmha forward instances this project compiles, with CK's own codegen (generate.py).

usage: ck_fmha_codegen.py <ck root> <output dir>
Writes the instance sources and fmha_fwd_api.cpp (CK's dispatcher over them) into <output dir>, plus
sources.txt (one absolute path a line, for CMake). Prints the number of sources.

The instance set is the smallest that serves llama.cpp's FLASH_ATTN_EXT: fp16, batch mode (one
sequence tile per ubatch), row-major V, head dims 64 and 128, no LSE/dropout/softcap output, with
and without an elementwise bias (ggml's KQ mask), with and without CK's own causal mask. Each
combination comes as a tile-aligned and an all-padding kernel; fmha_fwd_api.cpp picks one at run
time from the sequence lengths.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HEAD_DIMS = (64, 128)
# receipt 4 ("PyTorch integration"): fp16/bf16, batch mode, row-major V, no/elementwise bias (no
# ALiBi), no softcap, no skip; the filter then keeps fp16 without LSE and dropout outputs
RECEIPT = 4
KERNEL_FILTER = "*_fp16_batch_*_nlse_ndropout_*"
# simplified masks: one "no mask" and one "some mask" instance per combination; causal is the latter
MASK_IMPL = "simplified"
LIST_FILE = "sources.txt"


def generate_py(ck_root: Path) -> Path:
    return ck_root / "example" / "ck_tile" / "01_fmha" / "generate.py"


def codegen_args(ck_root: Path) -> list[str]:
    # -B: the CK tree is a shared cache, the codegen must not write bytecode into it
    return [sys.executable, "-B", str(generate_py(ck_root)), "--api", "fwd", "--receipt", str(RECEIPT),
            "--filter", KERNEL_FILTER, "--optdim", ",".join(map(str, HEAD_DIMS)), "--mask", MASK_IMPL]


def generate(ck_root: Path, out_dir: Path) -> list[Path]:
    """Run CK's codegen: list the blobs, write them, and check both agree."""
    out_dir.mkdir(parents=True, exist_ok=True)
    listed_file = out_dir / "generate-list.txt"
    cwd = generate_py(ck_root).parent  # generate.py imports its codegen package from its own folder
    subprocess.run(codegen_args(ck_root) + ["--list_blobs", str(listed_file)], cwd=cwd, check=True)
    subprocess.run(codegen_args(ck_root) + ["--output_dir", str(out_dir)], cwd=cwd, check=True)
    listed = [Path(line) for line in listed_file.read_text().split() if line]
    missing = [p for p in listed if not p.is_file()]
    if not listed or missing:
        raise RuntimeError(f"CK's codegen listed {len(listed)} sources, {len(missing)} not written: {missing[:3]}")
    sources = sorted(p.resolve() for p in listed)
    (out_dir / LIST_FILE).write_text("".join(f"{p}\n" for p in sources))
    return sources


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    sources = generate(Path(argv[1]), Path(argv[2]))
    print(len(sources))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
