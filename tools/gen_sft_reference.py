#!/usr/bin/env python3
"""Write the SFT training fixtures for tests/test_sft_train.c: an SFT token file of
prompt/completion examples for llama_tiny, and PyTorch's losses of fine-tuning on it with labels
-100 on everything but the targets (TRL's convention).

Needs torch and onnx (pip install; no hub downloads):

    python3 tools/gen_sft_reference.py        # llama_tiny
    python3 tools/gen_sft_reference.py hf     # the Hugging Face Llama with a real tokenizer

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

And the Hugging Face case, with transformers too:
    hf_chat.bin       chat.jsonl (tools/gen_sft_fixture.py) prepared with the fixture's real
                      tokenizer and chat template (prepare(..., sft=True)): targets are the
                      assistant turns
    hf_chat_losses.txt
                      20 steps of transformers' LlamaForCausalLM, the weights of
                      tests/fixtures/hf/llama_safetensors (the hf/llama_op18_dynamic export's), on
                      hf_chat.bin with packing off at B=2 T=31 (the last batch of a pass filled
                      up with an empty window, as fp8run's sequential loader does), labels -100
                      off the targets; AdamW as tools/gen_hf_exports.py (lr 1e-3, betas (0.9,
                      0.999), weight decay 0.01 on matrices), clip 1
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


def hf_reference():
    from transformers import LlamaForCausalLM
    spec = importlib.util.spec_from_file_location("prep", os.path.join(HERE, "..", "python", "fp8run", "prepare.py"))
    prep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(prep)
    out = os.path.join(OUT, "hf_chat.bin")
    prep.prepare(os.path.join(OUT, "chat.jsonl"), out, os.path.join(OUT, "tokenizer.json"), sft=True)
    f = sft.read_sft(out)
    global EOS, T
    EOS, T = f["eos"], 31
    toks, labs = windows(f["examples"])
    if toks.shape[0] % B:  # the last batch: an empty window (all padding, nothing counts)
        toks = torch.cat([toks, torch.full((1, T + 1), EOS)])
        labs = torch.cat([labs, torch.full((1, T), -100)])
    model = LlamaForCausalLM.from_pretrained(os.path.join(ref.ROOT, "hf", "llama_safetensors"), dtype=torch.float32)
    model.config.use_cache = False
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.999), eps=1e-8, foreach=False)
    model.train()
    per_pass, losses = toks.shape[0] // B, []
    for step in range(STEPS):
        s = (step % per_pass) * B
        x, y = toks[s:s + B, :T], labs[s:s + B]
        opt.zero_grad(set_to_none=True)
        logits = model(input_ids=x, attention_mask=torch.ones_like(x), use_cache=False).logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1), ignore_index=-100)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.item()))
    with open(os.path.join(OUT, "hf_chat_losses.txt"), "w") as fo:
        fo.write("# tools/gen_sft_reference.py with torch %s: LlamaForCausalLM (hf/llama_safetensors) on hf_chat.bin, "
                 "B=%d T=%d packing off, labels -100 off the assistant turns\n" % (torch.__version__, B, T))
        for x in losses:
            fo.write("%.9e\n" % x)
    print("HF chat:", " ".join("%.4f" % x for x in losses))


def main():
    if sys.argv[1:] == ["hf"]:
        return hf_reference()
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
