#!/usr/bin/env bash
# --deterministic on the GPU (issue 15 / 12), after the CUDA bundle is unpacked
# (tools/gpu_check.sh): everything into $OUT/determ/, a summary (<= 40 lines) on stdout and in
# $OUT/determ/summary.txt, at most about 4 minutes of wall time (each run has its own timeout; a
# phase that would end after BUDGET seconds, default 235, is skipped and says so). Uses the GPUs
# of CUDA_VISIBLE_DEVICES (the first; the first two for phase 3).
#  1. test_gpu_determ: a small generated Llama trained twice with --deterministic, bf16 and fp8,
#     cuDNN's attention (auto) and fp8run's: bit-identical losses and weights; the attention line.
#  2. `fp8run bench` of the generated 1B Llama, fp8, B 8 x T 2048, --warmup 2 --steps 6: the
#     default, then --deterministic (step time, tokens/s, memory, attention and gemm lines), one
#     after the other on the first GPU; a second --deterministic bench later (its losses should
#     equal the first's; with 2 GPUs it runs on the second beside phase 3's 1-GPU run).
#  3. With 2 GPUs visible: the 125M Llama, fp8, T 2048, 50 steps with --deterministic: 2 GPUs x
#     B 1 against 1 GPU x B 1 --grad-accum 2 (max |loss diff|, expected 0: a 2-rank sum is one
#     add, as the accumulation's), and the 2-GPU run repeated (expected 0).
#   FP8RUN=/tmp/fr/bin/fp8run BIN=/tmp/fr/bin tools/gpu_determ_check.sh
set -uo pipefail
FP8RUN=${FP8RUN:-/tmp/fr/bin/fp8run}
BIN=${BIN:-$(dirname "$FP8RUN")}
OUT=${OUT:-/tmp/out}
D="$OUT/determ"
BUDGET=${BUDGET:-235}
mkdir -p "$D"
S="$D/summary.txt"
: > "$S"
rm -f "$D"/bench_*.json "$D"/*.jsonl # no figures from an earlier run
say() { echo "$*" | tee -a "$S"; }
T0=$(date +%s)
elapsed() { echo $(($(date +%s) - T0)); }
room() { # room SECONDS WHAT: whether a phase of about that long still fits the budget
    if [ $(($(elapsed) + $1)) -gt "$BUDGET" ]; then
        say "SKIPPED (time: $(elapsed) s used of $BUDGET): $2"
        return 1
    fi
}
export NCCL_NVLS_ENABLE=0
VIS=${CUDA_VISIBLE_DEVICES:-$(nvidia-smi --query-gpu=index --format=csv,noheader | paste -sd, -)}
G0=$(echo "$VIS" | cut -d, -f1)
NG=$(echo "$VIS" | tr ',' '\n' | grep -c .)
say "determ check: $NG GPU(s) [$VIS] $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1); $FP8RUN"

M1=/tmp/llama_1b.onnx M125=/tmp/determ_llama_125m.onnx TOK=/tmp/determ_tok.bin
[ -f $M1 ] || "$FP8RUN" generate llama --preset 1b -o $M1 > "$D/gen1b.log" 2>&1 &
[ -f $M125 ] || "$FP8RUN" generate llama --preset 125m -o $M125 > "$D/gen125m.log" 2>&1 &
python3 -c "import numpy as np; np.random.default_rng(12).integers(0, 32768, 2_000_000).astype('<u2').tofile('$TOK')"

# ---- 1. the GPU test ----
CUDA_VISIBLE_DEVICES=$G0 timeout 120 "$BIN/test_gpu_determ" > "$D/test_gpu_determ.log" 2>&1
say "test_gpu_determ rc=$?: $(grep -E '^ +asserts' "$D/test_gpu_determ.log" | tr -s ' ')"
grep -E "deterministic:|attention:|cuDNN ran|shapes|default context|SKIP|FAILED|CU_ASSERT|differs|relative L2" "$D/test_gpu_determ.log" |
    cut -c1-200 | head -14 | tee -a "$S"
wait # the models

# ---- 2. the 1B bench: default, --deterministic twice ----
bench() { # bench NAME GPU ARGS...
    local n=$1 g=$2
    shift 2
    CUDA_VISIBLE_DEVICES=$g timeout 100 "$FP8RUN" bench $M1 --batch 8 --seq 2048 --precision fp8 --warmup 2 \
        --steps 6 --json "$D/bench_$n.json" "$@" > "$D/bench_$n.log" 2>&1 || say "  bench $n: exit $?: $(tail -1 "$D/bench_$n.log" | cut -c1-150)"
    say "bench 1B fp8 $n: $(python3 -c "
import json
r = json.load(open('$D/bench_$n.json'))
print('%.1f ms/step (min %.1f), %.0f tok/s, %.1f GiB used, loss %.6f -> %.6f' % (r['step_ms_median'], r['step_ms_min'],
      r['tokens_per_s'], r['device_memory_used_bytes'] / 2**30, r['loss_first'], r['loss_last']))
print('    attention: ' + r['attention'][:150]); print('    gemm: ' + r['gemm'][:150])" 2>/dev/null || echo failed)"
}
if room 110 "1B bench default + --deterministic"; then
    bench default "$G0"
    bench det "$G0" --deterministic
fi
detsame() {
    say "  det vs det2 (1B bench losses): $(python3 -c "
import json
a, b = (json.load(open('$D/bench_%s.json' % n)) for n in ('det', 'det2'))
print('equal' if (a['loss_first'], a['loss_last']) == (b['loss_first'], b['loss_last']) else
      'DIFFER: %r vs %r' % ((a['loss_first'], a['loss_last']), (b['loss_first'], b['loss_last'])))" 2>/dev/null || echo '?')"
}

# ---- 3. 2 GPUs x B1 vs 1 GPU x ga2, --deterministic, 50 steps of the 125M ----
maxdiff() { python3 - "$1" "$2" <<'EOF2'
import json, sys
def read(p):
    try:
        return {j["step"]: j["loss"] for j in map(json.loads, open(p)) if "loss" in j}
    except Exception:
        return {}
a, b = read(sys.argv[1]), read(sys.argv[2])
ks = sorted(k for k in a if k in b)
if not ks:
    print("nan (no common steps)")
else:
    k = max(ks, key=lambda k: abs(a[k] - b[k]))
    n = sum(a[j] == b[j] for j in ks)
    print(f"max |diff| {abs(a[k] - b[k]):.3e} over {len(ks)} steps ({n} equal; worst step {k}: {a[k]:.9g} vs {b[k]:.9g})")
EOF2
}
train() { # train NAME VISIBLE ARGS...
    local n=$1 vis=$2
    shift 2
    CUDA_VISIBLE_DEVICES=$vis timeout 90 "$FP8RUN" train $M125 --data $TOK --seq 2048 --precision fp8 --lr 3e-4 \
        --device cuda --steps 50 --warmup 5 --deterministic --log "$D/$n.jsonl" --log-every 1 "$@" \
        > "$D/$n.out" 2> "$D/$n.err" || say "  $n: exit $?: $(grep -m1 -i error "$D/$n.err" | cut -c1-150)"
}
if [ "$NG" -ge 2 ]; then
    G1=$(echo "$VIS" | cut -d, -f2)
    if room 60 "2 GPUs x B1 vs 1 GPU ga2"; then
        train dp2 "$G0,$G1" --batch 1 --gpus 2
        # the 1-GPU run, and the repeated 1B --deterministic bench on the other GPU meanwhile
        train ga2 "$G0" --batch 1 --grad-accum 2 &
        P=$!
        room 45 "1B bench --deterministic repeated" && bench det2 "$G1" --deterministic && detsame
        wait $P
        say "125M fp8 --deterministic, 2 GPUs x B1 vs 1 GPU x B1 ga2: $(maxdiff "$D/dp2.jsonl" "$D/ga2.jsonl")"
        say "  (det2 ran on GPU $G1 beside the 1-GPU training: its step time is not comparable)"
    fi
    if room 35 "2 GPUs repeated"; then
        train dp2b "$G0,$G1" --batch 1 --gpus 2
        say "  2 GPUs run twice: $(maxdiff "$D/dp2.jsonl" "$D/dp2b.jsonl")"
    fi
else
    say "phase 3 skipped: one GPU visible"
    if room 45 "1B bench --deterministic repeated"; then
        bench det2 "$G0" --deterministic
        detsame
    fi
fi
say "done in $(elapsed) s; logs in $D"
