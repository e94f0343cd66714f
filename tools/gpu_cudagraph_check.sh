#!/usr/bin/env bash
# The training step replayed from a CUDA graph (issue 12, lever 6: FP8RUN_CUDA_GRAPH=1,
# runtime/cuda/cuda_graph.h) on one GPU, about 3 minutes, after the CUDA bundle is unpacked
# (tools/gpu_bundle.sh; the CLI and test programs in $FR, default /tmp/fr/bin). Everything goes
# to $OUT/cudagraph/; stdout is a summary of at most 40 lines.
#  1. test_gpu_cuda_graph (graph replay == node by node, bit for bit, six configurations);
#  2. `fp8run bench` of the generated Llama 125M (B16 x T1024, fp8, warmup 3, steps 10) and 1B
#     (B8 x T2048, fp8, warmup 2, steps 5), each without and with FP8RUN_CUDA_GRAPH=1: step
#     times, losses, and the graph's note (on the gemm line: captured / replayed, or why off);
#  3. if time is left: the 125M both ways with --attention fp8run (in case cuDNN's attention
#     could not be captured: the note says so).
#   OUT=/tmp/out tools/gpu_cudagraph_check.sh
set -uo pipefail
TOPIC=cudagraph
source "$(dirname "$0")/gpu_script_env.sh" # FR, FP8RUN, D, one GPU, the fixtures, $D/gpu.txt
unset FP8RUN_CUDA_GRAPH FP8RUN_PROFILE

# 1. the GPU test
t=test_gpu_cuda_graph
timeout 90 "$FR/$t" > "$D/$t.log" 2>&1
printf '%-22s rc=%s %s\n' "$t" "$?" "$(grep -E '^ +asserts' "$D/$t.log" | tr -s ' ')"
grep -oE '\([^()]*(CUDA graph|conversions)[^()]*(\([^()]*\)[^()]*)*\)' "$D/$t.log" | head -6 | cut -c1-170
grep -E "FAILED|step [0-9]+: loss|SKIP" "$D/$t.log" | head -6 | cut -c1-170

# 2. the benches
[ -f /tmp/llama_125m.onnx ] || "$FP8RUN" generate llama --preset 125m -o /tmp/llama_125m.onnx > "$D/gen125m.log" 2>&1
[ -f /tmp/llama_1b.onnx ] || "$FP8RUN" generate llama --preset 1b -o /tmp/llama_1b.onnx > "$D/gen1b.log" 2>&1
bench() { # name, graph (0/1), model, batch, seq, warmup, steps, extra flags
    local name=$1 graph=$2 m=$3 B=$4 T=$5 W=$6 S=$7 flags=${8:-}
    if [ $SECONDS -gt ${BUDGET_S:-160} ]; then echo "$name: skipped (past ${BUDGET_S:-160} s)"; return; fi
    local envs="FP8RUN_CUDA_GRAPH_UNSET=1"
    [ "$graph" = 1 ] && envs="FP8RUN_CUDA_GRAPH=1"
    env $envs timeout 75 "$FP8RUN" bench $m --batch $B --seq $T --precision fp8 --warmup $W --steps $S \
        --json "$D/$name.json" $flags > "$D/$name.txt" 2> "$D/$name.err"
    local rc=$?
    printf '%-16s rc=%d %s ms | %s | %s\n' "$name" $rc "$(grep -m1 '^step time' "$D/$name.txt" | awk '{print $3}')" \
        "$(grep -m1 '^tokens/s' "$D/$name.txt" | awk '{print $2 " tok/s"}')" \
        "$(python3 -c "
import json
r=json.load(open('$D/$name.json'))
print('loss %.4f -> %.4f' % (r['loss_first'], r['loss_last']))" 2>/dev/null)"
    [ "$graph" = 1 ] && grep -m1 '^gemm' "$D/$name.txt" | grep -o 'CUDA graph.*' | cut -c1-150
    [ $rc = 0 ] || tail -3 "$D/$name.err" | cut -c1-200
}
echo "125M fp8 B16xT1024, warmup 3, steps 10 (default attention):"
bench 125m_plain 0 /tmp/llama_125m.onnx 16 1024 3 10
bench 125m_graph 1 /tmp/llama_125m.onnx 16 1024 3 10
echo "1B fp8 B8xT2048, warmup 2, steps 5 (default attention):"
bench 1b_plain 0 /tmp/llama_1b.onnx 8 2048 2 5
bench 1b_graph 1 /tmp/llama_1b.onnx 8 2048 2 5
echo "125M again with --attention fp8run:"
bench 125m_own_plain 0 /tmp/llama_125m.onnx 16 1024 3 10 "--attention fp8run"
bench 125m_own_graph 1 /tmp/llama_125m.onnx 16 1024 3 10 "--attention fp8run"
echo "wall ${SECONDS} s; files: $D"
