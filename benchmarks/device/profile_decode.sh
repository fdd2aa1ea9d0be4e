#!/usr/bin/env bash
# GPU time per kernel of decode steps at one depth, one column per bench mode (ncu, one metric).
# SHAPE (8b-hd128), DEPTH (32768), MODES ("fa-on:f16/f16 fa-on:q4_0/q4_0 hybrid:q4_0/q4_0 hybrid:q4_0/q4_0+fused"),
# STEPS (2) override the defaults. NCU_FLAGS: e.g. "--clock-control none --cache-control none" for times closer
# to an unprofiled run (warm L2, boost clocks).
set -uo pipefail
OUT=${OUT:-/tmp/pyllama90a-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/profile_decode.log") 2>&1
source benchmarks/device/setup.sh
cd /tmp
SHAPE=${SHAPE:-8b-hd128} DEPTH=${DEPTH:-32768} STEPS=${STEPS:-2}
csvs=()
for mode in ${MODES:-fa-on:f16/f16 fa-on:q4_0/q4_0 hybrid:q4_0/q4_0 hybrid:q4_0/q4_0+fused}; do
    csv="$OUT/ncu-$SHAPE-$DEPTH-${mode//[:\/+]/_}.csv"
    timeout 240 ncu ${NCU_FLAGS:-} --profile-from-start off --metrics gpu__time_duration.sum --csv \
        --log-file "$csv" python3 "$REPO/benchmarks/device/profile_decode.py" "$SHAPE" "$mode" "$DEPTH" "$STEPS"
    echo "ncu $mode rc=$?"
    csvs+=("$csv")
done
python3 "$REPO/benchmarks/device/kernel_times.py" "$STEPS" "${csvs[@]}" | tee "$OUT/kernel-times-$SHAPE-$DEPTH.md"
