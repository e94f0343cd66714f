#!/usr/bin/env bash
# On a lent GPU machine, after tools/gpu_check.sh has unpacked the bundle: Hugging Face
# LlamaForCausalLM at the 125M and 1B reference configurations, exported by torch.onnx's dynamo
# exporter (tools/export_hf_llama.py; the 1B with external data), against the generated Llama of
# the same configuration (`fp8run generate llama`): what `fp8run info` fused, `fp8run bench` in
# fp8 on both (tokens/s, peak memory; JSON into $OUT), and a short `fp8run train` in fp8 on the
# export (skipped steps must be 0).
#   FP8RUN=build-cuda/fp8run SIZES="125m 1b" tools/gpu_hf_check.sh      # INFO_ONLY=1: info only
set -uo pipefail
FP8RUN=${FP8RUN:-build-cuda/fp8run}
OUT=${OUT:-/tmp/out}
SIZES=${SIZES:-"125m 1b"}
TRAIN_STEPS=${TRAIN_STEPS:-30}
mkdir -p "$OUT"
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -o 'H[0-9][0-9]*' | head -1 | tr 'H' 'h')
# training data: random token ids below the vocabulary (uint16)
python3 -c "import numpy as np; np.random.RandomState(0).randint(0, 32768, 4000000).astype('<u2').tofile('/tmp/hf_tokens.bin')"
for size in $SIZES; do
    case $size in
        125m) B=16 T=1024 W=2 S=5 ;;
        1b) B=8 T=2048 W=1 S=3 ;;
        *) echo "unknown size $size"; exit 2 ;;
    esac
    d=/tmp/hf_llama_$size
    [ -f "$d/model.onnx" ] || python3 tools/export_hf_llama.py --preset "$size" -o "$d" 2>&1 | grep -v Warning | tail -2
    g=/tmp/llama_$size.onnx
    [ -f "$g" ] || "$FP8RUN" generate llama --preset "$size" -o "$g" || exit 1
    echo "== info: HF llama $size (dynamo, opset 18)"
    "$FP8RUN" info "$d/model.onnx" --precision fp8 --batch $B --seq $T 2>&1 | grep -E "^  pass |^parameters"
    [ -n "${INFO_ONLY:-}" ] && continue
    for m in hf gen; do
        f=$d/model.onnx; [ $m = gen ] && f=$g
        echo "== bench $m llama $size B=$B T=$T fp8"
        "$FP8RUN" bench "$f" --batch $B --seq $T --precision fp8 --warmup $W --steps $S \
            --json "$OUT/${gpu:-gpu}_${m}llama${size}_b${B}_t${T}_fp8.json" 2>&1 | tail -4
    done
    echo "== train HF llama $size fp8, $TRAIN_STEPS steps"
    "$FP8RUN" train "$d/model.onnx" --data /tmp/hf_tokens.bin --batch $B --seq $T --steps $TRAIN_STEPS \
        --lr 3e-4 --precision fp8 --log-every 10 --log "$OUT/hf_llama${size}_train.jsonl" 2>&1 | tail -5
done
