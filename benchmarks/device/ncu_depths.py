"""Decode one step at each of several depths under ncu's capture range, in one process (the cache grows from
one depth to the next, so no depth is filled twice).

    ncu --profile-from-start off --kernel-name regex:'pyl_attn_decode|flash_attn_ext_vec|flash_attn_combine' ...
        python3 ncu_depths.py 8b-hd128 hybrid:q4_0/q4_0+fused 0 2048 8192 32768

One captured step per depth, after 4 warm-up steps that are then cut off again; ncu_summary.py splits the
captured kernels by depth (each depth's step launches the attention kernel once per layer).
"""
import sys

from cuda_capture import captured

import pyllama90a as pl
from pyllama90a.bench.depths import Mode
from pyllama90a.tools.synthetic import SHAPES, synthetic_model

shape, mode, depths = sys.argv[1], Mode.parse(sys.argv[2]), sorted(int(d) for d in sys.argv[3:])
n_warmup = 4
path = synthetic_model(shape)
n_vocab = SHAPES[shape].n_vocab
tokens = [1] + [259 + (i * 7919) % (n_vocab - 259) for i in range(max(depths) + n_warmup + 2)]
mode.apply_environment()
with pl.Model(path, ctk=mode.ctk, ctv=mode.ctv, flash_attn=mode.flash_attn, attention_paths=mode.attention_paths,
              n_ctx=max(depths) + n_warmup + 16, n_batch=2048) as m:
    for depth in depths:
        depth = max(depth, 1)
        if m.n_cached < depth:
            m.eval(tokens[m.n_cached:depth])
        for t in tokens[depth:depth + n_warmup]:
            m.eval([t])
        m.truncate(depth)
        with captured():
            m.eval([tokens[depth]])
        m.truncate(depth)
        print(f"{shape} {mode}: profiled depth {depth}", flush=True)
