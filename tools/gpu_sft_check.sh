#!/usr/bin/env bash
# Supervised fine-tuning on one GPU (README "Fine-tune a chat model"; a few minutes on an H200):
# the generated 1B Llama in fp8 at --seq 2048 on byte-level SFT examples of 64..2048 tokens cut
# from fp8run's own sources (prompt: the first quarter, target: the rest), and the same model on
# the same bytes as plain pre-training:
#   - packed SFT tokens/s (all window tokens counted) against pre-training's (criterion: >= 90%);
#   - packing off: each window one example, padded; its step time against a full window's (the
#     padded keys should cost nothing, so it drops with the padding);
#   - the losses fall, and `fp8run sample` runs on the GPU.
# Run from the repository root after the CUDA bundle is unpacked (tools/gpu_script_env.sh).
set -uo pipefail
TOPIC=sft
source "$(dirname "$0")/gpu_script_env.sh"
m=/tmp/llama_1b.onnx
[ -f $m ] || "$FP8RUN" generate llama --preset 1b -o $m > "$D/gen.log" 2>&1
cat $(git ls-files 2>/dev/null | grep -E '\.(c|h|cu)$' || find . -name '*.c' | sort) | LC_ALL=C tr -cd '\11\12\40-\176' > /tmp/sft_src.txt
python3 - <<'PY'
import json, random
d = open("/tmp/sft_src.txt").read()
r, p, n = random.Random(1), 0, 0
with open("/tmp/sft_src.jsonl", "w") as f:
    while p < len(d) - 2048 and n < 4000:
        k = r.randint(64, 2047)
        ex = d[p:p + k]
        f.write(json.dumps({"prompt": ex[:k // 4], "completion": ex[k // 4:]}) + "\n")
        p, n = p + k, n + 1
print("examples: %d" % n)
PY
"$FP8RUN" prepare --sft --tokenizer bytes /tmp/sft_src.jsonl -o /tmp/sft.bin --seq 2048 | tee "$D/prepare.txt"
B=${B:-4}
COMMON="--batch $B --seq 2048 --steps ${STEPS:-40} --lr 1e-4 --warmup 5 --precision fp8 --log-every 10"
run() { # name, args...
    local name=$1; shift
    timeout ${SFT_TIMEOUT:-300} "$FP8RUN" train $m $COMMON --log "$D/$name.jsonl" "$@" > "$D/$name.txt" 2>&1
    echo "$name: rc=$? $(grep -E 'trained' "$D/$name.txt" | tail -1)"
}
run pretrain --data /tmp/sft_src.txt --data-dtype uint8
run packed --data /tmp/sft.bin
run padded --data /tmp/sft.bin --packing off
"$FP8RUN" sample $m --prompt "static int " --max-new-tokens 16 > "$D/sample.txt" 2>&1
echo "sample: rc=$? $(head -c 80 "$D/sample.txt")"
python3 - "$D" <<'PY'
import json, sys
d = sys.argv[1]
def rec(name):
    try:
        return [r for r in map(json.loads, open("%s/%s.jsonl" % (d, name))) if "loss" in r]
    except OSError:
        return []
tps = {}
for name in ("pretrain", "packed", "padded"):
    r = rec(name)
    if len(r) < 11:
        print("%s: no steps" % name)
        continue
    tail = [x["tokens_per_s"] for x in r[10:] if x.get("tokens_per_s")]  # after warm-up
    tps[name] = sum(tail) / len(tail)
    extra = " (%.0f target tokens a step)" % (sum(x.get("target_tokens", 0) for x in r) / len(r)) if name != "pretrain" else ""
    print("%s: %.0f window tokens/s, loss %.3f -> %.3f%s" % (name, tps[name], r[0]["loss"], r[-1]["loss"], extra))
ok = "packed" in tps and "pretrain" in tps and tps["packed"] >= 0.9 * tps["pretrain"]
if "padded" in tps and "pretrain" in tps:
    print("padded windows: step time %.2f x a full window's" % (tps["pretrain"] / tps["padded"]))
print("sft: packed >= 90%% of pre-training tokens/s: %s" % ("PASS" if ok else "FAIL"))
sys.exit(0 if ok else 1)
PY
