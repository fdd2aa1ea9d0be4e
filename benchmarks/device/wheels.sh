#!/usr/bin/env bash
# The wheels the device scripts carry in .whl/ (git-ignored): nothing can be installed there from an index, and its
# image has Python 3.12 with numpy but none of these. The versions are constraints.txt's pins. .whl/: what the
# package, its bench and its tests need; .whl-server/: what `python -m pyllama90a.server` (gpu_decode.sh's server
# stage) needs besides, apart because a call that carries the built package (.pkg/, ~57 MB) has no room for it
# within the 64 MiB a call takes. Run from the repository root.
set -euo pipefail
download() {  # FOLDER NAME...: the pinned cp312 wheels of NAME... into FOLDER
    local folder=$1 name pin pins=()
    shift
    for name in "$@"; do
        pin=$(grep -i "^${name}==" constraints.txt) || { echo "no pin for $name in constraints.txt" >&2; exit 1; }
        pins+=("$pin")
    done
    mkdir -p "$folder"
    python3 -m pip download -q --no-deps --only-binary :all: --python-version 3.12 --implementation cp \
        --abi cp312 --abi abi3 --abi none --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_31_x86_64 --platform any -d "$folder" "${pins[@]}"
}
download .whl cffi pycparser gguf PyYAML tqdm
download .whl-server fastapi starlette uvicorn h11 click anyio sniffio idna pydantic pydantic_core typing_extensions \
    annotated-types typing-inspection llguidance opentelemetry-api
ls .whl .whl-server
