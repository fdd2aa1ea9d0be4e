#!/usr/bin/env bash
# llama.cpp's own llama-server, built from the same fetched and patched source as pyllama90a: the reference of
# the server load benchmark (python -m pyllama90a.bench server --llama-server PATH). Prints the binary's path.
# Cached under $PYLLAMA90A_CACHE (default ~/.cache/pyllama90a); a second run only checks that it is up to date.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(python3 vendor/prepare_source.py | tail -1)
cache=${PYLLAMA90A_CACHE:-$HOME/.cache/pyllama90a}
sdist=$(ls "$cache"/downloads/llama_cpp_python-*.tar.gz | head -1)
# the prepared tree leaves the web UI out; llama-server's CMake needs the UI's CMake files and templates
# (no assets are built: the server runs without its web page)
if [ ! -f "$src/tools/ui/ui.h.in" ]; then
    mkdir -p "$src/tools/ui"
    for f in CMakeLists.txt sources.cmake ui.cpp.in ui.h.in; do
        tar xzf "$sdist" -O --wildcards "*/vendor/llama.cpp/tools/ui/$f" > "$src/tools/ui/$f"
    done
fi
build="$cache/llama-server-build/$(basename "$src")"
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF >&2
cmake --build "$build" --target llama-server -j "${JOBS:-2}" >&2
echo "$build/bin/llama-server"
