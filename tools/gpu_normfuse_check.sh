#!/usr/bin/env bash
# The residual stream + RMSNorm work of issue 12 on one GPU (about 3 minutes): the GPU tests of
# the norm kernels (test_gpu_add_norm: AddRMSNorm(Grad); test_gpu_norm: RMSNormalization /
# RMSNormGrad, whose float32 rows now take ops/cuda/add_norm.cu), then `fp8run bench` of the
# generated Llama 1B (B8 x T2048, fp8, --attention cudnn) with the residual fusion on and off
# (--no-fuse-residual-norm), and one profile with it on (FP8RUN_PROFILE=2: each op's ceiling),
# printing the norm / Add lines. Run from the repository root on the device after the CUDA bundle
# is unpacked (tools/gpu_bundle.sh; the CLI and test programs in $FR, default /tmp/fr/bin).
# Everything goes to $OUT/normfuse/; stdout is a summary of at most 40 lines.
set -uo pipefail
TOPIC=normfuse
source "$(dirname "$0")/gpu_script_env.sh" # FR, FP8RUN, D, one GPU, the fixtures, $D/gpu.txt

# 1. tests, side by side (the 1B model is generated meanwhile)
m1=/tmp/llama_1b.onnx
[ -f $m1 ] || ( "$FP8RUN" generate llama --preset 1b -o $m1 > "$D/gen1b.log" 2>&1 ) &
TESTS="test_gpu_add_norm test_gpu_norm"
for t in $TESTS; do
    ( timeout 100 "$FR/$t" > "$D/$t.log" 2>&1; echo $? > "$D/$t.rc" ) &
done
wait
for t in $TESTS; do
    printf '%-20s rc=%s %s\n' "$t" "$(cat "$D/$t.rc")" "$(grep -E '^ +asserts' "$D/$t.log" | tr -s ' ')"
    grep -E 'FAILED|differs|SKIP' "$D/$t.log" | head -4
done

# 2. benches: name, env, flags, warmup, steps
bench() {
    local name=$1 envs=$2 flags=$3 W=$4 S=$5
    if [ $SECONDS -gt ${BUDGET_S:-150} ]; then echo "$name: skipped (past ${BUDGET_S:-150} s)"; return; fi
    env $envs timeout 80 "$FP8RUN" bench $m1 --batch 8 --seq 2048 --precision fp8 --attention cudnn --warmup $W \
        --steps $S --json "$D/$name.json" $flags > "$D/$name.txt" 2> "$D/$name.err"
    local rc=$?
    printf '%-22s rc=%d %s | %s\n' "$name" $rc "$(grep -m1 '^step time' "$D/$name.txt" | awk '{print $3, $4}')" \
        "$(grep -m1 '^tokens/s' "$D/$name.txt" | awk '{print $2 " tok/s"}')"
    [ $rc = 0 ] || tail -3 "$D/$name.err"
}
echo "1B fp8 B8xT2048 --attention cudnn, residual norm fusion on / off:"
bench 1b_fused "" "" 2 6
bench 1b_unfused "" --no-fuse-residual-norm 2 6
grep -m1 'fuse_residual_norm' "$D/1b_fused.txt" | cut -c1-120
echo "1B profile, fusion on (FP8RUN_PROFILE=2; whole table in 1b_profile.txt):"
bench 1b_profile "FP8RUN_PROFILE=2" "" 1 3
sed -n '/^GPU time per run by op/,/^  all ops/p' "$D/1b_profile.txt" |
    grep -E '^GPU time|^  op |RMSNorm|^  Add |^  all ops' | cut -c1-130
echo "files: $D"
