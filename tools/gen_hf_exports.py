#!/usr/bin/env python3
"""Write tests/fixtures/hf/: tiny Hugging Face models as today's torch.onnx (dynamo) exports them,
with PyTorch's logits and 20-step training losses as the reference.

Needs torch >= 2.9, transformers >= 5 and onnxscript (the lent GPU machines have torch 2.11,
transformers 5.17, onnxscript 0.7.2; it runs on the CPU):

    python3 tools/gen_hf_exports.py OUT_DIR        # then copy OUT_DIR/* to tests/fixtures/hf/

For each architecture ARCH (random init from a tiny config: hidden sizes not multiples of 16,
GQA where the architecture has it, tied embeddings where it ties them, dropout 0) and opset
OPSET in 18 and 23 it writes OUT_DIR/ARCH_opOPSET_STYLE/, STYLE being
  static   input_ids [2, 11] only: masks and rotary tables are folded for that shape
  dynamic  input_ids and attention_mask with dynamic batch and seq (torch.export
           dynamic_shapes): the masks are computed in the graph (every architecture but
           BERT; with sliding windows mistral, gemma2, gemma3, starcoder2)
falcon's opset-23 exports fail in the exporter (torch 2.15, onnxscript 0.7.2): they are left out.
holding
  model.onnx            the export (dynamo=True, the exporter's default optimizer); llama's
                        dynamic export keeps its weights in model.onnx.data (external data)
  input_input_ids.npy   int64 [2, 11] (and input_attention_mask.npy, ones, for dynamic)
  output_logits.npy     PyTorch's float32 logits for them (eval mode)
  input_attention_mask_right.npy, output_logits_right.npy (dynamic): row 1's last 4 tokens
                        padding (mask 0), and PyTorch's logits for that mask; _left likewise
                        with row 1's first 4 tokens padding (their logits are PyTorch's for
                        fully masked queries: compare the real tokens' rows)
  losses.txt            20 AdamW steps of PyTorch in float32, one loss a line, with the protocol
                        of `fp8run train --data ../tokens.bin --batch 2 --seq 11 --steps 20
                        --lr 1e-3 --data-order sequential` (AdamW betas 0.9/0.999, eps 1e-8,
                        weight decay 0.01 on parameters of rank >= 2, clip 1.0, constant lr;
                        batch k, window b starts at k*B*T + b*T; attention_mask ones)
  meta.json             architecture, opset, style, config, versions, parameter names
Also OUT_DIR/tokens.bin (uint16 Markov chain, 4096 tokens) and OUT_DIR/llama_safetensors/
(save_pretrained of the llama model before training: config.json + model.safetensors).

    python3 tools/gen_hf_exports.py --padded-only FIXTURE_DIR [ARCH ...]

adds only the padded references to the dynamic fixtures already in FIXTURE_DIR (the same
seeds rebuild the models; their logits must reproduce the stored output_logits.npy).
"""
import functools
import json
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers import (BertConfig, BertForMaskedLM, GemmaConfig, GemmaForCausalLM, GPT2Config,
                          GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, Phi3Config, Phi3ForCausalLM, Qwen2Config,
                          Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM, GPTNeoXConfig,
                          GPTNeoXForCausalLM, Olmo2Config, Olmo2ForCausalLM, Gemma3TextConfig,
                          Gemma3ForCausalLM, Gemma2Config, Gemma2ForCausalLM, Starcoder2Config,
                          Starcoder2ForCausalLM, PhiConfig, PhiForCausalLM, OPTConfig, OPTForCausalLM,
                          FalconConfig, FalconForCausalLM)

warnings.filterwarnings("ignore")
PADDED_ONLY = sys.argv[1] == "--padded-only"
OUT = sys.argv[2] if PADDED_ONLY else sys.argv[1]
ONLY = sys.argv[3:] if PADDED_ONLY else sys.argv[2:]
DYNAMIC = ("llama", "gpt2", "mistral", "qwen3", "gpt_neox", "gemma2", "starcoder2", "opt", "phi", "falcon", "gemma3",
           "qwen2", "phi3", "olmo2")
PAD = 4
V, B, T, STEPS, LR = 211, 2, 11, 20, 1e-3
torch.set_num_threads(4)


def configs():
    common = dict(vocab_size=V, max_position_embeddings=64, pad_token_id=0, bos_token_id=1,
                  eos_token_id=2)
    return {
        "llama": (LlamaForCausalLM, LlamaConfig(hidden_size=72, intermediate_size=200, num_hidden_layers=2,
                                                num_attention_heads=6, num_key_value_heads=2, **common)),
        "qwen2": (Qwen2ForCausalLM, Qwen2Config(hidden_size=72, intermediate_size=200, num_hidden_layers=2,
                                                num_attention_heads=6, num_key_value_heads=3,
                                                tie_word_embeddings=True, **common)),
        "mistral": (MistralForCausalLM, MistralConfig(hidden_size=40, intermediate_size=120, num_hidden_layers=2,
                                                      num_attention_heads=4, num_key_value_heads=2,
                                                      sliding_window=6, **common)),
        "gpt2": (GPT2LMHeadModel, GPT2Config(vocab_size=V, n_embd=72, n_layer=2, n_head=6, n_positions=64,
                                             attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0,
                                             bos_token_id=1, eos_token_id=2)),
        "phi3": (Phi3ForCausalLM, Phi3Config(hidden_size=64, intermediate_size=136, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2,
                                             resid_pdrop=0.0, embd_pdrop=0.0, attention_dropout=0.0,
                                             original_max_position_embeddings=64, **common)),
        "gemma": (GemmaForCausalLM, GemmaConfig(hidden_size=48, intermediate_size=104, num_hidden_layers=2,
                                                num_attention_heads=4, num_key_value_heads=1, head_dim=16,
                                                hidden_activation="gelu_pytorch_tanh", **common)),
        # per-head q/k RMSNorm before RoPE, head_dim not hidden / heads
        "qwen3": (Qwen3ForCausalLM, Qwen3Config(hidden_size=64, intermediate_size=136, num_hidden_layers=2,
                                                num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                                tie_word_embeddings=True, **common)),
        # full-width q/k RMSNorm (over all heads of q, of k) before the head split and RoPE
        "olmo2": (Olmo2ForCausalLM, Olmo2Config(hidden_size=64, intermediate_size=136, num_hidden_layers=2,
                                                num_attention_heads=4, num_key_value_heads=2, **common)),
        # per-head q/k RMSNorm with (1 + w) weights, sliding-window layers between global ones
        "gemma3": (Gemma3ForCausalLM, Gemma3TextConfig(hidden_size=48, intermediate_size=104, num_hidden_layers=2,
                                                       num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                                       sliding_window=6, layer_types=["sliding_attention",
                                                                                      "full_attention"],
                                                       **common)),
        # LayerNorm, GELU, biases, partial rotary (rotary_pct 0.25), parallel attention + MLP
        "gpt_neox": (GPTNeoXForCausalLM, GPTNeoXConfig(vocab_size=V, hidden_size=64, intermediate_size=136,
                                                      num_hidden_layers=2, num_attention_heads=4,
                                                      rotary_pct=0.25, max_position_embeddings=64,
                                                      use_parallel_residual=True, hidden_dropout=0.0,
                                                      attention_dropout=0.0, bos_token_id=1,
                                                      eos_token_id=2)),
        # attention and final-logit softcapping, sliding window on every other layer, head dim
        # not hidden / heads, four norms a block
        "gemma2": (Gemma2ForCausalLM, Gemma2Config(hidden_size=48, intermediate_size=104, num_hidden_layers=2,
                                                   num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                                   sliding_window=6, attn_logit_softcapping=5.0,
                                                   final_logit_softcapping=3.0, query_pre_attn_scalar=16,
                                                   layer_types=["sliding_attention", "full_attention"],
                                                   **common)),
        # LayerNorm with biases, GELU (tanh), biased projections, sliding window, GQA
        "starcoder2": (Starcoder2ForCausalLM, Starcoder2Config(hidden_size=48, intermediate_size=104,
                                                               num_hidden_layers=2, num_attention_heads=4,
                                                               num_key_value_heads=2, sliding_window=6,
                                                               residual_dropout=0.0, embedding_dropout=0.0,
                                                               attention_dropout=0.0, **common)),
        # parallel attention + MLP off one LayerNorm, partial rotary (0.5), biased dense, gelu_new
        "phi": (PhiForCausalLM, PhiConfig(hidden_size=64, intermediate_size=136, num_hidden_layers=2,
                                          num_attention_heads=4, partial_rotary_factor=0.5, resid_pdrop=0.0,
                                          embd_pdrop=0.0, attention_dropout=0.0, **common)),
        # learned positions (offset 2), pre-LayerNorm, ReLU, biased projections
        "opt": (OPTForCausalLM, OPTConfig(vocab_size=V, hidden_size=48, ffn_dim=104, num_hidden_layers=2,
                                          num_attention_heads=4, max_position_embeddings=64, dropout=0.0,
                                          attention_dropout=0.0, word_embed_proj_dim=48, pad_token_id=0,
                                          bos_token_id=1, eos_token_id=2)),
        # parallel attention + MLP off one LayerNorm, multi-query attention, fused query_key_value
        "falcon": (FalconForCausalLM, FalconConfig(vocab_size=V, hidden_size=64, num_hidden_layers=2,
                                                   num_attention_heads=4, multi_query=True, parallel_attn=True,
                                                   new_decoder_architecture=False, bias=False, alibi=False,
                                                   hidden_dropout=0.0, attention_dropout=0.0,
                                                   max_position_embeddings=64, bos_token_id=1, eos_token_id=2)),
        "bert": (BertForMaskedLM, BertConfig(vocab_size=V, hidden_size=40, intermediate_size=100,
                                             num_hidden_layers=2, num_attention_heads=4,
                                             max_position_embeddings=64, hidden_dropout_prob=0.0,
                                             attention_probs_dropout_prob=0.0, pad_token_id=0)),
    }


def markov_tokens(seed, n):
    """Ids 2..V-1 (BERT's padding row 0 is never updated by PyTorch; fp8run trains every row)."""
    rs = np.random.RandomState(seed)
    succ = rs.randint(2, V, size=(V, 4))
    out = np.empty(n, dtype=np.int64)
    cur = 2
    for i in range(n):
        out[i] = cur
        cur = rs.randint(2, V) if rs.rand() < 0.05 else succ[cur, rs.choice(4, p=[0.55, 0.25, 0.12, 0.08])]
    return out


def logits_only(m, bert):
    """The module itself (so that parameter names are the module's own, as in its state_dict and
    safetensors), its forward bound to return the plain tuple (logits,) without a cache."""
    kw = dict(return_dict=False) if bert else dict(return_dict=False, use_cache=False)
    m.forward = functools.partial(m.forward, **kw)
    return m


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
        logits = w(input_ids=x, attention_mask=torch.ones_like(x))[0]
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(w.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    w.eval()
    return losses


def padded_masks():
    """Row 1 padded on the right (its last PAD tokens) and on the left (its first PAD)."""
    right = np.ones((B, T), np.int64)
    right[1, T - PAD:] = 0
    left = np.ones((B, T), np.int64)
    left[1, :PAD] = 0
    return {"right": right, "left": left}


def save_padded(w, ids, d):
    for side, mask in padded_masks().items():
        with torch.no_grad():
            logits = w(input_ids=ids, attention_mask=torch.tensor(mask))[0]
        np.save(os.path.join(d, "input_attention_mask_%s.npy" % side), mask)
        np.save(os.path.join(d, "output_logits_%s.npy" % side), logits.float().numpy())


def perturb_norms(arch, m):
    """Distinct norm weights, as a pretrained model's are: with the fresh init's equal ones the
    exporter merges GPT-NeoX's two LayerNorms of a parallel block (same input, equal weights)
    into one node, and the export trains one where PyTorch trains two."""
    if arch not in ("gpt_neox", "olmo2", "gemma3", "gemma2", "starcoder2", "phi", "opt", "falcon"):
        return
    gn = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for k, p in m.named_parameters():
            if "norm" in k:
                p.add_(0.1 * torch.randn(p.shape, generator=gn))


def padded_only():
    """The padded references for the dynamic fixtures in OUT, their models rebuilt from the seeds."""
    ok = True
    for arch, (cls, cfg) in configs().items():
        if arch not in DYNAMIC or (ONLY and arch not in ONLY):
            continue
        for opset in (18, 23):
            d = os.path.join(OUT, "%s_op%d_dynamic" % (arch, opset))
            if not os.path.isdir(d):
                continue
            torch.manual_seed(0)
            m = cls(cfg)
            perturb_norms(arch, m)
            if hasattr(m.config, "use_cache"):
                m.config.use_cache = False
            w = logits_only(m, False).eval()
            ids = torch.tensor(np.load(os.path.join(d, "input_input_ids.npy")))
            with torch.no_grad():
                logits = w(input_ids=ids, attention_mask=torch.ones_like(ids))[0].float().numpy()
            off = float(np.abs(logits - np.load(os.path.join(d, "output_logits.npy"))).max())
            if off > 1e-5:
                print("%s: the rebuilt model's logits are off by %g: not its model" % (d, off))
                ok = False
                continue
            save_padded(w, ids, d)
            print("%s: padded references written (rebuilt logits within %g)" % (d, off))
    return 0 if ok else 1


def export(w, ids, path, opset, dynamic, external):
    if dynamic:
        mask = torch.ones_like(ids)
        bt = {0: torch.export.Dim("batch", max=64), 1: torch.export.Dim("seq", max=64)}
        prog = torch.onnx.export(w, (ids,), kwargs={"attention_mask": mask}, dynamo=True, opset_version=opset,
                                 input_names=["input_ids", "attention_mask"], output_names=["logits"],
                                 dynamic_shapes={"input_ids": bt, "attention_mask": bt})
    else:
        prog = torch.onnx.export(w, (ids,), dynamo=True, opset_version=opset,
                                 input_names=["input_ids"], output_names=["logits"])
    prog.save(path, external_data=external)


def main():
    os.makedirs(OUT, exist_ok=True)
    toks = markov_tokens(1234, 4096)
    toks.astype("<u2").tofile(os.path.join(OUT, "tokens.bin"))
    versions = {"torch": torch.__version__, "transformers": transformers.__version__}
    try:
        import onnxscript
        versions["onnxscript"] = onnxscript.__version__
    except Exception:
        pass
    ok = True
    for arch, (cls, cfg) in configs().items():
        if ONLY and arch not in ONLY:
            continue
        for opset in (18, 23):
            for style in ("static", "dynamic"):
                if style == "dynamic" and arch not in DYNAMIC:
                    continue
                name = "%s_op%d_%s" % (arch, opset, style)
                d = os.path.join(OUT, name)
                os.makedirs(d, exist_ok=True)
                torch.manual_seed(0)
                m = cls(cfg)
                perturb_norms(arch, m)
                if hasattr(m.config, "use_cache"):
                    m.config.use_cache = False
                w = logits_only(m, arch == "bert").eval()
                if arch == "llama" and opset == 18 and style == "static":
                    m.save_pretrained(os.path.join(OUT, "llama_safetensors"), safe_serialization=True)
                g = torch.Generator().manual_seed(7)
                ids = torch.randint(2, V, (B, T), generator=g)
                try:
                    export(w, ids, os.path.join(d, "model.onnx"), opset, style == "dynamic",
                           arch == "llama" and style == "dynamic")
                except Exception as e:  # record and go on: one architecture must not stop the rest
                    print("%s: export failed: %s" % (name, str(e).splitlines()[0][:300]))
                    ok = False
                    continue
                with torch.no_grad():
                    logits = w(input_ids=ids, attention_mask=torch.ones_like(ids) if style == "dynamic" else None)[0]
                np.save(os.path.join(d, "input_input_ids.npy"), ids.numpy().astype(np.int64))
                if style == "dynamic":
                    np.save(os.path.join(d, "input_attention_mask.npy"), np.ones((B, T), np.int64))
                    save_padded(w, ids, d)
                np.save(os.path.join(d, "output_logits.npy"), logits.float().numpy())
                losses = torch_losses(w, toks)  # after the export: it must see the initial weights
                with open(os.path.join(d, "losses.txt"), "w") as f:
                    f.write("".join("%.9g\n" % l for l in losses))
                meta = {"arch": arch, "opset": opset, "style": style, "batch": B, "seq": T, "vocab": V,
                        "steps": STEPS, "lr": LR, "versions": versions, "config": cfg.to_dict(),
                        "parameters": {k: list(p.shape) for k, p in m.named_parameters()}}
                with open(os.path.join(d, "meta.json"), "w") as f:
                    json.dump(meta, f, indent=1, sort_keys=True, default=str)
                print("%s: loss %.4f -> %.4f, %d params" % (name, losses[0], losses[-1],
                                                            sum(p.numel() for p in m.parameters())))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(padded_only() if PADDED_ONLY else main())
