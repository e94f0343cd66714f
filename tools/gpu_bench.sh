#!/usr/bin/env bash
# The reference benchmark (bench/README.md): the generated Llama 125M at B=16 T=1024 and 1B at
# B=8 T=2048, in fp32, bf16 and fp8, one `fp8run bench` JSON each into $OUT (default /tmp/out),
# named <gpu>_llama<size>_b<B>_t<T>_<precision>.json. Run on a GPU machine from the repo root:
#   FP8RUN=build/fp8run tools/gpu_bench.sh            # everything
#   SIZES="125m" PRECISIONS="bf16 fp8" tools/gpu_bench.sh
# EXTRA adds options to every bench (e.g. EXTRA="--no-fuse-attention").
# ATTENTIONS lists --attention choices to bench each with (default auto); a run with another
# one gets _attn-<choice> in its name. fp8run's attention against cuDNN's at the 1B shapes:
#   SIZES=1b PRECISIONS="bf16 fp8" ATTENTIONS="fp8run cudnn" tools/gpu_bench.sh
# (each JSON's "attention" field says which kernels ran; the kernels alone, without the
# model around them: FR_ATTN_BENCH=1 build-cuda/test_gpu_attention_cudnn).
set -uo pipefail
FP8RUN=${FP8RUN:-build/fp8run}
OUT=${OUT:-/tmp/out}
SIZES=${SIZES:-"125m 1b"}
PRECISIONS=${PRECISIONS:-"fp32 bf16 fp8"}
ATTENTIONS=${ATTENTIONS:-auto}
mkdir -p "$OUT"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -o 'H[0-9][0-9]*' | head -1 | tr 'H' 'h')
for size in $SIZES; do
    case $size in
        125m) B=16 T=1024 W=2 S=5 ;;
        1b) B=8 T=2048 W=1 S=3 ;;
        *) echo "unknown size $size"; exit 2 ;;
    esac
    m=/tmp/llama_$size.onnx
    [ -f "$m" ] || "$FP8RUN" generate llama --preset "$size" -o "$m" || exit 1
    for p in $PRECISIONS; do
        for a in $ATTENTIONS; do
            sfx=""
            [ "$a" = auto ] || sfx="_attn-$a"
            j="$OUT/${gpu:-gpu}_llama${size}_b${B}_t${T}_${p}${sfx}.json"
            echo "== llama $size B=$B T=$T $p --attention $a"
            "$FP8RUN" bench "$m" --batch $B --seq $T --precision $p --warmup $W --steps $S --attention "$a" \
                --json "$j" ${EXTRA:-}
        done
    done
done
