#!/usr/bin/env bash
# One-stop set-up for a fresh Debian machine: installs the Debian packages fp8run needs,
# builds it, and runs the demo or the tests.
#   tools/setup.sh demo           install deps, build, run the main job on the bundled model
#   tools/setup.sh test           install deps, build, run the test suite (ctest)
#   tools/setup.sh test-sanitize  the same under AddressSanitizer + UndefinedBehaviorSanitizer
#   tools/setup.sh deps|build     just that step
# Environment: BUILD_DIR (default build), FP8RUN_CUDA (AUTO|ON|OFF, default AUTO), JOBS.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(cmake make gcc pkg-config libprotobuf-c-dev protobuf-c-compiler libjansson-dev libcunit1-dev libopenblas-dev python3 python3-numpy)
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
BUILD_DIR=${BUILD_DIR:-build}
FP8RUN_CUDA=${FP8RUN_CUDA:-AUTO}

deps() {
    local missing=()
    for p in "${PKGS[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    echo "setup: installing Debian packages: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

build() {
    local dir=$1; shift
    cmake -S . -B "$dir" -DFP8RUN_CUDA="$FP8RUN_CUDA" "$@" >/dev/null
    cmake --build "$dir" -j "$JOBS"
}

cmd=${1:-}
case "$cmd" in
deps) deps ;;
build) deps; build "$BUILD_DIR" ;;
demo)
    deps
    build "$BUILD_DIR"
    # The main job on an embedded default: the bundled Llama-style model (byte-level, vocab
    # 128) learns to write C from fp8run's own sources, on the CPU; the loss falls from ~4.9.
    d=$BUILD_DIR/demo
    mkdir -p "$d"
    cat graph/*.c passes/*.c ops/*.c runtime/*/*.c | LC_ALL=C tr -cd '\11\12\40-\176' > "$d/corpus.txt"
    n=$(wc -c < "$d/corpus.txt")
    head -c $((n * 9 / 10)) "$d/corpus.txt" > "$d/train.txt"
    tail -c $((n - n * 9 / 10)) "$d/corpus.txt" > "$d/val.txt"
    "$BUILD_DIR/fp8run" train tests/fixtures/llama_tiny/model.onnx \
        --data "$d/train.txt" --data-dtype uint8 --val "$d/val.txt" --val-every 100 \
        --steps 400 --batch 16 --seq 64 --lr 3e-3 --warmup 30 --min-lr 3e-4 \
        --ckpt-dir "$d/ckpt" --log "$d/train.jsonl" --export "$d/llama_tiny_trained.onnx"
    "$BUILD_DIR/fp8run" eval "$d/llama_tiny_trained.onnx" --data "$d/val.txt" --data-dtype uint8 \
        --batch 16 --seq 64
    # what it writes now: C-like text after a C-like prompt (greedy)
    "$BUILD_DIR/fp8run" sample "$d/llama_tiny_trained.onnx" --prompt "static fr_status " --max-new-tokens 100
    ;;
test)
    deps
    build "$BUILD_DIR"
    ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" -L cpu
    # GPU suites skip themselves (and say so) when no GPU is present
    ctest --test-dir "$BUILD_DIR" --output-on-failure -L gpu
    ;;
test-sanitize)
    deps
    build "$BUILD_DIR-sanitize" -DFP8RUN_CUDA=OFF -DFP8RUN_SANITIZE=ON -DCMAKE_BUILD_TYPE=Debug
    # FR_TEST_SANITIZE: long training tests run fewer steps (memory errors, not convergence)
    FR_TEST_SANITIZE=1 ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
        ctest --test-dir "$BUILD_DIR-sanitize" --output-on-failure -j "$JOBS" -L cpu
    ;;
*)
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    [ -z "$cmd" ] && exit 2
    echo "setup: unknown command '$cmd'" >&2
    exit 2
    ;;
esac
