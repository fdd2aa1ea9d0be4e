#!/usr/bin/env bash
# Build the CUDA variant on the H200 device machine and run the backend tests and a depth probe there.
# Carried (git-ignored): .device/llama.cpp-src.tar.gz (pristine llama.cpp tree) and .whl/ (cffi, pycparser
# for cp312). Run from the repository root; logs go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/pyllama90a-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/cuda_check.log") 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
which patch git cmake ninja nvcc || true
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site
mkdir -p /tmp/src && tar xzf .device/llama.cpp-src.tar.gz -C /tmp/src
export PYLLAMA90A_LLAMA_CPP_SRC=/tmp/src/llama.cpp PYLLAMA90A_CACHE=/tmp/cache PYLLAMA90A_HOME=/tmp/home
export CMAKE_ARGS="-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a" CMAKE_BUILD_PARALLEL_LEVEL=16
start=$(date +%s)
python3 -m pip install --no-build-isolation --no-deps -v . > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
cd /tmp
python3 - <<'PY'
from pyllama90a._ffi import ffi, lib
print(ffi.string(lib.llama_print_system_info()).decode())
for i in range(lib.ggml_backend_dev_count()):
    d = lib.ggml_backend_dev_get(i)
    print("device:", ffi.string(lib.ggml_backend_dev_name(d)).decode(), ffi.string(lib.ggml_backend_dev_description(d)).decode())
PY
REPO=$OLDPWD
export PYTHONFAULTHANDLER=1
# the image's pytest plugins load other C++ runtimes (torch, jax) into the process; llama.cpp's
# iostream use then crashed in llama_model::print_info (seen 2026-11-29): run our tests without them
export PYTEST_DISABLE_PLUGIN_AUTOLOAD=1
timeout 400 python3 -m pytest -v -p no:cacheprovider "$REPO/tests/test_quantized_v_backend.py" \
    "$REPO/tests/test_attention_ops.py" "$REPO/tests/test_synthetic.py" "$REPO/tests/test_vquant_cuda.py" \
    > "$OUT/pytest.log" 2>&1
echo "backend tests rc=$?"; grep -E "PASSED|FAILED|ERROR|Fatal" "$OUT/pytest.log" | sed 's/.*:://' | tail -80; tail -3 "$OUT/pytest.log"
if [ "${PROBE:-1}" = 1 ]; then timeout 240 python3 "$REPO/benchmarks/device/depth_probe.py" 2>&1; fi
