# Sourced by the device scripts: cffi from the carried wheels (and the server's, where .whl-server/ is carried;
# benchmarks/device/wheels.sh writes both), the carried llama.cpp tree, the CUDA build
# (incremental when build/ survived from an earlier call; none with SKIP_BUILD=1), and meanwhile the synthetic
# models the benches use (SYNTHETIC). Expects OUT; leaves REPO set.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    $(ls .whl-server/*.whl 2>/dev/null) || exit 1
export PYTHONPATH=/tmp/site
export PYLLAMA90A_LLAMA_CPP_SRC=/tmp/src/llama.cpp PYLLAMA90A_CACHE=/tmp/cache PYLLAMA90A_HOME=/tmp/home
# two CPU variants, not eight: the device hosts are Intel Xeons with AMX (sapphirerapids is the variant they load),
# x64 the fallback on any other; the six others only lengthened each fresh build (228-333 s on 2026-12-06)
# -lineinfo: ncu's source page (gpu_decode.sh's ncu_source) maps stall samples to source lines; the code is the same
# (nvcc 13.0, sm_90a: the fused decode's SASS with and without it identical, 9008 instructions, 2026-12-07)
export CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DCMAKE_CUDA_FLAGS=-lineinfo -DPYLLAMA90A_CPU_VARIANTS=x64;sapphirerapids"
export CMAKE_BUILD_PARALLEL_LEVEL=16
VARIANTS_DIR=/tmp/variants  # variants.sh's builds of the installed package's tree
# SKIP_BUILD=1: an earlier script of the same call has built and installed it
if [ -z "${SKIP_BUILD:-}" ]; then  # (a call that carries the built package carries no llama.cpp tree)
    [ -d /tmp/src/llama.cpp ] || { mkdir -p /tmp/src && tar xzf .device/llama.cpp-src.tar.gz -C /tmp/src; }
    # the bench's model written while the package builds (36-45 s for 8B, 2026-12-06), not on the bench's first use:
    # synthetic.py needs only gguf (above), not the package. SYNTHETIC: the shapes, "" for none
    pids=()
    for shape in ${SYNTHETIC-8b-hd128}; do
        python3 pyllama90a/tools/synthetic.py "$shape" > "$OUT/synthetic-$shape.log" 2>&1 & pids+=($!)
    done
    start=$(date +%s)
    python3 -m pip install --no-build-isolation --no-deps -v . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
    echo "build: $(( $(date +%s) - start )) s"
    rm -rf "$VARIANTS_DIR"  # variants.sh's builds (and what they reverted) were of the tree this build replaced
    for pid in "${pids[@]}"; do
        wait "$pid" || { echo "a synthetic model was not written: $OUT/synthetic-*.log"; exit 1; }
    done
fi
# VARIANT: a build variants.sh made (e.g. without-0043: the series without a candidate); what sources this runs
# on it, ahead of the installed package (2026-12-06: a stage that named none measured the other build)
if [ -n "${VARIANT:-}" ]; then
    [ -d "$VARIANTS_DIR/$VARIANT" ] || { echo "no build $VARIANT in $VARIANTS_DIR"; exit 1; }
    export PYTHONPATH=$VARIANTS_DIR/$VARIANT:$PYTHONPATH
fi
REPO=$PWD
export PYTHONFAULTHANDLER=1
# the image's pytest plugins load other C++ runtimes (torch, jax) into the process; llama.cpp's
# iostream use then crashed in llama_model::print_info (seen 2026-11-29): run our tests without them
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
