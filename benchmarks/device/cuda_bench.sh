#!/usr/bin/env bash
# The benchmark tool on the H200: synthetic 1B (head dim 64) and 8B (head dim 128) shapes at depths 0, 8K, 32K.
# Same carried files as cuda_check.sh. SHAPES / DEPTHS / MODES override the defaults. The PNG is drawn here from
# bench.json (python -c 'from pyllama90a.bench.depths import plot; ...'): matplotlib crashed on import there.
set -uo pipefail
OUT=${OUT:-/tmp/pyllama90a-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/cuda_bench.log") 2>&1
source benchmarks/device/setup.sh
cd /tmp
MODES=${MODES:-"fa-off:f16/f16 fa-off:q4_0/q4_0 fa-off:q8_0/q8_0 fa-on:q4_0/q4_0 fa-off:q4_0/q4_0+deq fa-off:q4_0/q4_0+ungrouped"}
for shape in ${SHAPES:-1b-hd64 8b-hd128}; do
    timeout "${BENCH_TIMEOUT:-240}" python3 -m pyllama90a.bench --synthetic "$shape" --depths ${DEPTHS:-0 8192 32768} \
        --pp 512 --tg 32 --reps 3 --no-overhead --no-plot --modes $MODES --out "$OUT/h200-$shape"
    echo "bench $shape rc=$?"
done
