#!/usr/bin/env bash
# Build the libFuzzer targets (tests/fuzz/fuzz_*.c) with clang, ASan and UBSan, and run each for
# a bounded time on a copy of its committed seed corpus (tests/fuzz/corpus/TARGET).
#   tools/fuzz.sh [SECONDS [TARGET...]]   default 60 s per target, every target
# Environment: BUILD_DIR (default build-fuzz), JOBS. A crash leaves crash-*/leak-*/timeout-*
# files in $BUILD_DIR/fuzz-out/TARGET and makes the script exit 1: add the input as a
# regression case (a seed in the corpus and a test) once it is fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
shift || true
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
BUILD_DIR=${BUILD_DIR:-build-fuzz}
if ! command -v clang >/dev/null; then
    echo "fuzz: clang is needed (apt-get install -y clang)" >&2
    exit 2
fi
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
    for f in tests/fuzz/fuzz_*.c; do
        n=$(basename "$f" .c)
        [ "$n" = fuzz_util ] || TARGETS+=("$n")
    done
fi
cmake -S . -B "$BUILD_DIR" -DCMAKE_C_COMPILER=clang -DFP8RUN_CUDA=OFF -DFP8RUN_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS" --target "${TARGETS[@]}"
status=0
for t in "${TARGETS[@]}"; do
    name=${t#fuzz_}
    out=$PWD/$BUILD_DIR/fuzz-out/$name
    bin=$PWD/$BUILD_DIR/$t
    rm -rf "$out" && mkdir -p "$out/corpus"
    # the committed corpus stays as it is: new inputs go to the working copy
    [ -d "tests/fuzz/corpus/$name" ] && cp -r "tests/fuzz/corpus/$name/." "$out/corpus/"
    echo "fuzz: $t for ${SECS}s"
    # -rss_limit_mb: a reader that allocates what the input does not hold is a finding too
    if ! (cd "$out" && TMPDIR=$PWD ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
        "$bin" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 -max_len=131072 \
        -print_final_stats=1 corpus 2>"$out/log.txt"); then
        echo "fuzz: $t FAILED (see $out/log.txt):" >&2
        tail -30 "$out/log.txt" >&2
        status=1
    fi
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb" "$out/log.txt" | sed "s/^/  $name /" || true
done
exit $status
