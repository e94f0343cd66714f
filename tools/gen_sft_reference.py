#!/usr/bin/env python3
"""Write the SFT training fixtures for tests/test_sft_train.c: an SFT token file of
prompt/completion examples for llama_tiny, and PyTorch's losses of fine-tuning on it with labels
-100 on everything but the targets (TRL's convention).

Needs torch and onnx (pip install; no hub downloads):

    python3 tools/gen_sft_reference.py

It writes tests/fixtures/sft/:
    llama_sft.bin     an SFT token file (python/fp8run/sft.py): 40 examples of 3..16 tokens
                      (vocabulary 128, EOS 0) from gen_train_reference's Markov chain; the
                      first 2..6 tokens of each are the prompt, the rest (EOS included) targets
    llama_sft_losses_k1.txt / _k2.txt
                      the losses of 20 steps of PyTorch training llama_tiny's module (rebuilt by
                      gen_fixtures with the fixture's seed, checked equal to the ONNX weights),
                      one "%.9e" per line after '#' lines. Windows as fp8run takes them with
                      packing off (runtime/io/sft_data.h): window w is example w, cut to T+1
                      tokens and padded with EOS; batch k of B windows takes windows k*B ..
                      k*B+B-1, wrapping after the last whole batch; labels of non-targets and
                      padding are -100. Gradient accumulation K=2 (the _k2 file): each step takes
                      2 consecutive batches and its loss is the sum of the per-token losses of
                      both over their target count (token-weighted, not the mean of the two
                      micro-batch means); so is its gradient.
AdamW and clipping as tools/gen_train_reference.py (fp8run's defaults with lr 1e-3, clip 1).
"""
import importlib.util
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_fixtures  # noqa: E402
import gen_train_reference as ref  # noqa: E402

spec = importlib.util.spec_from_file_location("sft", os.path.join(HERE, "..", "python", "fp8run", "sft.py"))
sft = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sft)

OUT = os.path.join(ref.ROOT, "sft")
B, T, VOCAB, EOS, STEPS = 2, 13, 128, 0, 20


def examples(seed, n):
    rs = np.random.RandomState(seed)
    toks = ref.markov_tokens(seed, 4096)
    out, p = [], 0
    for _ in range(n):
        length = rs.randint(3, 17)  # 16 > T + 1 = 14: some are cut
        ids = [int(x) for x in toks[p:p + length - 1]] + [EOS]
        p += length
        n_prompt = rs.randint(2, 7)
        tgt = [0 if i < n_prompt else 1 for i in range(length)]
        tgt[0] = 0
        if not any(tgt):
            tgt[-1] = 1
        out.append((ids, tgt))
    return out


def windows(exs):
    """(tokens [W, T+1], labels [W, T]) with packing off."""
    toks, labs = [], []
    for ids, tgt in exs:
        ids, tgt = ids[:T + 1], tgt[:T + 1]
        pad = T + 1 - len(ids)
        w = ids + [EOS] * pad
        t = tgt + [0] * pad
        toks.append(w)
        labs.append([w[j + 1] if t[j + 1] else -100 for j in range(T)])
    return torch.tensor(toks), torch.tensor(labs)


def train(model, toks, labs, k):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": ref.WD}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=ref.LR, betas=ref.BETAS, eps=ref.EPS, foreach=False)
    model.train()
    per_pass = toks.shape[0] // B
    losses, batch = [], 0
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        mbs = []
        for _ in range(k):
            s = (batch % per_pass) * B
            mbs.append((toks[s:s + B, :T], labs[s:s + B]))
            batch += 1
        n = sum(int((y != -100).sum()) for _, y in mbs)
        total = 0.0
        for x, y in mbs:
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1), ignore_index=-100, reduction="sum") / n
            loss.backward()
            total += float(loss.item())
        torch.nn.utils.clip_grad_norm_(model.parameters(), ref.CLIP)
        opt.step()
        losses.append(total)
    return losses


def main():
    os.makedirs(OUT, exist_ok=True)
    exs = examples(7070, 40)
    sft.write_sft(os.path.join(OUT, "llama_sft.bin"), exs, 2, VOCAB, EOS)
    toks, labs = windows(exs)
    for k in (1, 2):
        model = gen_fixtures.build_llama(2002, d=64, hidden=176)
        ref.check_weights(model, os.path.join(ref.ROOT, "llama_tiny", "model.onnx"))
        losses = train(model, toks, labs, k)
        with open(os.path.join(OUT, "llama_sft_losses_k%d.txt" % k), "w") as f:
            f.write("# tools/gen_sft_reference.py with torch %s: llama_tiny on llama_sft.bin, B=%d T=%d packing off, "
                    "K=%d, labels -100 off the targets\n" % (torch.__version__, B, T, k))
            for x in losses:
                f.write("%.9e\n" % x)
        print("K=%d:" % k, " ".join("%.4f" % x for x in losses))


if __name__ == "__main__":
    main()
