#!/usr/bin/env python3
"""Train real Hugging Face architectures with `fp8run train` and with PyTorch, step for step.

For GPT-2, Llama, Mistral, Qwen2, BERT (MLM head), OPT and GPT-NeoX, randomly initialised from
tiny configs (hidden sizes not multiples of 16, GQA where the architecture has it, tied
embeddings where the architecture ties them, dropout 0 so both sides compute the same function),
exported by torch.onnx (opset 17, constant folding on, as users export), this script:
  1. writes a token file (uint16, a small Markov chain so the loss can fall),
  2. trains the PyTorch module for STEPS steps: AdamW with fp8run's CLI defaults (betas 0.9/0.999,
     eps 1e-8, weight decay 0.01 on parameters of rank >= 2 only), clip_grad_norm_ 1.0, constant
     lr, fp8run's sequential batches (batch k, window b starts at k*B*T + b*T; inputs are the first
     T tokens of a window, labels the last T), attention_mask all ones,
  3. runs `fp8run train` on the export with the same settings and reads its JSONL log,
  4. prints the worst relative loss difference over the steps per model.
Needs Debian's python3-torch and a venv with transformers (no network beyond PyPI):
  /usr/bin/python3 -m venv --system-site-packages /tmp/hf && /tmp/hf/bin/pip install transformers==4.37.2
  /tmp/hf/bin/python tools/check_hf_training.py /tmp/hf/train build/fp8run
"""
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from transformers import (BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel, GPTNeoXConfig,
                          GPTNeoXForCausalLM, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, OPTConfig, OPTForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM)

warnings.filterwarnings("ignore")
OUT, FP8RUN = sys.argv[1], sys.argv[2]
ONLY = sys.argv[3:]  # optional model names
V, B, T, STEPS, LR, TOL = 211, 2, 11, 20, 1e-3, 1e-4
torch.set_num_threads(1)


def models():
    torch.manual_seed(0)
    return {
        "gpt2": GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=72, n_layer=2, n_head=6, n_positions=64,
                                           attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)),
        "llama": LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=72, intermediate_size=200,
                                              num_hidden_layers=2, num_attention_heads=6,
                                              num_key_value_heads=2, max_position_embeddings=64)),
        "mistral": MistralForCausalLM(MistralConfig(vocab_size=V, hidden_size=40, intermediate_size=120,
                                                    num_hidden_layers=2, num_attention_heads=4,
                                                    num_key_value_heads=2, max_position_embeddings=64,
                                                    sliding_window=64)),
        "qwen2": Qwen2ForCausalLM(Qwen2Config(vocab_size=V, hidden_size=72, intermediate_size=200,
                                              num_hidden_layers=2, num_attention_heads=6,
                                              num_key_value_heads=3, max_position_embeddings=64)),
        "bert": BertForMaskedLM(BertConfig(vocab_size=V, hidden_size=40, intermediate_size=100,
                                           num_hidden_layers=2, num_attention_heads=4,
                                           max_position_embeddings=64, hidden_dropout_prob=0.0,
                                           attention_probs_dropout_prob=0.0)),
        "opt": OPTForCausalLM(OPTConfig(vocab_size=V, hidden_size=40, ffn_dim=100, num_hidden_layers=2,
                                        num_attention_heads=4, max_position_embeddings=64,
                                        word_embed_proj_dim=40, dropout=0.0, attention_dropout=0.0)),
        "gptneox": GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=V, hidden_size=40, intermediate_size=100,
                                                    num_hidden_layers=2, num_attention_heads=4,
                                                    max_position_embeddings=64)),
    }


def markov_tokens(seed, n):
    """Ids 2..V-1: BERT's and OPT's embeddings have padding_idx 0 and 1, rows PyTorch never
    updates; the ONNX graph cannot say so, and fp8run trains every row it gathers."""
    rs = np.random.RandomState(seed)
    succ = rs.randint(2, V, size=(V, 4))
    out = np.empty(n, dtype=np.int64)
    cur = 2
    for i in range(n):
        out[i] = cur
        cur = rs.randint(2, V) if rs.rand() < 0.05 else succ[cur, rs.choice(4, p=[0.55, 0.25, 0.12, 0.08])]
    return out


class Wrap(torch.nn.Module):
    def __init__(self, m, bert):
        super().__init__()
        self.m, self.bert = m, bert

    def forward(self, input_ids, attention_mask):
        if self.bert:
            return self.m(input_ids=input_ids, attention_mask=attention_mask, return_dict=False)[0]
        return self.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                      return_dict=False)[0]


def torch_losses(w, toks):
    decay = [p for p in w.parameters() if p.dim() >= 2]
    no_decay = [p for p in w.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=(0.9, 0.999), eps=1e-8, foreach=False)
    per_epoch = (len(toks) - 1) // (B * T)
    losses = []
    w.train()
    for step in range(STEPS):
        p = (step % per_epoch) * B * T
        win = torch.tensor(np.stack([toks[p + b * T: p + b * T + T + 1] for b in range(B)]))
        x, y = win[:, :T], win[:, 1:]
        opt.zero_grad(set_to_none=True)
        logits = w(x, torch.ones_like(x))
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(w.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses


def main():
    os.makedirs(OUT, exist_ok=True)
    toks = markov_tokens(1234, 4096)
    data = os.path.join(OUT, "tokens.bin")
    toks.astype("<u2").tofile(data)
    failures = 0
    for name, m in models().items():
        if ONLY and name not in ONLY:
            continue
        m.config.use_cache = False
        w = Wrap(m, name == "bert").eval()
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        ids = torch.randint(0, V, (B, T))
        path = os.path.join(d, "model.onnx")
        torch.onnx.export(w, (ids, torch.ones_like(ids)), path, input_names=["input_ids", "attention_mask"],
                          output_names=["logits"], opset_version=17,
                          dynamic_axes={"input_ids": {0: "batch", 1: "seq"},
                                        "attention_mask": {0: "batch", 1: "seq"},
                                        "logits": {0: "batch", 1: "seq"}})
        ref = torch_losses(w, toks)  # after the export: the export must see the initial weights
        log = os.path.join(d, "train.jsonl")
        run = subprocess.run([FP8RUN, "train", path, "--data", data, "--steps", str(STEPS), "--batch", str(B),
                              "--seq", str(T), "--lr", str(LR), "--data-order", "sequential", "--log", log],
                             capture_output=True, text=True)
        if run.returncode:
            print("%-8s FAIL: %s" % (name, run.stderr.strip().splitlines()[-1] if run.stderr else run.returncode))
            failures += 1
            continue
        got = [json.loads(l)["loss"] for l in open(log) if '"loss"' in l]
        rel = [abs(a - b) / abs(b) for a, b in zip(got, ref)]
        worst = max(rel) if rel and len(got) == STEPS else float("inf")
        ok = worst <= TOL
        failures += not ok
        print("%-8s %d steps: loss %.4f -> %.4f (PyTorch %.4f -> %.4f), worst relative difference %.2e %s"
              % (name, len(got), got[0], got[-1], ref[0], ref[-1], worst, "ok" if ok else "FAIL"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
