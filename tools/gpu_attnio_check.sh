#!/usr/bin/env bash
# AttentionQKV (passes/attention_io.h, ops/cuda/attention_qkv.cu) on one GPU, after the CUDA
# bundle is unpacked (tools/gpu_check.sh): everything into $OUT/attnio/, a summary (<= 40 lines)
# on stdout, about 3 minutes of wall time (each step has its own timeout).
#  1. test_gpu_attention_qkv: the op on the GPU (fp8run's kernels and cuDNN) against the CPU;
#  2. a small Llama (D 64, GQA) trained 20 steps in bf16 on the GPU with the pass on and off,
#     --attention auto and fp8run: the losses side by side (they should agree to bf16 noise);
#  3. `fp8run bench` of the 1B Llama in fp8 (B 8, T 2048) with --attention cudnn and fp8run,
#     the pass on and off: tokens/s and peak memory;
#  4. FP8RUN_PROFILE=1 of the 1B fp8 step (cuDNN, pass on): the top of the per-op profile.
#   FP8RUN=/tmp/fr/bin/fp8run BIN=/tmp/fr/bin tools/gpu_attnio_check.sh
set -uo pipefail
FP8RUN=${FP8RUN:-/tmp/fr/bin/fp8run}
BIN=${BIN:-$(dirname "$FP8RUN")}
OUT=${OUT:-/tmp/out}
D="$OUT/attnio"
mkdir -p "$D"
S="$D/summary.txt"
: > "$S"
say() { echo "$*" | tee -a "$S"; }
t0=$(date +%s)

# 1. the GPU test
timeout 75 "$BIN/test_gpu_attention_qkv" > "$D/test_gpu_attention_qkv.log" 2>&1
rc=$?
say "test_gpu_attention_qkv rc=$rc: $(grep -E 'asserts' "$D/test_gpu_attention_qkv.log" | tr -s ' ')"
grep -E "cases on cuDNN|skipped|relative L2|FAILED|SKIP" "$D/test_gpu_attention_qkv.log" | head -6 | tee -a "$S"

# 2. a small Llama trained with the pass on and off
m=/tmp/attnio_small.onnx
"$FP8RUN" generate llama --dim 256 --layers 2 --heads 4 --kv-heads 2 --ffn 512 --vocab 1024 -o "$m" > /dev/null 2>&1
python3 -c "import numpy as np; np.random.RandomState(0).randint(0, 1024, 200000).astype('<u2').tofile('/tmp/attnio_tok.bin')"
for a in auto fp8run; do
    line="train bf16 --attention $a, loss at steps 1/10/20:"
    for io in on off; do
        f=""
        [ $io = off ] && f="--no-fuse-attention-io"
        l="$D/train_${a}_${io}.jsonl"
        timeout 40 "$FP8RUN" train "$m" --data /tmp/attnio_tok.bin --batch 4 --seq 256 --steps 20 --lr 1e-3 \
            --precision bf16 --attention $a $f --log "$l" > "$D/train_${a}_${io}.log" 2>&1
        line="$line io-$io $(python3 -c "
import json,sys
r=[x['loss'] for x in map(json.loads, open('$l')) if 'loss' in x]
print('%.5f/%.5f/%.5f' % (r[0], r[9], r[19]) if len(r) >= 20 else 'failed')" 2>/dev/null || echo failed)"
    done
    say "$line"
done

# 3. the 1B fp8 bench: cuDNN and fp8run's attention, the pass on and off
g=/tmp/llama_1b.onnx
[ -f "$g" ] || "$FP8RUN" generate llama --preset 1b -o "$g" > /dev/null 2>&1
for a in cudnn fp8run; do
    for io in on off; do
        f=""
        [ $io = off ] && f="--no-fuse-attention-io"
        j="$D/bench_1b_fp8_${a}_io-${io}.json"
        timeout 45 "$FP8RUN" bench "$g" --batch 8 --seq 2048 --precision fp8 --warmup 1 --steps 3 --attention $a $f \
            --json "$j" > "$D/bench_1b_fp8_${a}_io-${io}.log" 2>&1
        say "bench 1b fp8 --attention $a io-$io: $(python3 -c "
import json
r=json.load(open('$j'))
print('%.0f tok/s, step %.1f ms, planned %.1f GiB, used %.1f GiB, loss %.4f->%.4f, %s' % (r['tokens_per_s'], r['step_ms_median'],
      r['memory_planned_bytes'] / 2**30, r['device_memory_used_bytes'] / 2**30, r['loss_first'], r['loss_last'], r['attention'][:60]))" 2>/dev/null || tail -1 "$D/bench_1b_fp8_${a}_io-${io}.log")"
    done
done

# 4. the profile of the 1B fp8 step (cuDNN, pass on)
FP8RUN_PROFILE=1 timeout 45 "$FP8RUN" bench "$g" --batch 8 --seq 2048 --precision fp8 --warmup 1 --steps 2 \
    --attention cudnn > "$D/profile_1b_fp8_cudnn.txt" 2>&1
say "profile (1B fp8, cuDNN, pass on; full: profile_1b_fp8_cudnn.txt):"
grep -iE "AttentionQKV|Transpose|Split|Concat|Rotary|Attention|total" "$D/profile_1b_fp8_cudnn.txt" | head -10 | tee -a "$S"
say "wall $(( $(date +%s) - t0 )) s"
