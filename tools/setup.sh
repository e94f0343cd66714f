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

PKGS=(cmake make gcc pkg-config libprotobuf-c-dev protobuf-c-compiler libcunit1-dev libopenblas-dev)
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
    if "$BUILD_DIR/fp8run" help demo >/dev/null 2>&1; then
        "$BUILD_DIR/fp8run" demo
    else
        # until training lands: describe and run the bundled Llama-style model on CPU
        m=tests/fixtures/llama_tiny
        "$BUILD_DIR/fp8run" info "$m/model.onnx" --dim batch=2 --dim seq=13
        "$BUILD_DIR/fp8run" run "$m/model.onnx" --input input_ids="$m/input_input_ids.npy" \
            --output-dir "$BUILD_DIR/demo"
    fi
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
    ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
        ctest --test-dir "$BUILD_DIR-sanitize" --output-on-failure -j "$JOBS" -L cpu
    ;;
*)
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    [ -z "$cmd" ] && exit 2
    echo "setup: unknown command '$cmd'" >&2
    exit 2
    ;;
esac
