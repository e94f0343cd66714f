#!/usr/bin/env bash
# Build the CUDA backend here (no GPU needed) and pack what a lent GPU machine runs into
# .devpkg/bundle.tar.xz: the CLI, the GPU test programs and the CPU tests named in $CPU_TESTS,
# plus the Debian runtime libraries they link (the GPU machine has CUDA but not these).
# tools/gpu_check.sh unpacks and runs it there. Used by the developers' device runs only.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD_DIR:-build-cuda}
JOBS=${JOBS:-2}
CPU_TESTS=${CPU_TESTS:-"test_trainer test_linear"}
cmake -S . -B "$B" -DFP8RUN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
cmake --build "$B" -j "$JOBS" --target fp8run $(cd tests && ls test_gpu_*.c | sed 's/\.c$//') $CPU_TESTS
rm -rf .devpkg/stage && mkdir -p .devpkg/stage/lib .devpkg/stage/bin
cp "$B/fp8run" .devpkg/stage/bin/
for t in $(cd tests && ls test_gpu_*.c | sed 's/\.c$//') $CPU_TESTS; do cp "$B/$t" .devpkg/stage/bin/; done
L=/usr/lib/x86_64-linux-gnu
cp -L $L/libprotobuf-c.so.1 $L/libcunit.so.1 $L/libgfortran.so.5 $L/libquadmath.so.0 .devpkg/stage/lib/
cp -L $L/libopenblas.so.0 .devpkg/stage/lib/
echo "$B" > .devpkg/stage/build_dir
tar -C .devpkg/stage -cf - . | xz -T2 -6 > .devpkg/bundle.tar.xz
rm -rf .devpkg/stage
ls -la .devpkg/bundle.tar.xz
