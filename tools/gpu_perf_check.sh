#!/usr/bin/env bash
# The GEMM work of issue 12 on one GPU (about 4 minutes): the GPU tests of the GEMM code, then
# `fp8run bench` of the generated Llama 1B (B8 x T2048, fp8, --attention cudnn) with the fp8
# forward's fast accumulation off/on and the timed cuBLASLt algorithms off/on, its profile with
# each op's ceiling (FP8RUN_PROFILE=2), and the 125M (B16 x T1024) with both off / both on.
# Run from the repository root on the device after the CUDA bundle is unpacked (tools/gpu_bundle.sh;
# the CLI and test programs in $FR, default /tmp/fr/bin). Everything goes to $OUT/perf/; stdout is
# a summary of at most 40 lines.
set -uo pipefail
TOPIC=perf
source "$(dirname "$0")/gpu_script_env.sh" # FR, FP8RUN, D, one GPU, the fixtures, $D/gpu.txt

# 1. tests (side by side; each uses a small part of the GPU). test_gpu_train (its GPU-vs-CPU
#    runs set the exact path) only with TRAIN_TEST=1: tools/gpu_check.sh runs it with the rest.
TESTS="test_gpu_gemm test_gpu_linear test_gpu_matmul test_gpu_matmul_bf16"
[ "${TRAIN_TEST:-0}" = 1 ] && TESTS="$TESTS test_gpu_train"
for t in $TESTS; do
    ( timeout 90 "$FR/$t" > "$D/$t.log" 2>&1; echo $? > "$D/$t.rc" ) &
done
wait
for t in $TESTS; do
    printf '%-22s rc=%s %s\n' "$t" "$(cat "$D/$t.rc")" "$(grep -E '^ +asserts' "$D/$t.log" | tr -s ' ')"
done
grep -E 'fast vs exact' "$D/test_gpu_gemm.log" | sed 's/^ */  /' | head -3

# 2. benches: name, env, flags, model, B, T, warmup, steps
bench() {
    local name=$1 envs=$2 flags=$3 m=$4 B=$5 T=$6 W=$7 S=$8
    if [ $SECONDS -gt ${BUDGET_S:-200} ]; then echo "$name: skipped (past ${BUDGET_S:-200} s)"; return; fi
    env $envs timeout 100 "$FP8RUN" bench "$m" --batch $B --seq $T --precision fp8 --attention cudnn --warmup $W \
        --steps $S --json "$D/$name.json" $flags > "$D/$name.txt" 2> "$D/$name.err"
    local rc=$?
    printf '%-26s rc=%d %s | %s\n' "$name" $rc "$(grep -m1 '^step time' "$D/$name.txt" | awk '{print $3, $4}')" \
        "$(grep -m1 '^tokens/s' "$D/$name.txt" | awk '{print $2 " tok/s"}')"
}
m1=/tmp/llama_1b.onnx m0=/tmp/llama_125m.onnx
[ -f $m1 ] || "$FP8RUN" generate llama --preset 1b -o $m1 > "$D/gen1b.log" 2>&1
[ -f $m0 ] || "$FP8RUN" generate llama --preset 125m -o $m0 > "$D/gen125m.log" 2>&1
# the most telling first: a run past BUDGET_S seconds skips the rest
echo "1B fp8 B8xT2048 --attention cudnn (exact/fast accumulation, heuristic/tuned algorithms):"
bench 1b_exact_heuristic FP8RUN_GEMM_TUNE=0 --no-fp8-fast-accum $m1 8 2048 2 6
bench 1b_fast_tuned FP8RUN_GEMM_TUNE=1 "" $m1 8 2048 2 6
grep -m1 '^gemm' "$D/1b_fast_tuned.txt" | cut -c1-300
echo "125M fp8 B16xT1024 --attention cudnn:"
bench 125m_exact_heuristic FP8RUN_GEMM_TUNE=0 --no-fp8-fast-accum $m0 16 1024 2 8
bench 125m_fast_tuned FP8RUN_GEMM_TUNE=1 "" $m0 16 1024 2 8
echo "1B profile (fast + tuned; FP8RUN_PROFILE=2; the whole table in 1b_profile.txt):"
bench 1b_profile "FP8RUN_PROFILE=2" "" $m1 8 2048 1 3 > "$D/1b_profile.rc"
sed -n '/^GPU time per run by op/,/^  all ops/p' "$D/1b_profile.txt" | sed -n '1,2p;4,16p;/^  all ops/p' | cut -c1-130
echo "1B, one lever at a time:"
bench 1b_fast_heuristic FP8RUN_GEMM_TUNE=0 "" $m1 8 2048 2 6
bench 1b_exact_tuned FP8RUN_GEMM_TUNE=1 --no-fp8-fast-accum $m1 8 2048 2 6
echo "files: $D"
