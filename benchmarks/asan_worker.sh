#!/usr/bin/env bash
# An AddressSanitizer build of ggml's RPC server, for the RPC fuzz target only (issue 33):
#
#     benchmarks/asan_worker.sh [BUILD_DIR]        (default build/asan-rpc; prints the server's path last)
#     PYLLAMA90A_FUZZ_RPC_WORKER="$(benchmarks/asan_worker.sh | tail -1) -H 127.0.0.1 -p {port} -t 1" \
#       python -m pyllama90a.fuzz --target rpc --cases 1000
#
# It builds the patched llama.cpp tree that the project's build prepares (vendor/prepare_source.py: the pinned
# sdist with every vendor/patches/*.patch applied, the RPC hardening included), ggml and ggml's rpc-server only,
# with -fsanitize=address. The tree is mirrored into BUILD_DIR/src file by file, copying only files whose bytes
# changed, so that a new patch rebuilds only what it touches. Nothing of llama.cpp is written into the repository.
# The fuzzer runs it with ASAN_OPTIONS (below, unless set) so that a report ends the worker by SIGABRT, which the
# fuzz runner classifies as a crash with the report's SUMMARY line.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build/asan-rpc}
SRC=$(python vendor/prepare_source.py | tail -1)
mkdir -p "$BUILD/src"
python - "$SRC" "$BUILD/src" <<'PY'
import filecmp, os, shutil, sys
src, dst = sys.argv[1:]
for root, _, files in os.walk(src):
    out = os.path.join(dst, os.path.relpath(root, src))
    os.makedirs(out, exist_ok=True)
    for name in files:
        a, b = os.path.join(root, name), os.path.join(out, name)
        if not os.path.exists(b) or not filecmp.cmp(a, b, shallow=False):
            shutil.copy2(a, b)
PY
cmake -S "$BUILD/src" -B "$BUILD/build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGGML_SANITIZE_ADDRESS=ON \
  -DGGML_RPC=ON -DGGML_NATIVE=ON -DGGML_OPENMP=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TOOLS=ON >/dev/null
cmake --build "$BUILD/build" --target ggml-rpc-server -j "${JOBS:-2}" >&2
realpath "$BUILD/build/bin/ggml-rpc-server"
