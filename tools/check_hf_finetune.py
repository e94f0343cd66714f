#!/usr/bin/env python3
"""The Hugging Face fine-tuning round trip, end to end through the `fp8run` CLI (run on a GPU machine
with torch, transformers, onnxscript and peft; tools/gpu.sh finetune calls it):

  1. transformers' LlamaForCausalLM at the 125M reference configuration (tools/export_hf_llama.py's
     preset), random init (seed 1), save_pretrained -> DIR/hf (safetensors, config.json);
  2. tools/export_hf_llama.py --dynamic exports the architecture (its own random weights);
  3. `fp8run train --init-from DIR/hf` STEPS steps in fp8 (every HF tensor must match a
     parameter), checkpoint; `fp8run export --safetensors` in fp32 and in bf16, config.json
     copied; `fp8run export -o` the trained ONNX, whose fp32 logits `fp8run run` computes;
  4. transformers loads both exports (fp32: the weights as stored; bf16: upcast to fp32) and
     its logits for the same ids must match fp8run's: relative L2 <= 1e-5 (fp32), 1e-2 (bf16);
  5. LoRA: `fp8run train --init-from DIR/hf --lora-rank 8 --lora-targets q_proj|v_proj` in fp8,
     --export-adapter and --export (merged ONNX); peft loads the adapter on the HF base and its
     logits must match the merged model's as `fp8run run` computes them (rel L2 <= 1e-5), and the
     adapters must have moved the logits.

    python3 tools/check_hf_finetune.py OUT_DIR FP8RUN [--steps 200]
Prints one line per check; exit status 0 when all pass."""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from export_hf_llama import PRESETS  # noqa: E402  (one source for the 125M configuration)

B, T, EVAL_T = 8, 256, 64


def rel_l2(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def sh(log, *cmd):
    """Run a command, its output into log; raise with the log's tail on failure."""
    t0 = time.time()
    with open(log, "w") as f:
        r = subprocess.run([str(c) for c in cmd], stdout=f, stderr=subprocess.STDOUT)
    if r.returncode:
        tail = open(log).read().strip().splitlines()[-3:]
        raise RuntimeError("%s failed (%d): %s" % (cmd[1] if len(cmd) > 1 else cmd[0], r.returncode, " | ".join(tail)))
    return time.time() - t0


def fp8run_logits(fp8run, onnx, ids, d):
    os.makedirs(d, exist_ok=True)
    np.save(os.path.join(d, "ids.npy"), ids)
    sh(os.path.join(d, "run.log"), fp8run, "run", onnx, "--input", "input_ids=" + os.path.join(d, "ids.npy"),
       "--output-dir", d)
    return np.load(os.path.join(d, "logits.npy"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("fp8run")
    ap.add_argument("--steps", type=int, default=200)
    a = ap.parse_args()
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out, F = os.path.abspath(a.out), a.fp8run
    os.makedirs(out, exist_ok=True)
    p = PRESETS["125m"]
    cfg = LlamaConfig(vocab_size=p["V"], hidden_size=p["d"], intermediate_size=p["ff"], num_hidden_layers=p["L"],
                      num_attention_heads=p["nh"], num_key_value_heads=p["nkv"], max_position_embeddings=2048,
                      tie_word_embeddings=False, use_cache=False)
    torch.manual_seed(1)
    hf = os.path.join(out, "hf")
    ref = LlamaForCausalLM(cfg)
    n_hf = len(list(ref.named_parameters()))
    ref.save_pretrained(hf, safe_serialization=True)
    del ref
    onnx_dir = os.path.join(out, "onnx")
    t = sh(os.path.join(out, "export_onnx.log"), sys.executable, os.path.join(HERE, "export_hf_llama.py"),
           "--preset", "125m", "--dynamic", "-o", onnx_dir)
    print("exported HF Llama 125M (dynamo, dynamic shapes) in %.0f s" % t)
    model = os.path.join(onnx_dir, "model.onnx")
    # a token stream the loss can fall on: a random walk over a few successors per token
    rs = np.random.RandomState(0)
    succ = rs.randint(0, p["V"], size=(p["V"], 4))
    toks = np.empty(2_000_000, np.int64)
    cur = 0
    pick = rs.randint(0, 4, size=toks.size)
    for i in range(toks.size):
        toks[i] = cur
        cur = succ[cur, pick[i]]
    data = os.path.join(out, "tokens.bin")
    toks.astype("<u2").tofile(data)
    ids = rs.randint(0, p["V"], size=(2, EVAL_T)).astype(np.int64)
    checks = []

    # full fine-tune in fp8, exports, logits
    ck = os.path.join(out, "ck")
    shutil.rmtree(ck, ignore_errors=True)
    t = sh(os.path.join(out, "train_full.log"), F, "train", model, "--init-from", hf, "--data", data, "--steps",
           a.steps, "--batch", B, "--seq", T, "--lr", "3e-4", "--precision", "fp8", "--ckpt-dir", ck, "--log",
           os.path.join(out, "train_full.jsonl"), "--log-every", 50, "--export", os.path.join(out, "trained.onnx"))
    log = open(os.path.join(out, "train_full.log")).read()
    recs = [json.loads(l) for l in open(os.path.join(out, "train_full.jsonl")) if '"loss"' in l]
    skipped = sum(1 for r in recs if r.get("skipped"))
    print("fp8 full fine-tune: %d steps in %.0f s, loss %.3f -> %.3f, %d skipped" %
          (len(recs), t, recs[0]["loss"], recs[-1]["loss"], skipped))
    m = re.search(r"init from .*: (\d+) parameters loaded, (\d+) missing .*, (\d+) unexpected", log)
    print("  " + (m.group(0)[:150] if m else "(no 'init from' line in the log)"))
    checks.append(("--init-from took all %d HF tensors: %s loaded, %s unexpected (%s parameters not in the file)"
                   % ((n_hf,) + (m.group(1, 3, 2) if m else ("?", "?", "?"))),
                   bool(m) and int(m.group(1)) == n_hf and m.group(3) == "0"))
    checks.append(("200 fp8 steps, none skipped, loss fell", len(recs) == a.steps and skipped == 0
                   and recs[-1]["loss"] < recs[0]["loss"]))
    ckpt = sorted(f for f in os.listdir(ck) if f.endswith(".ckpt"))[-1]
    want = fp8run_logits(F, os.path.join(out, "trained.onnx"), ids, os.path.join(out, "run_full"))
    for dt, tol in (("fp32", 1e-5), ("bf16", 1e-2)):
        d = os.path.join(out, "export_" + dt)
        shutil.rmtree(d, ignore_errors=True)
        sh(os.path.join(out, "export_%s.log" % dt), F, "export", os.path.join(ck, ckpt), "--safetensors", d, "--dtype", dt)
        shutil.copy(os.path.join(hf, "config.json"), d)
        m = LlamaForCausalLM.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager").eval()
        with torch.no_grad():
            got = m(input_ids=torch.from_numpy(ids)).logits.numpy()
        r = rel_l2(got, want)
        checks.append(("transformers on the %s export vs fp8run's logits: rel L2 %.3g <= %g" % (dt, r, tol), r <= tol))

    # LoRA on the fp8 base, adapter to peft
    ckl = os.path.join(out, "ck_lora")
    adapter = os.path.join(out, "adapter")
    shutil.rmtree(ckl, ignore_errors=True)
    t = sh(os.path.join(out, "train_lora.log"), F, "train", model, "--init-from", hf, "--data", data, "--steps",
           a.steps, "--batch", B, "--seq", T, "--lr", "1e-3", "--precision", "fp8", "--lora-rank", 8,
           "--lora-alpha", 16, "--lora-targets", "q_proj|v_proj", "--ckpt-dir", ckl, "--export-adapter", adapter,
           "--export", os.path.join(out, "merged.onnx"), "--log-every", 50)
    pb = [l.strip() for l in open(os.path.join(out, "train_lora.log")) if "bytes" in l and "param" in l]
    print("LoRA fp8: %d steps in %.0f s; %s" % (a.steps, t, pb[0][:140] if pb else "(no bytes-per-parameter line)"))
    want = fp8run_logits(F, os.path.join(out, "merged.onnx"), ids, os.path.join(out, "run_lora"))
    from peft import PeftModel
    with torch.no_grad():
        base = LlamaForCausalLM.from_pretrained(hf, torch_dtype=torch.float32, attn_implementation="eager").eval()
        base_logits = base(input_ids=torch.from_numpy(ids)).logits.numpy()
        pm = PeftModel.from_pretrained(base, adapter).eval()
        got = pm(input_ids=torch.from_numpy(ids)).logits.numpy()
    moved, r = rel_l2(base_logits, want), rel_l2(got, want)
    checks.append(("LoRA adapters moved the logits: rel L2 vs base %.3g > 1e-3" % moved, moved > 1e-3))
    checks.append(("peft (base + exported adapter) vs fp8run's merged model: rel L2 %.3g <= 1e-5" % r, r <= 1e-5))
    ok = True
    for what, good in checks:
        print("%s %s" % ("ok  " if good else "FAIL", what))
        ok = ok and good
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # one line for the summary, the logs hold the rest
        print("FAIL %s: %s" % (type(e).__name__, e))
        sys.exit(1)
