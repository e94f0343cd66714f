#!/usr/bin/env python3
# Exports the tiny PyTorch fixture models (GPT-2 style, Llama style) to tests/fixtures/NAME/:
# model.onnx, input_<name>.npy, output_<name>.npy (PyTorch reference) and meta.json.
# Needs Debian python3-torch and python3-onnx:  /usr/bin/python3 tools/gen_fixture_models.py tests/fixtures
import json, math, os, sys
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

OUT = sys.argv[1]

class GPT2Block(nn.Module):
    def __init__(s, d, h, maxpos):
        super().__init__()
        s.h = h
        s.ln_1 = nn.LayerNorm(d); s.c_attn = nn.Linear(d, 3 * d); s.c_proj = nn.Linear(d, d)
        s.ln_2 = nn.LayerNorm(d); s.c_fc = nn.Linear(d, 4 * d); s.c_proj2 = nn.Linear(4 * d, d)
        s.register_buffer("bias", torch.tril(torch.ones(maxpos, maxpos)).view(1, 1, maxpos, maxpos))
    def forward(s, x):
        B, T, C = x.shape
        q, k, v = s.c_attn(s.ln_1(x)).split(C, dim=2)
        hd = C // s.h
        q = q.view(B, T, s.h, hd).transpose(1, 2); k = k.view(B, T, s.h, hd).transpose(1, 2); v = v.view(B, T, s.h, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(s.bias[:, :, :T, :T] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        x = x + s.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        h = s.c_fc(s.ln_2(x))
        h = 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * torch.pow(h, 3.0))))
        return x + s.c_proj2(h)

class GPT2(nn.Module):
    def __init__(s, vocab=96, d=48, h=3, layers=2, maxpos=32):
        super().__init__()
        s.wte = nn.Embedding(vocab, d); s.wpe = nn.Embedding(maxpos, d)
        s.blocks = nn.ModuleList([GPT2Block(d, h, maxpos) for _ in range(layers)])
        s.ln_f = nn.LayerNorm(d); s.lm_head = nn.Linear(d, vocab, bias=False)
        s.lm_head.weight = s.wte.weight
    def forward(s, input_ids):
        T = input_ids.shape[1]
        pos = torch.arange(0, T, dtype=torch.long, device=input_ids.device)
        x = s.wte(input_ids) + s.wpe(pos)
        for b in s.blocks: x = b(x)
        return s.lm_head(s.ln_f(x))

class RMSNorm(nn.Module):
    def __init__(s, d, eps=1e-6):
        super().__init__(); s.weight = nn.Parameter(torch.ones(d) + 0.1 * torch.randn(d)); s.eps = eps
    def forward(s, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + s.eps) * s.weight

def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]; x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)

class LlamaBlock(nn.Module):
    def __init__(s, d, nh, nkv, hidden):
        super().__init__()
        s.nh, s.nkv, s.hd = nh, nkv, d // nh
        s.input_layernorm = RMSNorm(d); s.post_attention_layernorm = RMSNorm(d)
        s.q_proj = nn.Linear(d, nh * s.hd, bias=False); s.k_proj = nn.Linear(d, nkv * s.hd, bias=False)
        s.v_proj = nn.Linear(d, nkv * s.hd, bias=False); s.o_proj = nn.Linear(nh * s.hd, d, bias=False)
        s.gate_proj = nn.Linear(d, hidden, bias=False); s.up_proj = nn.Linear(d, hidden, bias=False); s.down_proj = nn.Linear(hidden, d, bias=False)
    def forward(s, x, cos, sin, mask):
        B, T, _ = x.shape
        h = s.input_layernorm(x)
        q = s.q_proj(h).view(B, T, s.nh, s.hd).transpose(1, 2)
        k = s.k_proj(h).view(B, T, s.nkv, s.hd).transpose(1, 2)
        v = s.v_proj(h).view(B, T, s.nkv, s.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin; k = k * cos + rotate_half(k) * sin
        rep = s.nh // s.nkv
        k = k[:, :, None, :, :].expand(B, s.nkv, rep, T, s.hd).reshape(B, s.nh, T, s.hd)
        v = v[:, :, None, :, :].expand(B, s.nkv, rep, T, s.hd).reshape(B, s.nh, T, s.hd)
        att = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(s.hd) + mask
        y = torch.matmul(F.softmax(att, dim=-1), v).transpose(1, 2).reshape(B, T, -1)
        x = x + s.o_proj(y)
        h = s.post_attention_layernorm(x)
        return x + s.down_proj(F.silu(s.gate_proj(h)) * s.up_proj(h))

class Llama(nn.Module):
    def __init__(s, vocab=128, d=64, nh=4, nkv=2, hidden=176, layers=2):
        super().__init__()
        s.embed_tokens = nn.Embedding(vocab, d)
        s.layers = nn.ModuleList([LlamaBlock(d, nh, nkv, hidden) for _ in range(layers)])
        s.norm = RMSNorm(d); s.lm_head = nn.Linear(d, vocab, bias=False)
        hd = d // nh
        s.register_buffer("inv_freq", 1.0 / (10000 ** (torch.arange(0, hd, 2).float() / hd)))
    def forward(s, input_ids):
        B, T = input_ids.shape
        pos = torch.arange(T, dtype=torch.float32)
        freqs = pos[:, None] * s.inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None, None], emb.sin()[None, None]
        mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)[None, None]
        x = s.embed_tokens(input_ids)
        for l in s.layers: x = l(x, cos, sin, mask)
        return s.lm_head(s.norm(x))


class BertLayer(nn.Module):
    def __init__(s, d, h, ff):
        super().__init__()
        s.h = h
        s.query = nn.Linear(d, d); s.key = nn.Linear(d, d); s.value = nn.Linear(d, d)
        s.attn_out = nn.Linear(d, d); s.ln1 = nn.LayerNorm(d, eps=1e-12)
        s.inter = nn.Linear(d, ff); s.out = nn.Linear(ff, d); s.ln2 = nn.LayerNorm(d, eps=1e-12)
        s.act = nn.GELU()
    def forward(s, x, add_mask):
        B, T, C = x.shape
        hd = C // s.h
        sh = lambda t: t.view(B, T, s.h, hd).permute(0, 2, 1, 3)
        q, k, v = sh(s.query(x)), sh(s.key(x)), sh(s.value(x))
        att = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd) + add_mask
        y = torch.matmul(F.softmax(att, dim=-1), v).permute(0, 2, 1, 3).reshape(B, T, C)
        x = s.ln1(x + s.attn_out(y))
        return s.ln2(x + s.out(s.act(s.inter(x))))

class Bert(nn.Module):
    def __init__(s, vocab=80, d=32, h=2, layers=2, maxpos=16):
        super().__init__()
        s.word = nn.Embedding(vocab, d); s.pos = nn.Embedding(maxpos, d); s.tok = nn.Embedding(2, d)
        s.ln = nn.LayerNorm(d, eps=1e-12)
        s.layers = nn.ModuleList([BertLayer(d, h, 4 * d) for _ in range(layers)])
        s.dense = nn.Linear(d, d); s.act = nn.GELU(); s.ln_head = nn.LayerNorm(d, eps=1e-12); s.decoder = nn.Linear(d, vocab)
    def forward(s, input_ids, attention_mask, token_type_ids):
        T = input_ids.shape[1]
        pos = torch.arange(T, dtype=torch.long).unsqueeze(0)
        x = s.ln(s.word(input_ids) + s.pos(pos) + s.tok(token_type_ids))
        add_mask = (1.0 - attention_mask[:, None, None, :].to(torch.float32)) * -10000.0
        for l in s.layers: x = l(x, add_mask)
        return s.decoder(s.ln_head(s.act(s.dense(x))))

def export_bert(name, opset):
    torch.manual_seed(3)
    model = Bert().eval()
    d = os.path.join(OUT, name); os.makedirs(d, exist_ok=True)
    g = torch.Generator().manual_seed(5)
    B, T = 2, 9
    ids = torch.randint(0, 80, (B, T), generator=g)
    mask = torch.ones(B, T, dtype=torch.long); mask[1, 6:] = 0
    tt = torch.zeros(B, T, dtype=torch.long); tt[:, 4:] = 1
    with torch.no_grad(): out = model(ids, mask, tt)
    dyn = {"batch": None}
    axes = {k: {0: "batch", 1: "seq"} for k in ["input_ids", "attention_mask", "token_type_ids", "logits"]}
    torch.onnx.export(model, (ids, mask, tt), os.path.join(d, "model.onnx"), input_names=["input_ids", "attention_mask", "token_type_ids"],
                      output_names=["logits"], dynamic_axes=axes, opset_version=opset)
    for n, t in [("input_ids", ids), ("attention_mask", mask), ("token_type_ids", tt)]:
        np.save(os.path.join(d, "input_%s.npy" % n), t.numpy().astype(np.int64))
    np.save(os.path.join(d, "output_logits.npy"), out.numpy().astype(np.float32))
    json.dump({"inputs": {n: {"dtype": "int64", "shape": [B, T]} for n in ["input_ids", "attention_mask", "token_type_ids"]},
               "outputs": {"logits": {"dtype": "float32", "shape": list(out.shape)}}, "dims": {"batch": B, "seq": T}, "opset": opset},
              open(os.path.join(d, "meta.json"), "w"), indent=1)
    print(name, "ok")

def export(name, model, B, T, vocab, opset, fold=True):
    d = os.path.join(OUT, name); os.makedirs(d, exist_ok=True)
    model.eval()
    g = torch.Generator().manual_seed(123)
    ids = torch.randint(0, vocab, (B, T), generator=g)
    with torch.no_grad(): out = model(ids)
    torch.onnx.export(model, (ids,), os.path.join(d, "model.onnx"), input_names=["input_ids"], output_names=["logits"],
                      dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}},
                      opset_version=opset, do_constant_folding=fold)
    np.save(os.path.join(d, "input_input_ids.npy"), ids.numpy().astype(np.int64))
    np.save(os.path.join(d, "output_logits.npy"), out.numpy().astype(np.float32))
    json.dump({"inputs": {"input_ids": {"dtype": "int64", "shape": [B, T]}}, "outputs": {"logits": {"dtype": "float32", "shape": list(out.shape)}},
               "dims": {"batch": B, "seq": T}, "opset": opset}, open(os.path.join(d, "meta.json"), "w"), indent=1)
    print(name, "ok")

torch.manual_seed(0); export("gpt2_tiny", GPT2(), 2, 11, 96, 17)
torch.manual_seed(1); export("llama_tiny", Llama(), 2, 13, 128, 17)
torch.manual_seed(2); export("llama_tiny_op14", Llama(d=40, hidden=104), 2, 7, 128, 14)
torch.manual_seed(0); export("gpt2_tiny_op13", GPT2(), 1, 5, 96, 13, fold=False)
export_bert("bert_tiny", 17)
