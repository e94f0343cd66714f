#!/usr/bin/env bash
# The fp8 quantization work of issue 12 on one GPU (about 2-3 minutes): the GPU tests of the
# Linear family (test_gpu_linear, test_gpu_gemm, test_gpu_quantize: codes and amax bit for bit
# against the CPU), then `fp8run bench` of the generated Llama 1B (B8 x T2048, fp8, the default
# delayed recipe) and one FP8RUN_PROFILE=1 run: the step time and the three `Linear* fp8`
# profile lines (ms, of which in the GEMM: the rest is quantization / copies).
# Run from the repository root on the device after the CUDA bundle is unpacked (tools/gpu_bundle.sh;
# the CLI and test programs in $FR, default /tmp/fr/bin). Everything goes to $OUT/quant/; stdout
# is a summary of at most 40 lines.
set -uo pipefail
TOPIC=quant
source "$(dirname "$0")/gpu_script_env.sh" # FR, FP8RUN, D, one GPU, the fixtures, $D/gpu.txt

# 1. tests, side by side (each uses a small part of the GPU)
TESTS="test_gpu_linear test_gpu_gemm test_gpu_quantize"
for t in $TESTS; do
    ( timeout 100 "$FR/$t" > "$D/$t.log" 2>&1; echo $? > "$D/$t.rc" ) &
done
wait
for t in $TESTS; do
    printf '%-20s rc=%s %s\n' "$t" "$(cat "$D/$t.rc" 2>/dev/null)" \
        "$(grep -E '^ +(tests|asserts)' "$D/$t.log" | tr -s ' ' | tr '\n' ' ')"
    grep -E 'FAILED|failed|SKIP' "$D/$t.log" | head -4 | cut -c1-160
done

# 2. the 1B bench (delayed recipe by default), then one profiled run
m1=/tmp/llama_1b.onnx
[ -f $m1 ] || "$FP8RUN" generate llama --preset 1b -o $m1 > "$D/gen1b.log" 2>&1
bench() { # name, env, warmup, steps
    local name=$1 envs=$2 W=$3 S=$4
    if [ $SECONDS -gt ${BUDGET_S:-150} ]; then echo "$name: skipped (past ${BUDGET_S:-150} s)"; return; fi
    env $envs timeout 100 "$FP8RUN" bench $m1 --batch 8 --seq 2048 --precision fp8 --warmup $W --steps $S \
        --json "$D/$name.json" > "$D/$name.txt" 2> "$D/$name.err"
    local rc=$?
    printf '%-12s rc=%d %s | %s\n' "$name" $rc "$(grep -m1 '^step time' "$D/$name.txt" | awk '{print $3, $4}')" \
        "$(grep -m1 '^tokens/s' "$D/$name.txt" | awk '{print $2 " tok/s"}')"
    [ $rc = 0 ] || tail -3 "$D/$name.err" | cut -c1-200
}
echo "1B fp8 B8xT2048 (delayed recipe):"
bench 1b_fp8 "" 2 6
bench 1b_profile FP8RUN_PROFILE=1 1 3
echo "profile (op, nodes, ms, share, in GEMM; the rest is outside the GEMM):"
grep -E '^  (op  |Linear(GradData|GradWeight)? fp8 )' "$D/1b_profile.txt" | cut -c1-100
awk '/^  Linear(GradData|GradWeight)? fp8 / {t += $4; g += $6} END {if (t) printf "  Linear* fp8: %.3f ms, %.3f in GEMM, %.3f outside\n", t, g, t - g}' \
    "$D/1b_profile.txt"
echo "before (H200, bench/h200_session3/fp8run_1b_fp8_profile.txt): step 189.11 ms; Linear* fp8 79.545 ms, 52.735 in GEMM, 26.810 outside"
echo "files: $D"
