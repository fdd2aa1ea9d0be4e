#!/usr/bin/env bash
# Build the CUDA variant on the device machine, run `python -m pyllama90a.selftest` (report: $OUT/selftest.md),
# then TESTS (tests/ files; default: what issue 9 asks to prove on CUDA: exported symbols, numpy imported first,
# bad model files). Carried (git-ignored): .device/llama.cpp-src.tar.gz and .whl/ (see cuda_check.sh).
set -uo pipefail
OUT=${OUT:-/tmp/pyllama90a-out}
mkdir -p "$OUT"
exec > >(tee "$OUT/selftest.log") 2>&1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
source benchmarks/device/setup.sh
cd /tmp
lib=$(python3 -c "import pyllama90a._native as n, os; print(os.path.dirname(n.__file__))")
for so in "$lib"/*.so; do
    echo "exports $(basename "$so"): $(nm -D --defined-only "$so" | wc -l), std:: $(nm -DC --defined-only "$so" | grep -c ' std::')"
done
timeout "${SELFTEST_TIMEOUT:-300}" python3 -m pyllama90a.selftest ${SELFTEST_ARGS:-} --out "$OUT/selftest.md" > /dev/null
echo "selftest rc=$?"
TESTS=${TESTS:-"test_exports.py test_import_order.py test_model_file_checks.py"}
timeout "${TEST_TIMEOUT:-200}" python3 -m pytest -v -p no:cacheprovider $(printf "$REPO/tests/%s " $TESTS) \
    > "$OUT/pytest.log" 2>&1
echo "tests rc=$?"; grep -cE "PASSED" "$OUT/pytest.log"; grep -E "FAILED|ERROR|Fatal" "$OUT/pytest.log" | head -20
tail -3 "$OUT/pytest.log"
