#!/usr/bin/env bash
# The narrowed Q/K/V projection of issue 12 on one GPU (about 3 minutes): the GPU tests that
# touch it (test_gpu_attention_qkv: bfloat16 X on every path against the CPU; test_gpu_linear:
# y_dtype bfloat16; test_gpu_train), then `fp8run bench` of the generated Llama 1B (B8 x T2048,
# fp8, warmup 2, steps 6) with narrowing (the default: Q/K/V and gate/up Linears write bf16)
# and with --no-narrow-activations: step time, tokens/s, the device's peak memory and the plan.
# Run from the repository root on the device after the CUDA bundle is unpacked (tools/gpu_bundle.sh;
# the CLI and test programs in $FR, default /tmp/fr/bin). Everything goes to $OUT/qkvbf16/;
# stdout is a summary of at most 40 lines.
set -uo pipefail
TOPIC=qkvbf16
source "$(dirname "$0")/gpu_script_env.sh" # FR, FP8RUN, D, one GPU, the fixtures, $D/gpu.txt

# 1. tests, side by side (each uses a small part of the GPU)
TESTS="test_gpu_attention_qkv test_gpu_linear test_gpu_train"
for t in $TESTS; do
    ( timeout 120 "$FR/$t" > "$D/$t.log" 2>&1; echo $? > "$D/$t.rc" ) &
done
wait
for t in $TESTS; do
    printf '%-24s rc=%s %s\n' "$t" "$(cat "$D/$t.rc" 2>/dev/null)" \
        "$(grep -E '^ +(tests|asserts)' "$D/$t.log" | tr -s ' ' | tr '\n' ' ')"
    grep -E 'FAILED|failed|SKIP|skipped|cases on cuDNN' "$D/$t.log" | head -4 | cut -c1-160
done

# 2. the 1B bench, narrowed (default) and not
m1=/tmp/llama_1b.onnx
[ -f $m1 ] || "$FP8RUN" generate llama --preset 1b -o $m1 > "$D/gen1b.log" 2>&1
mem() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print('peak seen %.2f GiB, planned %.2f GiB' % (d['device_memory_used_bytes']/2**30, d['memory_planned_bytes']/2**30))" "$1" 2>/dev/null; }
bench() { # name, extra options
    local name=$1; shift
    if [ $SECONDS -gt ${BUDGET_S:-170} ]; then echo "$name: skipped (past ${BUDGET_S:-170} s)"; return; fi
    timeout 110 "$FP8RUN" bench $m1 --batch 8 --seq 2048 --precision fp8 --warmup 2 --steps 6 "$@" \
        --json "$D/$name.json" > "$D/$name.txt" 2> "$D/$name.err"
    local rc=$?
    printf '%-10s rc=%d %s | %s | %s\n' "$name" $rc "$(grep -m1 '^step time' "$D/$name.txt" | awk '{print $3, $4}')" \
        "$(grep -m1 '^tokens/s' "$D/$name.txt" | awk '{print $2 " tok/s"}')" "$(mem "$D/$name.json")"
    grep -m1 -i 'narrow' "$D/$name.txt" "$D/$name.err" | cut -c1-160
    [ $rc = 0 ] || tail -3 "$D/$name.err" | cut -c1-200
}
echo "1B fp8 B8xT2048 (warmup 2, steps 6):"
bench narrow
bench wide --no-narrow-activations
echo "expected: narrow about 1.6 GB (1.5 GiB) less peak than wide (the 16 saved Q/K/V outputs in bf16), and no slower"
echo "files: $D"
