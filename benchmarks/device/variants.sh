#!/usr/bin/env bash
# Kernel versions side by side on one warm machine, each a build of its own: the package that an earlier call built
# and installed (gpu_decode.sh, setup.sh), then the same build without the newest patches, one more each time.
# WITHOUT: patch numbers, newest first (e.g. "0029 0028" makes without-0029 and without-0029-0028; "0029+0028" one
# build without both, without-0029+0028; a later call's "0028" after an earlier call's "0029" makes
# without-0029-0028 too). WITH: names of
# experiments in benchmarks/device/experiments/ (with-NAME each, made first; see its README).
#
# A variant is the earlier call's build tree rebuilt after `git apply -R` of the patch on the prepared source: only
# the files that patch touches recompile (46-50 s on the H100 machine's host, 2026-12-05), where a pip install would
# copy the source afresh and rebuild all of it (260 s). Its libggml-cuda.so goes into a copy of the installed
# package, $VARIANTS_DIR/<name>/pyllama90a (setup.sh's folder; so a patch that also changes libllama, or the C API
# the Python side reads, needs a build of its own); "all" is the installed package itself. Leaves the build tree
# without the patches (a later call's WITHOUT goes on from there; a later pip install prepares the source afresh
# and empties $VARIANTS_DIR). Then BENCH (a command line; default below) runs once per variant, in the order of VARIANTS
# (default: all, then each variant made), with that variant first on PYTHONPATH, $VARIANT naming it and $RUN naming
# that run's outputs ($VARIANT, or $VARIANT-run2 and so on where it ran before on this machine: VARIANTS repeats it,
# e.g. "all" first and last, or an earlier call did). VARIANTS may name builds an earlier call made (WITHOUT/WITH
# empty: no build, the benches only).
set -uo pipefail
OUT=${OUT:-/tmp/pyllama90a-out}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/variants.log") 2>&1
SKIP_BUILD=1 source benchmarks/device/setup.sh
V=$VARIANTS_DIR
R=/tmp/gpu-decode/r
mkdir -p "$V" "$R"

build=$(dirname "$(ls -d "$REPO"/build/*/CMakeCache.txt | head -1)")
src=$(ls -d "$PYLLAMA90A_CACHE"/src/local-* | head -1)  # prepare_source.py's copy of the carried tree
cmake_bin=$(sed -n 's/^CMAKE_COMMAND:INTERNAL=//p' "$build/CMakeCache.txt")
installed=$(cd /tmp && python3 -c "import os, pyllama90a; print(os.path.dirname(pyllama90a.__file__))")
echo "build $build, source $src, installed $installed"
[ -d "$V/all" ] || { mkdir -p "$V/all" && cp -r "$installed" "$V/all/"; }

# $1, a patch file, applied to the prepared source ($2 = -R: reversed)
patch_src() {
    if command -v git > /dev/null; then (cd "$src" && git apply ${2:-} "$1"); else patch -d "$src" ${2:-} -p1 -s < "$1"; fi
}
# the build tree's ggml-cuda rebuilt, its library into a copy of the installed package: the variant $1
build_variant() {
    local t0
    t0=$(date +%s)
    "$cmake_bin" --build "$build" --target ggml-cuda -j "${CMAKE_BUILD_PARALLEL_LEVEL:-16}" > "$OUT/build-$1.log" 2>&1 \
        || { tail -30 "$OUT/build-$1.log"; exit 1; }
    # a re-run of CMake prepares the source afresh from this tree's vendor/patches/, undoing what was applied above
    # (a call whose tree lacks a patch the build had: 2026-12-06, call 2); the variant would be the wrong build
    if grep -q "Re-running CMake" "$OUT/build-$1.log"; then
        echo "$1: the build re-ran CMake, which re-prepared the source; carry the build's vendor/patches/ and retry"
        exit 1
    fi
    rm -rf "${V:?}/$1" && cp -r "$V/all" "$V/$1"
    cp "$(find "$build" -name libggml-cuda.so | head -1)" "$V/$1/pyllama90a/"
    echo "$1: rebuilt in $(( $(date +%s) - t0 )) s"
    made+=("$1")
}

made=()
# WITH: experiments (benchmarks/device/experiments/NAME.patch, e.g. one stage done twice: the difference from "all"
# is what that stage costs inside the decode step), each applied alone on top of every patch, then taken off again
# what an earlier call on this machine reverted stays reverted in the build tree (its name in $V/reverted): a later
# call's WITHOUT goes on from there, and an experiment would not sit on every patch
reverted=$(cat "$V/reverted" 2>/dev/null || echo without)
[ -n "${WITH:-}" ] && [ "$reverted" != without ] && { echo "WITH after $reverted: the tree lacks patches"; exit 1; }
for e in ${WITH:-}; do
    patch_file=$REPO/benchmarks/device/experiments/$e.patch
    patch_src "$patch_file" || { echo "$e does not apply"; exit 1; }
    build_variant "with-$e"
    patch_src "$patch_file" -R || { echo "$e does not reverse"; exit 1; }
done
name=$reverted
for n in ${WITHOUT:-}; do
    name=$name-$n
    for m in ${n//+/ }; do  # "0032+0031": both reverted, one build
        patch_src "$(ls "$REPO"/vendor/patches/"$m"-*.patch)" -R || { echo "$m does not reverse"; exit 1; }
    done
    echo "$name" > "$V/reverted"
    build_variant "$name"
done

cd /tmp
# each variant's tables, FA-on f16 beside it in each: N = 1 / 8 / 32 sequences at 8K (bench batched), then one
# sequence at depths 0 / 2K / 8K / 32K. Back here, variants_table.py puts a call's runs side by side from their JSON
# (results.tgz's r/: --runs this call's, --vs A:B each build against another with the runs' spread)
DEFAULT_BENCH='python3 -m pyllama90a.bench batched --synthetic 8b-hd128 --n-seq 1 8 32 --depths 8192 --tg 16 --reps 3
    --modes hybrid:q4_0/q4_0+fused fa-on:f16/f16 --out $R/batched-$RUN > $R/batched-$RUN.log 2>&1;
    cat $R/batched-$RUN/batched.md;
    python3 -m pyllama90a.bench --synthetic 8b-hd128 --depths 0 2048 8192 32768 --pp 512 --tg 32 --reps 3 --no-overhead
    --no-plot --baseline fa-on:f16/f16 --modes fa-on:f16/f16 hybrid:q4_0/q4_0+fused --out $R/single-$RUN
    > $R/single-$RUN.log 2>&1; grep "| tg" $R/single-$RUN/bench.md'
export R
# a variant's runs are counted on the machine ($R/runs/), so that a later call's run of it (a warm machine, its
# builds still in $V) does not overwrite an earlier call's outputs
mkdir -p "$R/runs"
for VARIANT in ${VARIANTS:-all ${made[@]}}; do
    [ -d "$V/$VARIANT" ] || { echo "$VARIANT: no such build in $V"; exit 1; }
    RUN=$VARIANT n=1
    while [ -e "$R/runs/$RUN" ]; do n=$((n + 1)); RUN=$VARIANT-run$n; done
    touch "$R/runs/$RUN"
    export VARIANT RUN
    echo "== $RUN $(date -u +%T)"
    PYTHONPATH=$V/$VARIANT:/tmp/site timeout "${BENCH_S:-200}" bash -c "${BENCH:-${DEFAULT_BENCH//$'\n'/ }}"
    echo "$RUN rc=$?"
done
(cd /tmp/gpu-decode && tar czf "$OUT/results.tgz" r)
