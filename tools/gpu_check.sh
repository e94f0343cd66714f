#!/usr/bin/env bash
# On a lent GPU machine: unpack .devpkg/$BUNDLE.tar.xz (default: bundle) (tools/gpu_bundle.sh) and run the GPU test
# programs, then whatever extra commands are given as arguments (benchmarks). Logs go to $OUT.
# The test programs find the fixtures at the absolute path they were built with, so the repository
# is linked there.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
# FR_UNPACKED=1: the bundle is already in /tmp/fr (other programs may be running from it)
mkdir -p "$OUT" /tmp/fr
[ "${FR_UNPACKED:-0}" = 1 ] || tar -C /tmp/fr -xJf .devpkg/${BUNDLE:-bundle}.tar.xz
B=$(cat /tmp/fr/build_dir)
SRC=$(grep -ao '/[a-zA-Z0-9_/.-]*tests/fixtures' /tmp/fr/bin/test_gpu_train | head -1 | sed 's|/tests/fixtures||')
if [ -n "$SRC" ] && [ "$SRC" != "$PWD" ]; then mkdir -p "$(dirname "$SRC")"; ln -sfn "$PWD" "$SRC"; fi
mkdir -p "$SRC/$B" && cp /tmp/fr/bin/* "$SRC/$B/"
export LD_LIBRARY_PATH=/tmp/fr/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
nvcc --version | tail -1 >> "$OUT/gpu.txt" 2>/dev/null
# the test programs run side by side (each uses a small part of the GPU)
run_one() {
    n=$(basename "$1")
    timeout ${TEST_TIMEOUT:-240} "$1" > "$OUT/$n.log" 2>&1
    printf '%-24s rc=%d  %s\n' "$n" $? "$(grep -E 'asserts' "$OUT/$n.log" | tr -s ' ')"
}
export -f run_one
export OUT TEST_TIMEOUT
ls "$SRC/$B"/test_* | grep -E "${TESTS:-.}" | xargs -P ${JOBS:-4} -I{} bash -c 'run_one {}' | sort | tee -a "$OUT/summary.txt"
fails=$(grep -c 'rc=[1-9]' "$OUT/summary.txt")
for cmd in "$@"; do echo "== $cmd" | tee -a "$OUT/summary.txt"; (cd "$SRC" && eval "$cmd") 2>&1 | tail -40 | tee -a "$OUT/summary.txt"; done
echo "failed programs: $fails" | tee -a "$OUT/summary.txt"
