#!/usr/bin/env python3
"""PyTorch baseline for bench/: the same Llama configurations as `fp8run generate llama`
(runtime/train/llama_gen.c), trained the way a PyTorch user would: Hugging Face LlamaForCausalLM,
float32 master weights, bf16 autocast, SDPA attention, fused AdamW, random tokens.

    python3 tools/torch_baseline.py --preset 1b --batch 8 --seq 2048 [--compile] [--json F]

Prints step time (the timed steps queued back to back, wall time / steps, as `fp8run bench`
measures), tokens/s and peak memory. Needs torch and
transformers (the GPU machines of the device tool have both); fp8run itself needs neither.
"""
import argparse
import json
import time

import torch

PRESETS = {
    # d, layers, heads, kv_heads, ffn, vocab (runtime/train/llama_gen.c)
    "tiny": (64, 2, 4, 2, 176, 128),
    "125m": (768, 12, 12, 4, 2048, 32768),
    "1b": (2048, 16, 16, 8, 5632, 32768),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="125m", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args()

    from transformers import LlamaConfig, LlamaForCausalLM

    d, layers, heads, kv, ffn, vocab = PRESETS[a.preset]
    cfg = LlamaConfig(hidden_size=d, num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=kv, intermediate_size=ffn, vocab_size=vocab,
                      max_position_embeddings=max(a.seq, 2048), tie_word_embeddings=False,
                      rms_norm_eps=1e-5, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).cuda()
    if a.compile:
        model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1, fused=True)
    ids = torch.randint(0, vocab, (a.batch, a.seq + 1), device="cuda")
    x, y = ids[:, :-1], ids[:, 1:]

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, vocab), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    loss = loss.item()  # waits for the last step
    ms = (time.perf_counter() - t0) * 1e3 / a.steps
    r = {
        "framework": f"torch {torch.__version__}" + (" compile" if a.compile else ""),
        "device": torch.cuda.get_device_name(),
        "preset": a.preset, "batch": a.batch, "seq": a.seq, "precision": "bf16 autocast",
        "step_ms": ms, "loss_last": loss, "tokens_per_s": a.batch * a.seq / (ms / 1e3),
        "peak_memory_bytes": torch.cuda.max_memory_allocated(),
        "parameters": sum(p.numel() for p in model.parameters()),
    }
    print(f"torch {a.preset} B={a.batch} T={a.seq}{' compile' if a.compile else ''}: {ms:.1f} ms/step, "
          f"{r['tokens_per_s']:.0f} tok/s, peak {r['peak_memory_bytes'] / 2**30:.1f} GiB")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f)


if __name__ == "__main__":
    main()
