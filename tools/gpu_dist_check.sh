#!/usr/bin/env bash
# Data parallel over NCCL on a 4-GPU machine (issue 15): throughput, loss agreement, resume on
# another GPU count. Run from the repo root; everything goes into $OUT/dist/ (default
# /tmp/out/dist), a summary (<= 40 lines) to stdout and $OUT/dist/summary.txt.
#   FP8RUN=/tmp/fr/bin/fp8run tools/gpu_dist_check.sh
# Budget: about 4.5 minutes of wall time on 4 H100s (each run is bounded by `timeout`; a phase
# that would end after BUDGET seconds, default 285, is skipped and says so).
#  1. Throughput, the generated 1B Llama, fp8 delayed, B=8 x T=2048 per GPU, STEPS steps (tokens/s
#     per GPU: the median of steps 3.. of each JSONL log). At the same time on separate GPUs:
#     1 GPU B=8 (GPU 0), 1 GPU B=8 --grad-accum 4 (GPU 1: the 4-GPU step's work), 2 GPUs (GPUs
#     2,3). Then on 4 GPUs: overlap on (default), off (FP8RUN_DIST_OVERLAP=0), --shard-gradients
#     (ZeRO-2; Z1=1 adds --shard-optimizer). Scaling = tokens/s per GPU against the 1-GPU runs.
#  2. Loss agreement, 1B, B=1 x T=2048 per GPU, 200 steps of random tokens: 4 GPUs against 1 GPU
#     with --grad-accum 4 (the same windows and GEMM shapes): the largest relative loss difference.
#  3. Resume, the 125M Llama, global batch 4 x T=512: 2 GPUs x B=2 train 4 steps and save; from
#     that checkpoint 2 GPUs x B=2, 4 GPUs x B=1 and 1 GPU x B=4 each train steps 5..8: their
#     losses against the 2-GPU continuation. (Runs while the 1-GPU half of 2 runs on GPU 3.)
# Memory plans (fp8run info --memory --gpus 4, 2 micro-batches) with and without sharding go
# into memory_*.txt (computed on the host during phase 2).
set -uo pipefail
FP8RUN=${FP8RUN:-/tmp/fr/bin/fp8run}
OUT=${OUT:-/tmp/out}
D="$OUT/dist"
BUDGET=${BUDGET:-285}
STEPS=${STEPS:-8}
mkdir -p "$D"
export NCCL_NVLS_ENABLE=0
T0=$(date +%s)
S="$D/summary.txt"
: >"$S"
say() { echo "$*" | tee -a "$S"; }
elapsed() { echo $(($(date +%s) - T0)); }
room() { # room SECONDS: whether a phase of about that long still fits the budget
    if [ $(($(elapsed) + $1)) -gt "$BUDGET" ]; then
        say "SKIPPED (time: $(elapsed) s used of $BUDGET): $2"
        return 1
    fi
}
ngpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
say "dist check: $ngpu x $gpu; NCCL_NVLS_ENABLE=0; $FP8RUN"
[ "$ngpu" -ge 4 ] || say "WARNING: fewer than 4 GPUs: the 4-GPU runs will fail"

# median tokens/s per GPU of steps 3.. of a JSONL log
tps() { python3 - "$1" <<'EOF'
import json, sys, statistics
try:
    v = [json.loads(l)["tokens_per_s"] for l in open(sys.argv[1]) if '"tokens_per_s"' in l]
    v = [x for x in v[2:] if x]
    print(f"{statistics.median(v):.0f}" if v else "nan")
except Exception:
    print("nan")
EOF
}
# largest relative loss difference between two JSONL logs, over the steps both have (from $3)
lossdiff() { python3 - "$1" "$2" "${3:-1}" <<'EOF'
import json, sys
def read(p):
    try:
        return {j["step"]: j["loss"] for j in map(json.loads, open(p)) if "loss" in j}
    except Exception:
        return {}
a, b, lo = read(sys.argv[1]), read(sys.argv[2]), int(sys.argv[3])
ks = sorted(k for k in a if k in b and k >= lo)
if not ks:
    print("nan (no common steps)")
else:
    w = max(abs(a[k] - b[k]) / abs(b[k]) for k in ks)
    k = max(ks, key=lambda k: abs(a[k] - b[k]) / abs(b[k]))
    print(f"{w:.2e} over {len(ks)} steps (worst step {k}: {a[k]:.6f} vs {b[k]:.6f})")
EOF
}
# train NAME GPUS(visible list) ARGS...: one fp8run train, log in $D/NAME.{jsonl,err}
run() {
    local name=$1 vis=$2 lim=$3
    shift 3
    CUDA_VISIBLE_DEVICES=$vis timeout "$lim" "$FP8RUN" train "$@" --log "$D/$name.jsonl" --log-every 1 \
        >"$D/$name.out" 2>"$D/$name.err"
    local rc=$?
    [ $rc -eq 0 ] || echo "  $name: exit $rc: $(grep -m1 -i 'error' "$D/$name.err" | cut -c1-150)" >>"$S"
    return $rc
}

M1=/tmp/dist_llama_1b.onnx M125=/tmp/dist_llama_125m.onnx
[ -f $M1 ] || "$FP8RUN" generate llama --preset 1b -o $M1 >"$D/gen1b.log" 2>&1 &
[ -f $M125 ] || "$FP8RUN" generate llama --preset 125m -o $M125 >"$D/gen125m.log" 2>&1 &
python3 - <<'EOF'
import numpy as np
rng = np.random.default_rng(15)
rng.integers(0, 32768, size=24_000_000, dtype=np.uint16).tofile("/tmp/dist_tok.bin")
EOF
wait
say "models and random tokens ready after $(elapsed) s"
memplans() {
    for f in ddp zero1 zero2; do
        local o=""
        [ $f = zero1 ] && o=--shard-optimizer
        [ $f = zero2 ] && o=--shard-gradients
        "$FP8RUN" info $M1 --memory --batch 8 --seq 2048 --precision fp8 --grad-accum 2 --gpus 4 $o \
            >"$D/memory_$f.txt" 2>&1
    done
}
memsay() {
    for f in ddp zero1 zero2; do
        say "  $f: $(grep -E 'optimizer state|gradient buffers|total' "$D/memory_$f.txt" 2>/dev/null |
            awk '{$1=$1; print}' | tr '\n' ';')"
    done
}
TOK=/tmp/dist_tok.bin
C1="--data $TOK --seq 2048 --precision fp8 --lr 3e-4 --device cuda"
# ---- 1. throughput ----
if room 60 "throughput 1 GPU / 2 GPUs"; then
    run t1 0 150 $M1 $C1 --batch 8 --steps $STEPS &
    run t1ga4 1 150 $M1 $C1 --batch 8 --grad-accum 4 --steps $((STEPS / 2 + 2)) &
    run t2 2,3 150 $M1 $C1 --batch 8 --steps $STEPS --gpus 2 &
    wait
fi
V="on off z2"
[ "${Z1:-0}" = 1 ] && V="$V z1"
for v in $V; do
    room 30 "4 GPUs $v" || continue
    case $v in
        on) run t4$v 0,1,2,3 90 $M1 $C1 --batch 8 --steps $STEPS --gpus 4 ;;
        off)
            export FP8RUN_DIST_OVERLAP=0
            run t4$v 0,1,2,3 90 $M1 $C1 --batch 8 --steps $STEPS --gpus 4
            unset FP8RUN_DIST_OVERLAP
            ;;
        z1) run t4$v 0,1,2,3 90 $M1 $C1 --batch 8 --steps $STEPS --gpus 4 --shard-optimizer ;;
        z2) run t4$v 0,1,2,3 90 $M1 $C1 --batch 8 --steps $STEPS --gpus 4 --shard-gradients ;;
    esac
done
b1=$(tps "$D/t1.jsonl") b4=$(tps "$D/t1ga4.jsonl")
say "1B fp8 B=8 T=2048 tokens/s per GPU (median of steps 3..):"
say "  1 GPU B=8: $b1; 1 GPU B=8 --grad-accum 4: $b4"
for n in t2 t4on t4off t4z1 t4z2; do
    [ -f "$D/$n.jsonl" ] || continue
    x=$(tps "$D/$n.jsonl")
    say "  $n: $x per GPU ($(python3 -c "print(f'{100*$x/$b1:.1f}% of 1 GPU, {100*$x/$b4:.1f}% of ga4')" 2>/dev/null || echo '?'))"
done
say "  (t2: GPUs 2,3 while 1-GPU runs used GPUs 0,1; t4on/off: overlap on/off; t4z1/z2: ZeRO-1/2)"
say "  losses t4on vs t4off (bit-exact expected): $(lossdiff "$D/t4on.jsonl" "$D/t4off.jsonl")"
say "  losses t4z2 vs t4on: $(lossdiff "$D/t4z2.jsonl" "$D/t4on.jsonl")"

# ---- 2. 200-step loss agreement (4 GPUs, then 1 GPU on GPU 3 while phase 3 uses GPUs 0-2) ----
memplans &
MP=$!
L1=""
if room 120 "200-step loss comparison"; then
    run l4 0,1,2,3 100 $M1 $C1 --batch 1 --steps 200 --gpus 4 --warmup 20
    run l1 3 160 $M1 $C1 --batch 1 --grad-accum 4 --steps 200 --warmup 20 &
    L1=$!
fi

# ---- 3. resume on another GPU count ----
C2="--data $TOK --seq 512 --precision fp8 --lr 3e-4 --device cuda"
R=0
if room 40 "resume 2 -> 4 / 1 GPUs"; then
    R=1
    rm -rf /tmp/dist_ck*
    run r2 0,1 60 $M125 $C2 --batch 2 --steps 4 --gpus 2 --ckpt-dir /tmp/dist_ck
    for x in a b c; do cp -r /tmp/dist_ck /tmp/dist_ck_$x; done
    run r2c 0,1 60 $M125 $C2 --batch 2 --steps 8 --gpus 2 --ckpt-dir /tmp/dist_ck_a --resume &
    P1=$!
    run r1c 2 60 $M125 $C2 --batch 4 --steps 8 --ckpt-dir /tmp/dist_ck_c --resume &
    P2=$!
    wait $P1 $P2
fi
[ -n "$L1" ] && wait "$L1"
if [ $R = 1 ]; then
    run r4c 0,1,2,3 60 $M125 $C2 --batch 1 --steps 8 --gpus 4 --ckpt-dir /tmp/dist_ck_b --resume
fi
wait
if [ -n "$L1" ]; then
    say "200 steps, 1B, 4 GPUs x B=1 vs 1 GPU x B=1 x 4 micro-batches: max rel loss diff $(lossdiff "$D/l4.jsonl" "$D/l1.jsonl")"
    say "  last: 4 GPUs $(tail -1 "$D/l4.jsonl" | cut -c1-40); 1 GPU $(tail -1 "$D/l1.jsonl" | cut -c1-40)"
fi
if [ $R = 1 ]; then
    say "resume 125M (2 GPUs x B=2 saved at step 4), steps 5-8 against the 2-GPU continuation:"
    say "  4 GPUs x B=1: $(lossdiff "$D/r4c.jsonl" "$D/r2c.jsonl" 5)"
    say "  1 GPU x B=4:  $(lossdiff "$D/r1c.jsonl" "$D/r2c.jsonl" 5)"
    say "  $(grep -h "resumed from" "$D"/r2c.err "$D"/r4c.err "$D"/r1c.err | wc -l) of 3 said 'resumed from'"
    rm -rf /tmp/dist_ck*
fi
say "memory plan 1B B=8 T=2048, 2 micro-batches, one of 4 ranks:"
memsay
say "done in $(elapsed) s; logs in $D"
