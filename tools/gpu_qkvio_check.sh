#!/usr/bin/env bash
# AttentionQKV's staging kernels (issue 12: ops/cuda/attention_qkv.cu, attention_qkv_stage.cuh)
# on one GPU, about 3 minutes, after the CUDA bundle is unpacked (tools/gpu_bundle.sh; the CLI
# and test programs in $FR, default /tmp/fr/bin). Everything goes to $OUT/qkvio/; stdout is a
# summary of at most 40 lines.
#  1. test_gpu_attention_qkv and test_gpu_attention_cudnn (the ops on the GPU against the CPU);
#  2. `fp8run bench` of the generated Llama 1B (B8 x T2048, fp8, --attention cudnn, warmup 2,
#     steps 6) with --fuse-attention-io and without: step times, tokens/s, losses;
#  3. FP8RUN_PROFILE=1 of the same step with the pass on (and off, if time is left): the
#     AttentionQKV / AttentionQKVGrad lines (on) and the attention-related lines (off).
#   OUT=/tmp/out tools/gpu_qkvio_check.sh
set -uo pipefail
TOPIC=qkvio
source "$(dirname "$0")/gpu_script_env.sh" # FR, FP8RUN, D, one GPU, the fixtures, $D/gpu.txt

# 1. the GPU tests, side by side
TESTS="test_gpu_attention_qkv test_gpu_attention_cudnn"
for t in $TESTS; do
    ( timeout 60 "$FR/$t" > "$D/$t.log" 2>&1; echo $? > "$D/$t.rc" ) &
done
wait
for t in $TESTS; do
    printf '%-26s rc=%s %s\n' "$t" "$(cat "$D/$t.rc")" "$(grep -E '^ +asserts' "$D/$t.log" | tr -s ' ')"
    grep -E "cases on cuDNN|skipped|relative L2|FAILED" "$D/$t.log" | head -4 | cut -c1-160
done

# 2. the 1B fp8 step with the pass on and off
m=/tmp/llama_1b.onnx
[ -f $m ] || "$FP8RUN" generate llama --preset 1b -o $m > "$D/gen1b.log" 2>&1
bench() { # name, env, flags, warmup, steps
    local name=$1 envs=$2 flags=$3 W=$4 S=$5
    if [ $SECONDS -gt ${BUDGET_S:-150} ]; then echo "$name: skipped (past ${BUDGET_S:-150} s)"; return; fi
    env $envs timeout 60 "$FP8RUN" bench $m --batch 8 --seq 2048 --precision fp8 --attention cudnn --warmup $W \
        --steps $S --json "$D/$name.json" $flags > "$D/$name.txt" 2> "$D/$name.err"
    local rc=$?
    printf '%-14s rc=%d %s | %s | %s\n' "$name" $rc "$(grep -m1 '^step time' "$D/$name.txt" | awk '{print $3, $4}')" \
        "$(grep -m1 '^tokens/s' "$D/$name.txt" | awk '{print $2 " tok/s"}')" \
        "$(python3 -c "
import json
r=json.load(open('$D/$name.json'))
print('loss %.4f -> %.4f, planned %.1f GiB' % (r['loss_first'], r['loss_last'], r['memory_planned_bytes'] / 2**30))" 2>/dev/null)"
    [ $rc = 0 ] || tail -3 "$D/$name.err" | cut -c1-200
}
# the pass's flag sets the opposite of its default: --fuse-attention-io while it is off by
# default, --no-fuse-attention-io once it is on
if "$FP8RUN" bench --help 2>&1 | grep -q -- '--no-fuse-attention-io'; then ON="" OFF=--no-fuse-attention-io; else
    ON=--fuse-attention-io OFF=""; fi
echo "1B fp8 B8xT2048 --attention cudnn, warmup 2, steps 6 (pass on: '${ON:-default}', off: '${OFF:-default}'):"
bench io_off "" "$OFF" 2 6
bench io_on "" "$ON" 2 6

# 3. the profiles (pass on first: its lines are the point)
echo "profile, pass on (FP8RUN_PROFILE=1; whole table in profile_on.txt):"
bench profile_on FP8RUN_PROFILE=1 "$ON" 1 3
grep -m1 "^  op " "$D/profile_on.txt" 2>/dev/null | cut -c1-130
grep -E '^  (AttentionQKV|AttentionQKVGrad) ' "$D/profile_on.txt" 2>/dev/null | cut -c1-130
grep -E '^  all ops' "$D/profile_on.txt" 2>/dev/null | cut -c1-130
echo "profile, pass off (the nodes the pass replaces; profile_off.txt):"
bench profile_off FP8RUN_PROFILE=1 "$OFF" 1 3
grep -E '^  (Attention|AttentionGrad|Split|Concat|Transpose|Rotary|RotaryGrad|Reshape) ' "$D/profile_off.txt" 2>/dev/null |
    cut -c1-130
grep -E '^  all ops' "$D/profile_off.txt" 2>/dev/null | cut -c1-130
echo "wall ${SECONDS} s; files: $D"
