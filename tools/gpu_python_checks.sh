#!/usr/bin/env bash
# On a lent GPU machine (torch, transformers, peft there), after tools/gpu_check.sh unpacked the
# bundle: the Python checks against PyTorch that CI cannot run.
#   python/tests/check_from_torch.py    fp8run.from_torch on a tiny HF Llama, weights back
#   python/tests/check_peft_adapter.py  the LoRA adapter export loaded by peft (fp32 CPU, fp8 GPU)
set -uo pipefail
export PYTHONPATH=$PWD/python FP8RUN_LIBRARY=${FP8RUN_LIBRARY:-/tmp/fr/lib/libfp8run.so}
export FP8RUN_CLI=${FP8RUN_CLI:-$PWD/build-cuda/fp8run} PYTHONUNBUFFERED=1
rc=0
run() { echo "== $*"; "$@" 2>&1 | grep -v Warning | tail -12; [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1; }
run python3 python/tests/check_from_torch.py --device cuda --precision fp8
run python3 python/tests/check_peft_adapter.py --backend cpu --precision fp32
run python3 python/tests/check_peft_adapter.py --backend cuda --precision fp8
echo "python checks: $([ $rc -eq 0 ] && echo PASS || echo FAIL)"
exit $rc
