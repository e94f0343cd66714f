#!/usr/bin/env bash
# Issue 12's comparison on ONE GPU, in one device call (about 5 minutes on an H200): compiled
# PyTorch (the shared baseline ../shared/baselines/torch_llama.py, bf16 and tensorwise FP8,
# --compile; copy it next to the bundle: TORCH_LLAMA, default .devpkg/torch_llama.py) and
# fp8run (tools/gpu_bench.sh: 1B B8xT2048 and 125M B16xT1024, bf16 and fp8) one after the other
# on the same GPU, then `FP8RUN_PROFILE=2 fp8run bench` of the 1B fp8 step (each op against its
# ceiling). Run from the repository root after the CUDA bundle is unpacked in /tmp/fr
# (tools/gpu_bundle.sh here; `tar -C /tmp/fr -xJf .devpkg/bundle.tar.xz` there). Everything goes
# to $OUT/compare/ (one tarball, compare.tgz, next to it: the device tool brings back few files);
# the summary is printed. This is how bench/README.md "Against compiled PyTorch (H200, session 4)"
# was made.
set -u
cd "$(dirname "$0")/.."
R=${OUT:-/tmp/out}/compare
mkdir -p "$R"
export LD_LIBRARY_PATH=/tmp/fr/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export FP8RUN=${FP8RUN:-/tmp/fr/bin/fp8run}
TORCH_LLAMA=${TORCH_LLAMA:-.devpkg/torch_llama.py}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$R/gpus.txt"
[ -f /tmp/llama_1b.onnx ] || $FP8RUN generate llama --preset 1b -o /tmp/llama_1b.onnx >/dev/null
[ -f /tmp/llama_125m.onnx ] || $FP8RUN generate llama --preset 125m -o /tmp/llama_125m.onnx >/dev/null
for c in "1b fp8" "125m fp8" "1b bf16" "125m bf16"; do
    set -- $c
    [ $SECONDS -gt ${TORCH_BUDGET_S:-330} ] && { echo "torch $1 $2: skipped (time)"; continue; }
    timeout 120 python3 "$TORCH_LLAMA" --preset $1 --precision $2 --compile --json "$R/torch_llama_$1_$2_compile.json" \
        > "$R/torch_$1_$2.txt" 2>&1
    echo "torch $1 $2: rc=$? $(tail -1 "$R/torch_$1_$2.txt" | cut -c1-200)"
done > "$R/torch.txt" 2>&1
OUT=$R/bench SIZES="1b 125m" PRECISIONS="bf16 fp8" timeout 170 tools/gpu_bench.sh > "$R/bench.txt" 2>&1
FP8RUN_PROFILE=2 timeout 60 $FP8RUN bench /tmp/llama_1b.onnx --batch 8 --seq 2048 --precision fp8 --warmup 1 --steps 3 \
    > "$R/fp8run_1b_fp8_profile.txt" 2>&1
(cd "$R/.." && tar czf compare.tgz compare)
cat "$R/gpus.txt" "$R/torch.txt"
for f in "$R"/bench/*.json; do
    python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1].split('/')[-1], '%.2f ms' % d['step_ms_median'], '%.0f tok/s' % d['tokens_per_s'], '%.1f GiB' % (d['device_memory_used_bytes'] / 2**30))" "$f"
done
sed -n '/^GPU time per run by op/,/^  all ops/p' "$R/fp8run_1b_fp8_profile.txt" | cut -c1-130 | head -30
