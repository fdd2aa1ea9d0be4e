"""N sequences at depth D (a KV stream each) decoding one step together under ncu's capture range, for each N, in
one process: bench batched's context (sequence 0 filled by prefill, its cells copied to the others) and its decode
step, so that the profiled step is the one `python -m pyllama90a.bench batched` times.

    ncu --profile-from-start off --kernel-name regex:'pyl_attn_decode|flash_attn_' ... \\
        python3 ncu_batched.py 8b-hd128 hybrid:q4_0/q4_0+fused 8192 1 8 32

One context of the largest N; per N (in increasing order) 4 warm-up steps, then one captured step (each cut back
to D). ncu_summary.py splits the captured kernels by N (a step launches the attention kernel once per layer). With
N > 1 streams FA-on over f16 takes the MMA kernel (flash_attn_mask_to_KV_max, flash_attn_ext_f16, a stream-k
fixup), not the vector kernel (fattn.cu's rule wants Q->ne[3] == 1): hence the whole `flash_attn_` family. Without
CUDA's runtime (a CPU build) there is no capture range: the steps run alone, as a quick check.
"""
import sys

from cuda_capture import captured

from pyllama90a.bench.batched import decode_steps, filled_context
from pyllama90a.bench.modes import Mode
from pyllama90a.tools.synthetic import synthetic_model

if len(sys.argv) < 5:
    raise SystemExit(__doc__)
shape, mode, depth, n_seqs = sys.argv[1], Mode.parse(sys.argv[2]), int(sys.argv[3]), sorted(map(int, sys.argv[4:]))
n_warmup = 4
with filled_context(synthetic_model(shape), mode, max(n_seqs), depth, n_warmup, None, -1) as (context, batch, tokens):
    for n in n_seqs:
        decode_steps(context, batch, tokens, depth, n, 1)  # the first step of N sequences builds its graph
        warmup = decode_steps(context, batch, tokens, depth, n, n_warmup - 1) / (n_warmup - 1)
        with captured():
            seconds = decode_steps(context, batch, tokens, depth, n, 1)
        # a warm-up step's time (under ncu too, not captured): the whole step, next to its attention's counters
        print(f"{shape} {mode} depth {depth}: profiled N {n} (a warm-up step {warmup * 1e3:.1f} ms, the profiled "
              f"one {seconds * 1e3:.1f} ms)", flush=True)
