#!/usr/bin/env bash
# HF architectures at 1B (fp8run on each export first, then as many compiled baselines as fit)
REAL=$OUT; export OUT=/tmp/o; mkdir -p $OUT/archs; cd "$(dirname "$0")/.."
t0=$(date +%s); el() { echo $(( $(date +%s)-t0 )); }
export TORCH_HF=$PWD/.devpkg/torch_hf.py
( nice tools/gpu.sh exports > $OUT/exports.log 2>&1; echo "exports rc=$? $(el)s" >> $OUT/times.txt ) &
tools/gpu.sh build fp8run > $OUT/build.log 2>&1; echo "build rc=$? $(el)s"; tail -2 $OUT/build.log
export BIN=/tmp/fr-build FP8RUN=/tmp/fr-build/fp8run
wait; cat $OUT/times.txt
PACK_TO=$REAL timeout 330 tools/gpu.sh archs > $OUT/archs.log 2>&1; echo "archs rc=$? $(el)s"
grep -vE '^\s*$' $OUT/archs.log | tail -25
tar -C /tmp -czf $REAL/o.tgz o
