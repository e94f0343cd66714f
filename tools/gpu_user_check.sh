#!/usr/bin/env bash
# On a lent GPU machine (one GPU; torch, transformers, onnxscript there; no network), from the
# repository root after tools/gpu_check.sh unpacked the bundle: issue 17's user seat, the part
# that needs torch. python/tests/check_from_torch.py fine-tunes a tiny random-init HF Llama
# through fp8run.from_torch (dynamo export) in FP8 on the GPU, on text prepared by
# `fp8run prepare --tokenizer tokenizer.json` (a BPE trained there with `tokenizers`; fp8run's
# bytes when that package is missing, saying so), loads the weights back into the module, checks
# its logits against fp8run's, and, where onnxruntime is installed, runs the exported trained
# model in onnxruntime against fp8run's logits. Then python/tests/check_torchscript_export.py:
# README's TorchScript-exporter call on a tiny HF Llama, run and trained on fp8run's CPU backend.
# Wall time: ~1.5 min, at most 3 (timeouts of 120 s and 50 s).
# Everything goes to $OUT/user/ (summary.txt, from_torch.log, torchscript.log, run.jsonl, run.svg).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
U=$OUT/user
mkdir -p "$U"
if [ ! -x /tmp/fr/bin/fp8run ] && [ -f .devpkg/${BUNDLE:-bundle}.tar.xz ]; then
    mkdir -p /tmp/fr && tar -C /tmp/fr -xJf .devpkg/${BUNDLE:-bundle}.tar.xz
fi
export PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1
export FP8RUN_LIBRARY=${FP8RUN_LIBRARY:-/tmp/fr/lib/libfp8run.so} FP8RUN_CLI=${FP8RUN_CLI:-/tmp/fr/bin/fp8run}
export LD_LIBRARY_PATH=/tmp/fr/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
{
    echo "== user seat (issue 17): $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-all}"
    python3 - <<'EOF'
import importlib
v = []
for m in ("torch", "transformers", "tokenizers", "onnxscript", "onnx", "onnxruntime"):
    try:
        v.append("%s %s" % (m, importlib.import_module(m).__version__))
    except Exception:
        v.append("%s missing" % m)
print("python3: " + ", ".join(v))
EOF
    start=$(date +%s)
    timeout -k 5 120 python3 python/tests/check_from_torch.py --device cuda --precision fp8 --tokenizer auto \
        --out "$U/from_torch" > "$U/from_torch.log" 2>&1
    rc=$?
    grep -E "^(tokenizer|prepared|logits|held-out|onnxruntime|PASS)|Error|error|assert" "$U/from_torch.log" | grep -v Warning | head -16
    [ $rc -ne 0 ] && tail -8 "$U/from_torch.log"
    python3 - "$U/from_torch/run.jsonl" <<'EOF'
import json, sys
try:
    recs = [json.loads(l) for l in open(sys.argv[1])]
except OSError:
    sys.exit()
steps = [r for r in recs if "loss" in r and "step" in r and "val_loss" not in r]
if steps:
    print("training: %d steps, loss %.3f -> %.3f, %d skipped, %.0f tokens/s at the end"
          % (len(steps), steps[0]["loss"], steps[-1]["loss"], sum(bool(r.get("skipped")) for r in steps),
             steps[-1].get("tokens_per_s", 0)))
EOF
    echo "check_from_torch: rc=$rc in $(( $(date +%s) - start )) s: $([ $rc -eq 0 ] && echo PASS || echo FAIL)"
    # issue 11's other exporter: README's TorchScript call on this torch (CPU backend, ~20 s)
    start=$(date +%s)
    timeout -k 5 50 python3 python/tests/check_torchscript_export.py "$U/ts" > "$U/torchscript.log" 2>&1
    rc2=$?
    grep -E "^(TorchScript|logits|10 fp32|PASS)|Error|assert" "$U/torchscript.log" | head -8
    [ $rc2 -ne 0 ] && tail -6 "$U/torchscript.log"
    # (torch 2.11 + transformers 5.17: the TorchScript exporter fails on a Llama inside torch,
    # README "Exporting from PyTorch"; a PASS here means the installed versions export again)
    echo "check_torchscript_export: rc=$rc2 in $(( $(date +%s) - start )) s: $([ $rc2 -eq 0 ] && echo PASS || echo "FAIL (known with transformers 5)")"
} 2>&1 | tee "$U/summary.txt"
# only the small files come back
cp "$U/from_torch/run.jsonl" "$U/from_torch/run.svg" "$U/" 2>/dev/null
rm -rf "$U/from_torch" "$U/ts"
! grep -q ": rc=[1-9]" "$U/summary.txt"
