#!/usr/bin/env python3
"""Export Hugging Face LlamaForCausalLM at fp8run's reference configurations with today's
torch.onnx exporter (dynamo=True, opset 18), as a user would, for `fp8run bench` / `train`.

    python3 tools/export_hf_llama.py --preset 125m|1b -o DIR [--opset 18] [--dynamic [--attention-mask]]

Random init (seed 0). The configuration equals `fp8run generate llama --preset P` (and
../shared/baselines/torch_llama.py): vocab 32768, 125m: d 768, 12 layers, 12 heads, 4 KV heads,
ffn 2048; 1b: d 2048, 16 layers, 16 heads, 8 KV heads, ffn 5632; untied LM head. The export is
static at the bench shape (125m: 16 x 1024, 1b: 8 x 2048) unless --dynamic (batch and seq
dynamic; with --attention-mask also an `attention_mask` input, from which the graph computes
the causal and padding mask, as transformers' users export it); weights go to
DIR/model.onnx.data (external data: the 1b model is over 2 GB). Needs torch >= 2.9,
transformers, onnxscript (the lent GPU machines have them)."""
import argparse
import functools
import os
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

PRESETS = {"125m": dict(V=32768, d=768, L=12, nh=12, nkv=4, ff=2048, B=16, T=1024),
           "1b": dict(V=32768, d=2048, L=16, nh=16, nkv=8, ff=5632, B=8, T=2048)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", choices=PRESETS, required=True)
    ap.add_argument("-o", "--out", required=True)
    ap.add_argument("--opset", type=int, default=18)
    ap.add_argument("--dynamic", action="store_true")
    ap.add_argument("--attention-mask", action="store_true")
    a = ap.parse_args()
    p = PRESETS[a.preset]
    cfg = LlamaConfig(vocab_size=p["V"], hidden_size=p["d"], intermediate_size=p["ff"],
                      num_hidden_layers=p["L"], num_attention_heads=p["nh"], num_key_value_heads=p["nkv"],
                      max_position_embeddings=max(2048, p["T"]), tie_word_embeddings=False, use_cache=False)
    torch.manual_seed(0)
    m = LlamaForCausalLM(cfg).eval()
    m.forward = functools.partial(m.forward, use_cache=False, return_dict=False)
    ids = torch.randint(0, p["V"], (p["B"], p["T"]))
    os.makedirs(a.out, exist_ok=True)
    t0 = time.time()
    kw, names = {}, ["input_ids"]
    if a.dynamic:
        bt = {0: torch.export.Dim("batch", max=1024), 1: torch.export.Dim("seq", max=p["T"])}
        kw = dict(dynamic_shapes={"input_ids": bt})
        if a.attention_mask:
            kw = dict(kwargs={"attention_mask": torch.ones_like(ids)},
                      dynamic_shapes={"input_ids": bt, "attention_mask": bt})
            names.append("attention_mask")
    prog = torch.onnx.export(m, (ids,), dynamo=True, opset_version=a.opset, input_names=names,
                             output_names=["logits"], **kw)
    prog.save(os.path.join(a.out, "model.onnx"), external_data=True)
    n = sum(x.numel() for x in m.parameters())
    print("exported HF LlamaForCausalLM %s (%d parameters) to %s in %.0f s"
          % (a.preset, n, a.out, time.time() - t0))


if __name__ == "__main__":
    main()
