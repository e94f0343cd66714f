#!/usr/bin/env bash
# norm backward prefetch: tests + kernel times, 1B fp8 A/B; then the 125M bf16 account
REAL=$OUT; export OUT=/tmp/o; mkdir -p $OUT; cd "$(dirname "$0")/.."
t0=$(date +%s); el() { echo $(( $(date +%s)-t0 )); }
tools/gpu.sh build > $OUT/build.log 2>&1; echo "build rc=$? $(el)s"; tail -2 $OUT/build.log
export BIN=/tmp/fr-build FP8RUN=/tmp/fr-build/fp8run
a=/tmp/deps/usr/lib/x86_64-linux-gnu; export LD_LIBRARY_PATH=$a:$a/openblas-pthread:/usr/local/cuda/lib64
JOBS=2 TEST_TIMEOUT=200 tools/gpu.sh tests 'test_gpu_add_norm|test_gpu_elementwise|test_gpu_norm' > $OUT/tests.log 2>&1; echo "tests rc=$? $(el)s"
cat $OUT/tests.log; grep -A12 'times at' $OUT/tests/test_gpu_add_norm.log
tar -C /tmp -czf $REAL/o.tgz o
tools/gpu.sh versus 1b "" "FP8RUN_RMS_BWD_PREFETCH=0" "" "FP8RUN_RMS_BWD_PREFETCH=0" > $OUT/versus.log 2>&1; echo "versus rc=$? $(el)s"; tail -12 $OUT/versus.log
tar -C /tmp -czf $REAL/o.tgz o
tools/gpu.sh profile 125m bf16 > $OUT/prof_125m_bf16.log 2>&1; echo "profile rc=$? $(el)s"
TORCH_LLAMA=$PWD/.devpkg/torch_llama.py tools/gpu.sh torchops 125m bf16 > $OUT/tops_125m_bf16.log 2>&1; echo "torchops rc=$? $(el)s"
tail -9 $OUT/tops_125m_bf16.log
tar -C /tmp -czf $REAL/o.tgz o
