#!/usr/bin/env bash
# build, every GPU test program, then op-by-op accounts (fp8run profile + compiled PyTorch's kernels)
REAL=$OUT; export OUT=/tmp/o; mkdir -p $OUT; cd "$(dirname "$0")/.."
t0=$(date +%s); el() { echo $(( $(date +%s)-t0 )); }
tools/gpu.sh build > $OUT/build.log 2>&1; echo "build rc=$? $(el)s"; tail -2 $OUT/build.log
export BIN=/tmp/fr-build FP8RUN=/tmp/fr-build/fp8run
a=/tmp/deps/usr/lib/x86_64-linux-gnu; export LD_LIBRARY_PATH=$a:$a/openblas-pthread:/usr/local/cuda/lib64
JOBS=4 TEST_TIMEOUT=200 tools/gpu.sh tests > $OUT/tests.log 2>&1; echo "tests rc=$? $(el)s"
grep -E 'rc=[1-9]|FAIL|passed|programs' $OUT/tests.log | tail -8; grep -c 'rc=0' $OUT/tests.log
tar -C /tmp -czf $REAL/o.tgz o
for c in "1b bf16" "125m fp8"; do set -- $c
  tools/gpu.sh profile $1 $2 > $OUT/prof_$1_$2.log 2>&1; echo "profile $1 $2 rc=$? $(el)s"
  TORCH_LLAMA=$PWD/.devpkg/torch_llama.py tools/gpu.sh torchops $1 $2 > $OUT/tops_$1_$2.log 2>&1; echo "torchops $1 $2 rc=$? $(el)s"
  tar -C /tmp -czf $REAL/o.tgz o
done
