#!/usr/bin/env bash
# GPU time per kernel of decode steps at one depth, f16 cache vs quantized caches (ncu, one metric).
# SHAPE (1b-hd64), DEPTH (8192), TYPES ("f16 q4_0 q8_0"), STEPS (2) override the defaults. NCU_FLAGS: e.g.
# "--clock-control none --cache-control none" for times closer to an unprofiled run (warm L2, boost clocks).
set -uo pipefail
OUT=${OUT:-/tmp/pyllama90a-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/profile_decode.log") 2>&1
source benchmarks/device/setup.sh
cd /tmp
SHAPE=${SHAPE:-1b-hd64} DEPTH=${DEPTH:-8192} STEPS=${STEPS:-2}
csvs=()
for t in ${TYPES:-f16 q4_0 q8_0}; do
    timeout 240 ncu ${NCU_FLAGS:-} --profile-from-start off --metrics gpu__time_duration.sum --csv \
        --log-file "$OUT/ncu-$SHAPE-$DEPTH-$t.csv" python3 "$REPO/benchmarks/device/profile_decode.py" \
        "$SHAPE" "$t" "$t" "$DEPTH" "$STEPS"
    echo "ncu $t rc=$?"
    csvs+=("$OUT/ncu-$SHAPE-$DEPTH-$t.csv")
done
python3 "$REPO/benchmarks/device/kernel_times.py" "$STEPS" "${csvs[@]}" | tee "$OUT/kernel-times-$SHAPE-$DEPTH.md"
