#!/usr/bin/env bash
# Issue 12's end-to-end check (one GPU, about 2 minutes on an H200): the generated 125M Llama
# trained 300 steps byte-level on fp8run's own C/CUDA sources (the last tenth held out), B=16
# T=1024, lr 6e-4, warmup 30, cosine to 6e-5, validation every 100 steps, in bf16 and in fp8
# (the defaults), for each data order in $SEEDS; fp8's final validation loss, averaged over the
# seeds, must be within 1% of bf16's (bench/README.md "Training the 125M model end to end");
# every validation is printed per seed and averaged. Run from the repository root
# after the CUDA bundle is unpacked ($FP8RUN, default /tmp/fr/bin/fp8run). Everything goes to
# $OUT/e2e/; the exit status is 1 when the seeds' mean final validation is more than 1% off.
set -uo pipefail
cd "$(dirname "$0")/.."
FP8RUN=${FP8RUN:-/tmp/fr/bin/fp8run}
D=${OUT:-/tmp/out}/e2e
mkdir -p "$D"
m=/tmp/llama_125m.onnx
[ -f $m ] || "$FP8RUN" generate llama --preset 125m -o $m > "$D/gen.log" 2>&1
cat $(git ls-files 2>/dev/null | grep -E '\.(c|h|cu|cuh)$' || find . -name '*.c' -o -name '*.h' -o -name '*.cu' | sort) > /tmp/e2e_src.bin
python3 - <<'PY'
d = open("/tmp/e2e_src.bin", "rb").read(); k = len(d) * 9 // 10
open("/tmp/e2e_train.bin", "wb").write(d[:k]); open("/tmp/e2e_val.bin", "wb").write(d[k:])
print("data: %d train bytes, %d validation bytes" % (k, len(d) - k))
PY
# SEEDS: the data order (--seed) of each pair of runs; the criterion is on their means, because
# one pair is noise-dominated at 300 steps: on an H200 (session 5) bf16 alone ended 1.1039 to
# 1.1427 over seeds 0-2 (3.5% apart) while fp8 - bf16 per seed was -1.3%, -0.7%, +2.4%.
SEEDS=${SEEDS:-"0 1 2"}
for s in $SEEDS; do
    for p in ${PRECISIONS:-bf16 fp8}; do
        timeout ${E2E_TIMEOUT:-150} "$FP8RUN" train $m --data /tmp/e2e_train.bin --val /tmp/e2e_val.bin --data-dtype uint8 \
            --batch 16 --seq 1024 --steps 300 --lr 6e-4 --warmup 30 --min-lr 6e-5 --val-every 100 --precision $p \
            --seed $s --log "$D/train_125m_s${s}_$p.jsonl" ${E2E_FLAGS:-} > "$D/train_125m_s${s}_$p.txt" 2>&1
        echo "seed $s $p: rc=$? $(grep -E 'trained|tok/s' "$D/train_125m_s${s}_$p.txt" | tail -1 | cut -c1-160)"
    done
done
python3 - "$D" $SEEDS <<'PY'
import json, sys
d, seeds = sys.argv[1], sys.argv[2:]
def val(s, p):
    try:
        return {r["step"]: r["val_loss"] for r in map(json.loads, open("%s/train_125m_s%s_%s.jsonl" % (d, s, p))) if "val_loss" in r}
    except OSError:
        return {}
runs = {(s, p): val(s, p) for s in seeds for p in ("bf16", "fp8")}
steps = sorted(set.intersection(*[set(v) for v in runs.values()])) if all(runs.values()) else []
for s in seeds:
    b, f = runs[(s, "bf16")], runs[(s, "fp8")]
    print("  seed %s: " % s + ", ".join("step %d bf16 %.4f fp8 %.4f (%+.2f%%)" % (k, b[k], f[k], 100 * (f[k] - b[k]) / b[k]) for k in steps))
rel = None
for k in steps:
    mb = sum(runs[(s, "bf16")][k] for s in seeds) / len(seeds)
    mf = sum(runs[(s, "fp8")][k] for s in seeds) / len(seeds)
    spread = max(runs[(s, "bf16")][k] for s in seeds) / min(runs[(s, "bf16")][k] for s in seeds) - 1
    rel = (mf - mb) / mb
    print("  step %d: mean val loss over %d seeds bf16 %.4f fp8 %.4f (%+.2f%%); bf16's own seed spread %.2f%%" % (k, len(seeds), mb, mf, 100 * rel, 100 * spread))
ok = rel is not None and abs(rel) <= 0.01  # the issue's criterion, on the trained model (the last validation)
print("e2e: fp8 within 1%% of bf16 at the end (mean of %d seeds): %s (%s)" % (len(seeds), "PASS" if ok else "FAIL", "-" if rel is None else "%+.2f%%" % (100 * rel)))
sys.exit(0 if ok else 1)
PY
