#!/usr/bin/env bash
# Build the CUDA backend here (no GPU needed) and pack what a lent GPU machine runs into
# .devpkg/$BUNDLE.tar.xz: the CLI, the GPU test programs and the CPU tests named in $CPU_TESTS,
# plus the Debian runtime libraries they link (the GPU machine has CUDA but not these).
# tools/gpu_check.sh unpacks and runs it there. Used by the developers' device runs only.
set -euo pipefail
cd "$(dirname "$0")/.."
B=${BUILD_DIR:-build-cuda}
JOBS=${JOBS:-2}
CPU_TESTS=${CPU_TESTS-"test_trainer test_linear"}  # empty: none
# BUNDLE names the package (.devpkg/$BUNDLE.tar.xz, default bundle), so several people can keep one each
BUNDLE=${BUNDLE:-bundle}
ST=.devpkg/stage-$BUNDLE
cmake -S . -B "$B" -DFP8RUN_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null
cmake --build "$B" -j "$JOBS" --target fp8run fp8run_shared $(cd tests && ls test_gpu_*.c | sed 's/\.c$//') $CPU_TESTS
rm -rf $ST && mkdir -p $ST/lib $ST/bin
cp "$B/fp8run" $ST/bin/
for t in $(cd tests && ls test_gpu_*.c | sed 's/\.c$//') $CPU_TESTS; do cp "$B/$t" $ST/bin/; done
L=/usr/lib/x86_64-linux-gnu
cp -L $L/libprotobuf-c.so.1 $L/libcunit.so.1 $L/libgfortran.so.5 $L/libquadmath.so.0 $ST/lib/
cp -L $L/libopenblas.so.0 $L/libjansson.so.4 $ST/lib/
# the shared library, for the Python binding's checks there (FP8RUN_LIBRARY=/tmp/fr/lib/libfp8run.so)
cp -L "$B/libfp8run.so" $ST/lib/
echo "$B" > $ST/build_dir
# symbols off (they are a third of each program; the test programs link the library statically):
# the whole bundle is then about 18 MB instead of 46, under the device tool's 64 MiB with the tree
strip $ST/bin/* $ST/lib/libfp8run.so
# -9: its 64 MiB window sees that the test programs share most of their bytes (61 -> 20 MB)
tar -C $ST -cf - . | xz -T2 -9 > .devpkg/$BUNDLE.tar.xz
rm -rf $ST
ls -la .devpkg/$BUNDLE.tar.xz
