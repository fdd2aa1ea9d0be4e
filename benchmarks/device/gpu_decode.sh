#!/usr/bin/env bash
# Issue 34 on the device (an H100 or H200; each table names it), in one call: STAGES (in order) of
#   tests    the CUDA tests of the attention paths (synthetic models; the tier "model", the default model's tests,
#            is deselected: the device cannot download it); TESTS_S: its timeout (default 150 s)
#   bench8b  single-sequence decode, 8b-hd128 at depths 0/2K/8K/32K: FA-on f16, FA-on q4_0, hybrid q4_0 + fused,
#            and BENCH8B_EXTRA's modes (e.g. an opt-in kernel version's +variant, measured side by side);
#            BENCH8B_MODES / BENCH8B_DEPTHS in place of the default modes / depths;
#            BENCH8B_S: its timeout (default 280 s; ~70 s more per extra mode)
#   ncu      ncu counters (--clock-control none) of the attention kernels at 0/2K/8K/32K (ncu_depths.py)
#   ncu_batched  the same counters of one step of N = 1/8/32 sequences decoding together at 8K (ncu_batched.py)
#   ncu_depth0  the same counters at depth 1 of every kernel a layer's attention is made of, the K/V stores too
#            (ours rotate and quantize; FA-on f16's convert): what depth 0 costs beyond FA-on f16, kernel by kernel
#   ncu_source  where the fused kernel's warps stall, per instruction and source line: ncu's PC sampling
#            (SourceCounters) of one attention launch at each depth:N of NCU_SOURCE_POINTS (default 32 sequences
#            of 8K, one of 32K, one of 2K), the source page's CSV (cuda,sass) in r/ncu-source-dDEPTH-nN.csv, for
#            benchmarks/hip/sass_phases.py --stalls; NCU_S the timeout of each (default 150 s)
#   steps0   per-kernel GPU time of a whole decode step at depth 0 (profile_decode.sh); STEPS0_S its timeout (default
#            170 s: on an H200, 2026-12-06, the three modes' ncu captures did not finish in 100)
#   batched  N = 1/8/32 sequences at 2K/8K/32K, and each mode's N at 100 GB of KV at 8K (bench batched; a card too
#            small for that: three quarters of its memory, an H100's 64 GB); BATCHED_S: its timeout (default 330 s).
#            What does not fit the card's free memory is skipped and reported (the bench's default limit)
#   bench1b  1b-hd64 (head dim 64) single-sequence decode, q4_0 and q8_0
#   server   bench server, 8 and 32 clients, 8b-hd128: FA-on f16 against auto (hybrid + fused) q4_0
#   calibrate  `python -m pyllama90a calibrate` on 8b-hd128: the full preset's depths up to 1K (up to 4K it ran
#            past 280 s on an H100: 22 modes, 3 depths, then 36 quality steps of 1-5 s); CALIBRATE_S its timeout
# TESTS_K / BATCHED_MODES / BATCHED_DEPTHS: the tests stage's -k, the batched stage's modes and depths in place of
# the defaults; TESTS_SHIFT=0: the tests stage without its context-shift test. VARIANT: a build variants.sh made,
# every stage run on it (setup.sh), its results in r/VARIANT/.
# Carried (git-ignored): .device/llama.cpp-src.tar.gz, .whl/; .pkg/pkg.tgz.part-* (the package built by an
# earlier call of the same native source: no build then, and no .device/ needed). DEADLINE_S: the call's budget (each stage's timeout
# is cut to what is left). Results and logs: $OUT/results.tgz (+ $OUT/gpu_decode.log). The results folder stays
# outside $OUT: a call returns at most 8 files, and the package's parts take 4 of them.
set -uo pipefail
OUT=${OUT:-/tmp/pyllama90a-out}
RESULTS=/tmp/gpu-decode
mkdir -p "$OUT" "$RESULTS/r"
START=$(date +%s)
DEADLINE_S=${DEADLINE_S:-560}
exec > >(tee "$OUT/gpu_decode.log") 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
left() { echo $(( DEADLINE_S - ($(date +%s) - START) - ${1:-20} )); }
cap() { local l; l=$(left 25); [ "$1" -lt "$l" ] && echo "$1" || echo "$l"; }
if ls .pkg/pkg.tgz.part-* >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    cat .pkg/pkg.tgz.part-* | tar xzf - -C /tmp/site && cp -r pyllama90a/. /tmp/site/pyllama90a/  # this checkout's Python
    if (cd /tmp && PYTHONPATH=/tmp/site python3 -c "import pyllama90a.native._ffi"); then
        echo "carried package"; export SKIP_BUILD=1
    else
        echo "the carried package does not load: building"; rm -rf /tmp/site/pyllama90a
    fi
fi
source benchmarks/device/setup.sh
if [ -z "${SKIP_BUILD:-}" ] && [ -n "${SAVE_PKG:-}" ]; then  # the built package, for a later call
    site=$(cd /tmp && python3 -c "import os, pyllama90a; print(os.path.dirname(os.path.dirname(pyllama90a.__file__)))")
    (cd "$site" && tar czf /tmp/pkg.tgz pyllama90a) && ls -la /tmp/pkg.tgz
    # parts of 15 MiB (a returned file may have 16); carried with .whl/ and without .device/, the tree of a CUDA
    # build's package (55 MB on 2026-12-05) stays under the 64 MiB a call takes
    [ "$(stat -c %s /tmp/pkg.tgz)" -le $((58 * 1024 * 1024)) ] && split -b 15M /tmp/pkg.tgz "$OUT/pkg.tgz.part-"
fi
cd /tmp
R=$RESULTS/r${VARIANT:+/$VARIANT}
mkdir -p "$R"
D=$REPO/benchmarks/device
# a fresh machine's first use of the 8B model writes it (~1-2 min): before ncu, not under its timeout
model_8b() {
    timeout "$(cap 200)" python3 -c "from pyllama90a.tools.synthetic import synthetic_model as m; m('8b-hd128')"
}
# ncu's counters of the attention kernels (all of FA's: with several KV streams FA over f16 runs its MMA kernel;
# NCU_KERNELS: another regex of kernel names) in the capture ranges of SCRIPT (ncu_depths.py, ncu_batched.py) on
# 8b-hd128, one process per mode of NCU_MODES (NCU_S seconds at most each), summarized by ncu_summary.py into
# $R/ncu-NAME-attention-8b-hd128.md.
# Arguments: NAME, STEPS (ncu_summary.py's), SCRIPT, its arguments after the mode.
ncu_stage() {
    local name=$1 steps=$2 script=$3 mode csv metrics rc summary=()
    local stalls='regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio'
    # the instructions executed and the issue slots' use: whether a kernel is bound by its instruction count
    local issue='smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active'
    shift 3
    model_8b
    # the fused kernel first: its counters are the question, FA's the reference (on 2026-12-06 the stage's time ran
    # out during the second mode, which was then ours)
    for mode in ${NCU_MODES:-hybrid:q4_0/q4_0+fused fa-on:f16/f16}; do
        csv="$R/ncu-$name-${mode//[:\/+]/_}.csv"
        # the second metrics if the first fail (not if the time ran out: the second would take as long)
        for metrics in "dram__bytes_read.sum,$issue,$stalls" dram__bytes_read.sum; do
            timeout "$(cap "${NCU_S:-120}")" ncu --clock-control none --profile-from-start off \
                --kernel-name regex:"${NCU_KERNELS:-pyl_attn_decode|flash_attn_}" \
                --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
                --metrics "$metrics" --csv --page details --log-file "$csv" \
                python3 "$D/$script" 8b-hd128 "$mode" "$@" >> "$R/ncu-$name.log" 2>&1
            rc=$?; echo "ncu $name $mode ($metrics) rc=$rc"; [ $rc -eq 0 ] || [ $rc -eq 124 ] && break
        done
        grep -q '^"ID"' "$csv" 2>/dev/null && summary+=("${mode//[:\/+]/_}=$csv")  # a table was written
    done
    grep -E "profiled|==ERROR==" "$R/ncu-$name.log"
    [ ${#summary[@]} -gt 0 ] && python3 "$D/ncu_summary.py" 32 "$steps" "${summary[@]}" \
        | tee "$R/ncu-$name-attention-8b-hd128.md"
}
for stage in ${STAGES:-tests bench8b ncu steps0 batched bench1b}; do
    t=$(left 30); [ "$t" -lt 30 ] && { echo "stage $stage: no time left"; continue; }
    echo "== stage $stage ($t s left) $(date -u +%T)"
    case $stage in
    tests)
        timeout "$(cap "${TESTS_S:-150}")" python3 -m pytest -q -p no:cacheprovider \
            $(printf "$REPO/tests/%s " core/test_hybrid_attention.py core/test_attention_paths.py \
              native/test_vquant_cuda.py native/test_quantized_v_backend.py native/test_kq_cuda.py) \
            -m "not model" ${TESTS_K:+-k "$TESTS_K"} > "$R/pytest.log" 2>&1
        echo "tests rc=$?"; tail -3 "$R/pytest.log"; grep -E "FAILED|ERROR" "$R/pytest.log" | head -10
        # context shift over the cells the fused decode reads (the synthetic model's case; the others need SmolLM2);
        # TESTS_SHIFT=0 leaves it out (a call that tests one kernel variant only)
        if [ "${TESTS_SHIFT:-1}" = 1 ]; then
            timeout "$(cap 60)" python3 -m pytest -q -p no:cacheprovider "$REPO/tests/core/test_context_shift.py" \
                -k on_every_backend > "$R/pytest-context-shift.log" 2>&1
            echo "context shift tests rc=$?"; tail -3 "$R/pytest-context-shift.log"
        fi ;;
    bench8b)
        timeout "$(cap "${BENCH8B_S:-280}")" python3 -m pyllama90a.bench --synthetic 8b-hd128 \
            --depths ${BENCH8B_DEPTHS:-0 2048 8192 32768} --pp 512 --tg 32 --reps 3 --no-overhead --no-plot \
            --baseline fa-on:f16/f16 --modes ${BENCH8B_MODES:-fa-on:f16/f16 fa-on:q4_0/q4_0 hybrid:q4_0/q4_0+fused} \
            ${BENCH8B_EXTRA:-} --out "$R/8b-hd128" > "$R/bench8b.log" 2>&1
        echo "bench8b rc=$?"; grep "| tg" "$R/8b-hd128/bench.md" ;;
    ncu) ncu_stage depths 0,2048,8192,32768 ncu_depths.py 0 2048 8192 32768 ;;
    ncu_batched) NCU_S=${NCU_S:-150} ncu_stage batched N=1,8,32 ncu_batched.py 8192 1 8 32 ;;
    ncu_depth0) NCU_KERNELS='pyl_attn_decode|flash_attn_|set_rows' ncu_stage depth0 0 ncu_depths.py 0 ;;
    ncu_source)
        model_8b
        # the issue-bound tiles of many sequences (2026-12-07: V^T p 36 % of the samples at 32 of 8K), one
        # sequence's long chunks, and the short cache's 32-cell tiles (several lanes a K row), each its own page
        for point in ${NCU_SOURCE_POINTS:-8192:32 32768:1 2048:1}; do
            page="$R/ncu-source-d${point%:*}-n${point#*:}"
            # the attention kernel alone (its reduce, k_pyl_attn_decode_reduce, is another kernel); one launch: layer 0
            timeout "$(cap "${NCU_S:-150}")" ncu --clock-control none --profile-from-start off --launch-count 1 \
                --kernel-name regex:'k_pyl_attn_decode(<|$)' --import-source yes --section SourceCounters \
                --section WarpStateStats -f -o "$page" \
                python3 "$D/ncu_batched.py" 8b-hd128 hybrid:q4_0/q4_0+fused "${point%:*}" "${point#*:}" > "$page.log" 2>&1
            echo "ncu_source $point rc=$?"
            # the report (MBs) stays on the machine; its source page, every instruction with its line, comes back
            # (SASS alone where this ncu does not print the two together)
            for view in cuda,sass sass; do
                ncu --import "$page.ncu-rep" --page source --csv --print-source "$view" > "$page.csv" 2>> "$page.log" && break
            done
            mv "$page.ncu-rep" /tmp/ 2>/dev/null
            echo "ncu_source $point: $(wc -l < "$page.csv") lines"; head -c 300 "$page.csv"; echo
        done ;;
    steps0)
        (cd "$REPO" && OUT=$R SKIP_BUILD=1 DEPTH=0 STEPS=4 NCU_FLAGS="--clock-control none" \
            MODES="fa-on:f16/f16 fa-on:q4_0/q4_0 hybrid:q4_0/q4_0+fused" \
            timeout "$(cap "${STEPS0_S:-170}")" bash benchmarks/device/profile_decode.sh > /dev/null 2>&1); echo "steps0 rc=$?"
        cat "$R"/kernel-times-8b-hd128-0.md ;;
    batched)
        budget=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1 |
                 awk '{ gb = int($1 * 1.048576 / 1000 * 0.75); print (gb < 100 ? gb : 100) }')  # MiB -> GB
        timeout "$(cap "${BATCHED_S:-330}")" python3 -m pyllama90a.bench batched --synthetic 8b-hd128 --n-seq 1 8 32 \
            --depths ${BATCHED_DEPTHS:-2048 8192 32768} --tg 16 --reps 2 --kv-budget-gb "$budget" --budget-depth 8192 \
            ${BATCHED_EXTRA:---measure-budget} --modes ${BATCHED_MODES:-fa-on:f16/f16 fa-on:q4_0/q4_0 hybrid:q4_0/q4_0+fused} \
            --out "$R/8b-hd128-batched" > "$R/batched.log" 2>&1
        echo "batched rc=$?"; cat "$R/8b-hd128-batched/batched.md" ;;
    server)  # the OpenAI server under 8 and 32 streaming clients: FA-on f16 against auto (hybrid + fused) q4_0
        model=$(python3 -c "from pyllama90a.tools.synthetic import synthetic_model; print(synthetic_model('8b-hd128'))")
        for cfg in "f16 on" "q4_0 auto"; do
            set -- $cfg
            timeout "$(cap 150)" python3 -m pyllama90a.bench server --model "$model" --clients 8 32 --max-tokens 64 \
                --reps 2 --ctk "$1" --ctv "$1" --flash-attn "$2" --n-ctx 131072 --threads 8 \
                --out "$R/8b-hd128-server-$1-$2" > "$R/server-$1.log" 2>&1
            echo "server $cfg rc=$?"; cat "$R/8b-hd128-server-$1-$2/server.md"
        done ;;
    calibrate)  # random weights: the speed and memory parts mean something, the quality part does not
        model=$(python3 -c "from pyllama90a.tools.synthetic import synthetic_model; print(synthetic_model('8b-hd128'))")
        timeout "$(cap "${CALIBRATE_S:-300}")" python3 -m pyllama90a calibrate "$model" --n-ctx 1400 --no-progress \
            --out "$R/8b-hd128-calibrate" > "$R/calibrate.log" 2>&1
        echo "calibrate rc=$?"; head -40 "$R/8b-hd128-calibrate/calibration.md" ;;
    bench1b)
        timeout "$(cap 160)" python3 -m pyllama90a.bench --synthetic 1b-hd64 --depths 0 2048 8192 32768 --pp 512 \
            --tg 32 --reps 3 --no-overhead --no-plot --baseline fa-on:f16/f16 --modes fa-on:f16/f16 fa-on:q4_0/q4_0 \
            hybrid:q4_0/q4_0+fused fa-on:q8_0/q8_0 hybrid:q8_0/q8_0+fused --out "$R/1b-hd64" > "$R/bench1b.log" 2>&1
        echo "bench1b rc=$?"; grep "| tg" "$R/1b-hd64/bench.md" ;;
    esac
    (cd "$RESULTS" && tar czf "$OUT/results.tgz" r)  # what has been measured so far comes back even if a later stage hangs
done
rm -f "$R"/*.csv.gz; (cd "$RESULTS" && tar czf "$OUT/results.tgz" r) && ls -la "$OUT"
echo "total $(( $(date +%s) - START )) s"
