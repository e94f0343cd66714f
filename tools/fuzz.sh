#!/usr/bin/env bash
# Build the libFuzzer targets (tests/fuzz/fuzz_*.c) with clang, ASan and UBSan, and run each on
# a copy of its committed seed corpus (tests/fuzz/corpus/TARGET).
#   tools/fuzz.sh ci [TARGET...]          what CI runs (.ci/run): a fixed seed and a fixed number
#                                         of inputs per target (RUNS below, ~25-30 s of CPU each),
#                                         no time limit: a run does the same work on any machine,
#                                         and repeats input for input on the same one
#   tools/fuzz.sh [SECONDS [TARGET...]]   exploration: SECONDS per target (default 60), seed
#                                         random, as long as the machine allows
# Only the fuzz targets and the library sources they link are built (fp8run_fuzz_readers in
# CMakeLists.txt: no trainer, no tests), at -O1 with line tables.
# Environment: BUILD_DIR (default build-fuzz), JOBS (compile jobs), FUZZ_JOBS (targets run at
# once, default 1), FUZZ_SEED (ci: default 1), FUZZ_RUNS (ci: inputs for every target instead of
# RUNS). Scratch files go to /dev/shm when it is writable (the readers take files: on a busy disk
# that is 10x faster). A crash, leak, timeout or OOM leaves its input in
# $BUILD_DIR/fuzz-out/TARGET/ (the message names the target and that file) and makes the script
# exit 1: once fixed, add the input to the seed corpus and, where it fits, a test.
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=time
SECS=60
if [ "${1:-}" = ci ]; then
    MODE=ci
    shift
elif [ -n "${1:-}" ]; then
    SECS=$1
    shift
fi
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
FUZZ_JOBS=${FUZZ_JOBS:-1}
BUILD_DIR=${BUILD_DIR:-build-fuzz}
# ci: inputs per target (the seed corpus counts): 19-29 s of CPU each for the binary readers,
# 6-8 s for the text readers (plot's logs, prepare's .jsonl, the .fbs metadata as text) on the
# 2-core dev machine: ~2.5 min in all
declare -A RUNS=([fuzz_onnx]=255000 [fuzz_onnx_ext]=425000 [fuzz_fbs]=21000 [fuzz_ckpt]=85000
    [fuzz_npy]=425000 [fuzz_tokens]=340000 [fuzz_safetensors]=170000 [fuzz_fbs_meta]=4000
    [fuzz_plot_log]=30000 [fuzz_jsonl]=1000000)
DEFAULT_RUNS=50000
if ! command -v clang >/dev/null; then
    echo "fuzz: clang is needed (apt-get install -y clang)" >&2
    exit 2
fi
probe=$(mktemp -d)
echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return d && n > 99; }' >"$probe/p.c"
if ! clang -fsanitize=fuzzer,address,undefined "$probe/p.c" -o "$probe/p" 2>/dev/null; then
    rm -rf "$probe"
    echo "fuzz: clang cannot link libFuzzer (apt-get install -y libclang-rt-$(clang -dumpversion | cut -d. -f1)-dev)" >&2
    exit 2
fi
rm -rf "$probe"
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
    for f in tests/fuzz/fuzz_*.c; do
        n=$(basename "$f" .c)
        [ "$n" = fuzz_util ] || TARGETS+=("$n")
    done
fi
cmake -S . -B "$BUILD_DIR" -DCMAKE_C_COMPILER=clang -DFP8RUN_CUDA=OFF -DFP8RUN_FUZZ=ON \
    -DCMAKE_BUILD_TYPE=None "-DCMAKE_C_FLAGS=-O1 -gline-tables-only" >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS" --target "${TARGETS[@]}"
BUILD_ABS=$(cd "$BUILD_DIR" && pwd)

SHM=$([ -w /dev/shm ] && echo /dev/shm || echo /tmp)
NORAND=()
if [ $MODE = ci ]; then
    # The same run every time needs the same addresses and paths: libFuzzer turns what the
    # code compares (pointers, the readers' resolved paths) into mutations. So ASLR is off
    # for the targets (where the machine lets setarch do it) and the scratch folder has a
    # fixed name, one ci run at a time per machine (flock).
    SCRATCH=$SHM/fp8run-fuzz-ci
    if command -v flock >/dev/null; then
        exec 9>"$SCRATCH.lock"
        flock 9
    fi
    rm -rf "$SCRATCH" && mkdir -p "$SCRATCH"
    if setarch "$(uname -m)" -R true 2>/dev/null; then
        NORAND=(setarch "$(uname -m)" -R)
    else
        echo "fuzz: note: setarch cannot turn ASLR off here: runs may differ from machine to machine" >&2
    fi
else
    SCRATCH=$(mktemp -d "$SHM/fp8run-fuzz.XXXXXX")
fi
trap 'rm -rf "$SCRATCH"' EXIT

# One target: its corpus copy and temporary files in $SCRATCH, log and findings in $out.
run_one() {
    local t=$1 name=${1#fuzz_} out=$BUILD_ABS/fuzz-out/${1#fuzz_} bin=$BUILD_ABS/$1
    local work=$SCRATCH/$name
    rm -rf "$out" "$work" && mkdir -p "$out" "$work/corpus"
    # the committed corpus stays as it is: new inputs go to the working copy
    [ -d "tests/fuzz/corpus/$name" ] && cp -r "tests/fuzz/corpus/$name/." "$work/corpus/"
    local args=(-timeout=10)
    if [ $MODE = ci ]; then
        # -reload=0: nothing time-based; -timeout generous for a loaded machine
        args=(-seed="${FUZZ_SEED:-1}" -runs="${FUZZ_RUNS:-${RUNS[$t]:-$DEFAULT_RUNS}}" -reload=0 -timeout=30)
    else
        args+=(-max_total_time="$SECS")
    fi
    # The same environment and arguments wherever the checkout is (their size moves the stack,
    # whose addresses the code compares too): the binary and the output folder through links.
    ln -s "$bin" "$work/target"
    ln -s "$out" "$work/out"
    local envs=(env -i "PATH=/usr/lib/llvm-$(clang -dumpversion | cut -d. -f1)/bin:/usr/bin:/bin"
        "FP8RUN_FUZZ_DIR=$work/tmp" ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1)
    # -rss_limit_mb: a reader that allocates what the input does not hold is a finding too
    local rc=0 TIMEFORMAT='%R %U %S'
    { time (cd "$work" && "${envs[@]}" ${NORAND[@]+"${NORAND[@]}"} ./target "${args[@]}" -rss_limit_mb=2048 \
        -max_len=131072 -print_final_stats=1 -artifact_prefix=out/ corpus >"$out/log.txt" 2>&1); } 2>"$out/time" ||
        rc=$?
    echo $rc >"$out/rc"
}

echo "fuzz: ${TARGETS[*]} ($([ $MODE = ci ] && echo "ci: seed ${FUZZ_SEED:-1}, fixed runs" || echo "${SECS}s each"), $FUZZ_JOBS at once)"
for t in "${TARGETS[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$FUZZ_JOBS" ]; do wait -n || true; done
    run_one "$t" &
done
wait

status=0
for t in "${TARGETS[@]}"; do
    name=${t#fuzz_}
    out=$BUILD_DIR/fuzz-out/$name
    rc=$(cat "$out/rc" 2>/dev/null || echo 1)
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/log.txt" | tail -1)
    rss=$(sed -n 's/^stat::peak_rss_mb: *//p' "$out/log.txt" | tail -1)
    tm=$(awk '{printf "%.0f s (CPU %.0f s)", $1, $2 + $3}' "$out/time" 2>/dev/null || true)
    if [ "$rc" = 0 ]; then
        echo "fuzz: $t ok: ${runs:-?} inputs in ${tm:-? s}, peak RSS ${rss:-?} MB"
        continue
    fi
    status=1
    found=$(find "$out" -maxdepth 1 -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' \
        -o -name 'oom-*' -o -name 'slow-unit-*' \) | head -1)
    echo "fuzz: $t FAILED (exit $rc) after ${runs:-?} inputs; log $out/log.txt" >&2
    tail -40 "$out/log.txt" >&2
    if [ -n "$found" ]; then
        echo "fuzz: $t FAILED: the input is $found; reproduce with: $BUILD_DIR/$t $found" >&2
    else
        echo "fuzz: $t FAILED without an input file (see $out/log.txt)" >&2
    fi
done
exit $status
