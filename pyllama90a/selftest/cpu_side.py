"""The CPU side of the self-test (the references and the CPU's own paths), in a process that sees no GPU.

Why a separate process: with a GPU present, llama.cpp offloads the large-batch ops of a model kept on the CPU to
the GPU (op offload), so a "CPU reference" computed beside the GPU would be partly a GPU computation (seen on the
H200: its prefill logits matched the GPU's bit for bit). Hiding the GPUs from the child makes it the CPU alone.

    python -m pyllama90a.selftest.cpu_side OUT_DIR SHAPE... --noise-factor F   (run by the self-test)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path

import numpy as np

from .paths import NOISE_FACTOR, PathResult, References, check_device, kv_pairs_of, reference_logits

HIDE_GPUS = {"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": "", "ROCR_VISIBLE_DEVICES": ""}


def run_cpu_side(shapes: tuple[str, ...], modes: tuple[tuple[str, str], ...],
                 reference_modes: tuple[tuple[str, str], ...],
                 noise_factor: float) -> tuple[References, list[PathResult]]:
    """(references for `reference_modes`' K/V pairs, results of the CPU's own `modes`), from a child process."""
    with tempfile.TemporaryDirectory() as tmp:
        request = {"shapes": shapes, "modes": modes, "reference_modes": reference_modes, "noise_factor": noise_factor}
        Path(tmp, "request.json").write_text(json.dumps(request))
        subprocess.run([sys.executable, "-m", "pyllama90a.selftest.cpu_side", tmp], env={**os.environ, **HIDE_GPUS},
                       check=True)
        with np.load(Path(tmp, "references.npz")) as arrays:
            refs: References = {}
            for key in {k.rsplit("|", 1)[0] for k in arrays.files}:
                refs[tuple(key.split("|"))] = (arrays[key + "|prefill"], arrays[key + "|decode"])  # type: ignore[index]
        results = [PathResult(**r) for r in json.loads(Path(tmp, "results.json").read_text())]
    return refs, results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pyllama90a.selftest.cpu_side")
    parser.add_argument("dir", type=Path, help="holds request.json; references.npz and results.json are written there")
    out = parser.parse_args(argv).dir
    request = json.loads((out / "request.json").read_text())
    shapes = tuple(request["shapes"])
    modes = tuple(tuple(m) for m in request["modes"])
    reference_modes = tuple(tuple(m) for m in request["reference_modes"])
    refs = reference_logits(shapes, kv_pairs_of(modes) | kv_pairs_of(reference_modes))
    results = check_device("CPU", 0, modes, refs, shapes, request.get("noise_factor", NOISE_FACTOR), sys.stderr)
    arrays = {}
    for key, (prefill, decode) in refs.items():
        arrays["|".join(key) + "|prefill"], arrays["|".join(key) + "|decode"] = prefill, decode
    # numpy's stub puts `allow_pickle: bool` beside **kwds, and mypy checks a **dict against both
    np.savez(out / "references.npz", **arrays)  # type: ignore[arg-type]
    (out / "results.json").write_text(json.dumps([asdict(r) for r in results]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
