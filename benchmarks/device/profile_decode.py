"""Decode at depth under a GPU profiler: fill the cache, then decode with the profiler's capture range on.

    ncu --profile-from-start off --metrics gpu__time_duration.sum --csv \
        python3 profile_decode.py 8b-hd128 hybrid:q4_0/q4_0+fused 32768 [N_PROFILED]

MODE is a bench mode (pyllama90a.bench.depths.Mode: fa-on:f16/f16, hybrid:q4_0/q4_0+fused, ...). N_PROFILED one-token
steps (default 56) run inside the capture range, after 8 warm-up steps.
"""
import ctypes
import ctypes.util
import sys
import time

import pyllama90a as pl
from pyllama90a.bench.depths import Mode
from pyllama90a.tools.synthetic import SHAPES, synthetic_model

shape, mode, depth = sys.argv[1], Mode.parse(sys.argv[2]), int(sys.argv[3])
n_profiled = int(sys.argv[4]) if len(sys.argv) > 4 else 56
n_warmup = 8
path = synthetic_model(shape)
n_vocab = SHAPES[shape].n_vocab
tokens = [1] + [259 + (i * 7919) % (n_vocab - 259) for i in range(depth + n_warmup + n_profiled)]
cudart = ctypes.CDLL(ctypes.util.find_library("cudart") or "libcudart.so")
mode.apply_environment()
with pl.Model(path, ctk=mode.ctk, ctv=mode.ctv, flash_attn=mode.flash_attn, attention_paths=mode.attention_paths,
              n_ctx=depth + n_warmup + n_profiled + 16, n_batch=2048) as m:
    m.eval(tokens[:max(depth, 1)])
    for t in tokens[depth:depth + n_warmup]:
        m.eval([t])
    cudart.cudaProfilerStart()
    start = time.perf_counter()
    for t in tokens[depth + n_warmup:]:
        m.eval([t])
    elapsed = time.perf_counter() - start
    cudart.cudaProfilerStop()
print(f"{shape} {mode} depth {depth}: {n_profiled / elapsed:.1f} tok/s")
