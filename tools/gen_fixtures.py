#!/usr/bin/python3
"""Write the PyTorch -> ONNX fixture models for tests/test_models.c and tests/test_onnx_io.c,
and the broken files in tests/fixtures/bad/ for the loader's bad-input tests.

Run with the system Python that has torch 1.13 and onnx 1.12:

    /usr/bin/python3 tools/gen_fixtures.py

For each model NAME it writes tests/fixtures/NAME/:
    model.onnx              weights inline (TorchScript exporter, torch.onnx.export)
    input_<name>.npy        one per graph input (int64), .npy v1, little-endian
    output_<name>.npy       PyTorch's float32 result for those inputs (eval mode, float32)
    meta.json               inputs/outputs (dtype, shape), dims, opset, description

The models are written out in plain PyTorch (no transformers library). Every seed is fixed and
the exporter is deterministic, so running this again reproduces the files byte for byte (with
the same torch/onnx/numpy versions). tools/check_fixtures_ort.py (pyenv python3 with
onnxruntime) checks that every exported model reproduces the stored outputs in onnxruntime.
"""
import json
import math
import os
import shutil
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "tests", "fixtures"))

torch.set_num_threads(1)  # deterministic reductions; the models are tiny anyway
# the tracer warns about math.sqrt(hd) etc. becoming constants: intended, the shapes are static
warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)


# --------------------------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------------------------


def gelu_tanh(x):
    """GELU, tanh approximation, written out (GPT-2's gelu_new)."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, d, n_head, max_pos):
        super().__init__()
        self.n_head = n_head
        self.d = d
        self.c_attn = nn.Linear(d, 3 * d)  # fused q, k, v
        self.c_proj = nn.Linear(d, d)
        self.attn_dropout = nn.Dropout(0.1)  # identity in eval mode
        self.resid_dropout = nn.Dropout(0.1)
        self.register_buffer("bias", torch.tril(torch.ones(max_pos, max_pos, dtype=torch.bool))
                             .view(1, 1, max_pos, max_pos))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.d, dim=2)
        hd = C // self.n_head
        q = q.view(B, T, self.n_head, hd).transpose(1, 2)  # [B, H, T, hd]
        k = k.view(B, T, self.n_head, hd).transpose(1, 2)
        v = v.view(B, T, self.n_head, hd).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hd)
        causal = self.bias[:, :, :T, :T]
        mask_value = torch.full([], torch.finfo(att.dtype).min, dtype=att.dtype)
        att = torch.where(causal, att, mask_value)
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = torch.matmul(att, v)  # [B, H, T, hd]
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class GPT2MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc = nn.Linear(d, 4 * d)
        self.c_proj = nn.Linear(4 * d, d)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x):
        return self.dropout(self.c_proj(gelu_tanh(self.c_fc(x))))


class GPT2Block(nn.Module):
    def __init__(self, d, n_head, max_pos):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = GPT2Attention(d, n_head, max_pos)
        self.ln_2 = nn.LayerNorm(d, eps=1e-5)
        self.mlp = GPT2MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT2(nn.Module):
    def __init__(self, vocab, d, n_head, n_layer, max_pos):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(max_pos, d)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList([GPT2Block(d, n_head, max_pos) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d, eps=1e-5)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied

    def forward(self, input_ids):
        T = input_ids.size(1)
        pos = torch.arange(0, T, dtype=torch.long, device=input_ids.device).unsqueeze(0)
        x = self.drop(self.wte(input_ids) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x):
    half = x.shape[-1] // 2
    x1 = x[..., :half]
    x2 = x[..., half:]
    return torch.cat((-x2, x1), dim=-1)


def repeat_kv(x, n_rep):
    """[B, n_kv, T, hd] -> [B, n_kv * n_rep, T, hd] (expand + reshape, as in HF Llama)."""
    B, n_kv, T, hd = x.shape
    if n_rep == 1:
        return x
    x = x[:, :, None, :, :].expand(B, n_kv, n_rep, T, hd)
    return x.reshape(B, n_kv * n_rep, T, hd)


class LlamaAttention(nn.Module):
    def __init__(self, d, n_head, n_kv_head):
        super().__init__()
        self.n_head = n_head
        self.n_kv = n_kv_head
        self.hd = d // n_head
        self.q_proj = nn.Linear(d, n_head * self.hd, bias=False)
        self.k_proj = nn.Linear(d, n_kv_head * self.hd, bias=False)
        self.v_proj = nn.Linear(d, n_kv_head * self.hd, bias=False)
        self.o_proj = nn.Linear(n_head * self.hd, d, bias=False)

    def forward(self, x, cos, sin, mask):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.n_head, self.hd).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.n_kv, self.hd).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_kv, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin  # cos, sin: [1, 1, T, hd]
        k = k * cos + rotate_half(k) * sin
        k = repeat_kv(k, self.n_head // self.n_kv)
        v = repeat_kv(v, self.n_head // self.n_kv)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.hd)
        scores = scores + mask  # additive causal mask: -inf above the diagonal
        p = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        y = torch.matmul(p, v).transpose(1, 2).reshape(B, T, self.n_head * self.hd)
        return self.o_proj(y)


class LlamaMLP(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.gate_proj = nn.Linear(d, hidden, bias=False)
        self.up_proj = nn.Linear(d, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaBlock(nn.Module):
    def __init__(self, d, n_head, n_kv, hidden, eps):
        super().__init__()
        self.input_layernorm = RMSNorm(d, eps)
        self.self_attn = LlamaAttention(d, n_head, n_kv)
        self.post_attention_layernorm = RMSNorm(d, eps)
        self.mlp = LlamaMLP(d, hidden)

    def forward(self, x, cos, sin, mask):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, mask)
        x = x + self.mlp(self.post_attention_layernorm(x))
        return x


class Llama(nn.Module):
    def __init__(self, vocab, d, n_head, n_kv, hidden, n_layer, eps=1e-6, theta=10000.0):
        super().__init__()
        hd = d // n_head
        self.embed_tokens = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([LlamaBlock(d, n_head, n_kv, hidden, eps) for _ in range(n_layer)])
        self.norm = RMSNorm(d, eps)
        self.lm_head = nn.Linear(d, vocab, bias=False)  # untied
        inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, input_ids):
        T = input_ids.shape[1]
        x = self.embed_tokens(input_ids)
        # rotary tables from the position ids, computed in forward
        position_ids = torch.arange(T, dtype=torch.long, device=input_ids.device)
        # [T, 1] @ [1, hd/2] -> [T, hd/2]: torch.outer would export as Einsum("i,j->ij")
        freqs = torch.matmul(position_ids.to(self.inv_freq.dtype)[:, None], self.inv_freq[None, :])
        emb = torch.cat((freqs, freqs), dim=-1)  # [T, hd]
        cos = emb.cos()[None, None, :, :]
        sin = emb.sin()[None, None, :, :]
        # causal mask: Trilu over a boolean "above the diagonal" pattern, turned into an additive
        # -inf / 0 mask with Where
        dt = self.inv_freq.dtype  # float32 for the fixtures
        upper = torch.triu(torch.ones(T, T, dtype=dt, device=input_ids.device), diagonal=1)
        neg_inf = torch.full((T, T), float("-inf"), dtype=dt, device=input_ids.device)
        mask = torch.where(upper > 0, neg_inf, torch.zeros_like(neg_inf))[None, None, :, :]
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.norm(x))


class BertEmbeddings(nn.Module):
    def __init__(self, vocab, d, max_pos, type_vocab, eps):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, d)
        self.position_embeddings = nn.Embedding(max_pos, d)
        self.token_type_embeddings = nn.Embedding(type_vocab, d)
        self.LayerNorm = nn.LayerNorm(d, eps=eps)
        self.dropout = nn.Dropout(0.1)
        self.register_buffer("position_ids", torch.arange(max_pos).expand((1, -1)))

    def forward(self, input_ids, token_type_ids):
        T = input_ids.size(1)
        pos = self.position_ids[:, :T]  # slice of a registered buffer (HF BERT style)
        x = self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids) \
            + self.position_embeddings(pos)
        return self.dropout(self.LayerNorm(x))


class BertLayer(nn.Module):
    def __init__(self, d, n_head, inter, eps):
        super().__init__()
        self.n_head = n_head
        self.hd = d // n_head
        self.query = nn.Linear(d, d)
        self.key = nn.Linear(d, d)
        self.value = nn.Linear(d, d)
        self.attn_out = nn.Linear(d, d)
        self.attn_ln = nn.LayerNorm(d, eps=eps)
        self.intermediate = nn.Linear(d, inter)
        self.act = nn.GELU()  # exact erf GELU
        self.output = nn.Linear(inter, d)
        self.out_ln = nn.LayerNorm(d, eps=eps)
        self.dropout = nn.Dropout(0.1)

    def split(self, x):
        B, T, _ = x.size()
        return x.view(B, T, self.n_head, self.hd).permute(0, 2, 1, 3)

    def forward(self, x, ext_mask):
        B, T, C = x.size()
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.hd) + ext_mask
        p = self.dropout(F.softmax(scores, dim=-1))
        ctx = torch.matmul(p, v).permute(0, 2, 1, 3).contiguous().view(B, T, C)
        x = self.attn_ln(self.dropout(self.attn_out(ctx)) + x)  # post-LN
        h = self.output(self.act(self.intermediate(x)))
        return self.out_ln(self.dropout(h) + x)


class Bert(nn.Module):
    def __init__(self, vocab, d, n_head, n_layer, inter, max_pos, type_vocab=2, eps=1e-12):
        super().__init__()
        self.embeddings = BertEmbeddings(vocab, d, max_pos, type_vocab, eps)
        self.layers = nn.ModuleList([BertLayer(d, n_head, inter, eps) for _ in range(n_layer)])
        # MLM head: dense + gelu + LayerNorm + decoder
        self.head_dense = nn.Linear(d, d)
        self.head_act = nn.GELU()
        self.head_ln = nn.LayerNorm(d, eps=eps)
        self.decoder = nn.Linear(d, vocab)

    def forward(self, input_ids, attention_mask, token_type_ids):
        x = self.embeddings(input_ids, token_type_ids)
        ext = attention_mask[:, None, None, :].to(torch.float32)  # [B, 1, 1, T]
        ext = (1.0 - ext) * torch.finfo(torch.float32).min
        for layer in self.layers:
            x = layer(x, ext)
        return self.decoder(self.head_ln(self.head_act(self.head_dense(x))))


# --------------------------------------------------------------------------------------------
# weights: fixed seeds, scaled so activations stay O(1) (attention is peaked, norms' gains and
# biases are not the trivial 1 / 0, so a mistake in any op shows in the logits)
# --------------------------------------------------------------------------------------------


def init_weights(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            is_embedding = "embed" in name or name.startswith(("wte.", "wpe."))
            if p.dim() == 2 and not is_embedding:  # Linear weights [out, in]
                fan_in = p.shape[1]
                p.copy_(torch.randn(p.shape, generator=g) * (1.0 / math.sqrt(fan_in)))
            elif p.dim() == 2:  # embeddings
                p.copy_(torch.randn(p.shape, generator=g) * 0.7)
            elif name.endswith("weight"):  # LayerNorm / RMSNorm gains
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            else:  # biases
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
    return model


# --------------------------------------------------------------------------------------------
# export
# --------------------------------------------------------------------------------------------


def save_npy(path, arr):
    arr = np.ascontiguousarray(arr)
    assert arr.dtype.byteorder in ("<", "=", "|")
    with open(path, "wb") as f:
        np.lib.format.write_array(f, arr, version=(1, 0), allow_pickle=False)


def export_model(name, model, inputs, opset, fold, description):
    """inputs: ordered list of (name, int64 tensor [batch, seq])."""
    out_dir = os.path.join(ROOT, name)
    if os.path.isdir(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    model.eval()
    args = tuple(t for _, t in inputs)
    in_names = [n for n, _ in inputs]
    with torch.no_grad():
        logits = model(*args)
    dyn = {n: {0: "batch", 1: "seq"} for n in in_names}
    dyn["logits"] = {0: "batch", 1: "seq"}
    path = os.path.join(out_dir, "model.onnx")
    with torch.no_grad():
        torch.onnx.export(model, args, path, input_names=in_names, output_names=["logits"],
                          dynamic_axes=dyn, opset_version=opset, do_constant_folding=fold,
                          training=torch.onnx.TrainingMode.EVAL, export_params=True)
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    # checks on what the C side relies on
    assert all(i.type.tensor_type.shape.dim[0].dim_param == "batch" and
               i.type.tensor_type.shape.dim[1].dim_param == "seq" for i in m.graph.input), name
    assert [o.name for o in m.graph.output] == ["logits"], name
    assert not any(t.data_location == TensorProto.EXTERNAL for t in m.graph.initializer)
    assert os.path.getsize(path) < 1 << 20, (name, os.path.getsize(path))

    for n, t in inputs:
        save_npy(os.path.join(out_dir, "input_%s.npy" % n), t.numpy().astype("<i8"))
    y = logits.numpy().astype("<f4")
    save_npy(os.path.join(out_dir, "output_logits.npy"), y)
    B, T = inputs[0][1].shape
    meta = {
        "inputs": {n: {"dtype": "int64", "shape": list(t.shape)} for n, t in inputs},
        "outputs": {"logits": {"dtype": "float32", "shape": list(y.shape)}},
        "dims": {"batch": int(B), "seq": int(T)},
        "opset": opset,
        "do_constant_folding": fold,
        "description": description,
        "generator": "tools/gen_fixtures.py with torch %s, onnx %s, numpy %s"
                     % (torch.__version__, onnx.__version__, np.__version__),
    }
    with open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    hist = {}
    for node in m.graph.node:
        hist[node.op_type] = hist.get(node.op_type, 0) + 1
    return m, hist


def token_ids(seed, B, T, vocab):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (B, T), generator=g, dtype=torch.int64)
    ids[0, 0] = 0  # first and last rows of the embedding table
    ids[-1, -1] = vocab - 1
    return ids


GPT2_CFG = dict(vocab=96, d=48, n_head=3, n_layer=2, max_pos=32)


def build_gpt2(seed):
    torch.manual_seed(seed)
    return init_weights(GPT2(**GPT2_CFG), seed)


def build_llama(seed, d, hidden, vocab=128, n_head=4, n_kv=2, n_layer=2):
    torch.manual_seed(seed)
    return init_weights(Llama(vocab, d, n_head, n_kv, hidden, n_layer), seed)


def gen_models():
    hists = {}

    m = build_gpt2(1001)
    _, hists["gpt2_tiny"] = export_model(
        "gpt2_tiny", m, [("input_ids", token_ids(11, 2, 11, 96))], 17, True,
        "GPT-2 architecture: token + learned position embeddings (positions from torch.arange), "
        "2 pre-LayerNorm blocks (3 heads, d_model 48, fused c_attn split into q/k/v, causal mask "
        "from a tril bool buffer applied with torch.where(finfo.min), tanh GELU written out), "
        "final LayerNorm, LM head tied to the token embedding. vocab 96, max positions 32.")

    m = build_llama(2002, d=64, hidden=176)
    _, hists["llama_tiny"] = export_model(
        "llama_tiny", m, [("input_ids", token_ids(22, 2, 13, 128))], 17, True,
        "Llama architecture: token embedding, RMSNorm written out (pow/mean/rsqrt), RoPE "
        "(rotate_half; cos/sin computed in forward from position ids and an inv_freq buffer, the "
        "outer product as a K=1 MatMul), GQA with 4 query heads / 2 KV heads (repeat_kv by expand "
        "+ reshape), additive causal -inf mask built with triu + full + where, SwiGLU MLP (hidden "
        "176), no biases, untied LM head. vocab 128, d_model 64, 2 layers.")

    m = build_llama(3003, d=40, hidden=104)
    _, hists["llama_tiny_op14"] = export_model(
        "llama_tiny_op14", m, [("input_ids", token_ids(33, 2, 7, 128))], 14, True,
        "The llama_tiny module class with other weights, exported at opset 14: d_model 40 "
        "(head_dim 10, 4 query heads, 2 KV heads), hidden 104, seq 7 (deliberately not multiples "
        "of 16).")

    torch.manual_seed(4004)
    m = init_weights(Bert(vocab=80, d=32, n_head=2, n_layer=2, inter=64, max_pos=16), 4004)
    B, T = 2, 9
    ids = token_ids(44, B, T, 80)
    am = torch.ones(B, T, dtype=torch.int64)
    am[1, 6:] = 0  # padding at the end of the second sequence
    am[0, 4] = 0  # and a hole in the first
    tt = torch.zeros(B, T, dtype=torch.int64)
    tt[:, 5:] = 1
    _, hists["bert_tiny"] = export_model(
        "bert_tiny", m, [("input_ids", ids), ("attention_mask", am), ("token_type_ids", tt)], 17,
        True,
        "BERT-style encoder: word + position (sliced position_ids buffer) + token_type embeddings, "
        "LayerNorm, 2 post-LN blocks (2 heads, d 32, intermediate 64, exact erf GELU), "
        "attention_mask (int64, 1 = keep; the fixture has zeros) turned into an additive "
        "(1 - mask) * finfo.min mask, MLM head (dense + gelu + LayerNorm + decoder). vocab 80.")

    m = build_gpt2(1001)  # the same weights as gpt2_tiny
    _, hists["gpt2_tiny_op13"] = export_model(
        "gpt2_tiny_op13", m, [("input_ids", token_ids(55, 1, 5, 96))], 13, False,
        "The gpt2_tiny module (same weights) exported at opset 13 with do_constant_folding=False: "
        "LayerNorm decomposes into ReduceMean/Sub/Pow/Sqrt/Div, and the Shape/Gather/Unsqueeze/"
        "Concat chains and the tied weight's Transpose stay unfolded.")
    return hists


# --------------------------------------------------------------------------------------------
# broken / hostile files for the loader's bad-input tests
# --------------------------------------------------------------------------------------------


def _model(nodes, inputs, outputs, inits, name, opset=17):
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                          producer_name="fp8run gen_fixtures.py")
    m.ir_version = 8
    return m


def _f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def tiny_valid_model():
    """Y = Relu(X @ W + B), X [batch, 4]; checks clean."""
    rng = np.random.RandomState(7)
    W = numpy_helper.from_array(rng.randn(4, 5).astype(np.float32), "W")
    Bb = numpy_helper.from_array(rng.randn(5).astype(np.float32), "B")
    nodes = [helper.make_node("MatMul", ["X", "W"], ["xw"], name="matmul"),
             helper.make_node("Add", ["xw", "B"], ["xwb"], name="add"),
             helper.make_node("Relu", ["xwb"], ["Y"], name="relu")]
    m = _model(nodes, [_f32("X", ["batch", 4])], [_f32("Y", ["batch", 5])], [W, Bb], "tiny")
    onnx.checker.check_model(m)
    return m


def _write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def _must_not_parse(data):
    try:
        m = onnx.ModelProto()
        m.ParseFromString(data)
    except Exception:
        return
    raise AssertionError("expected a protobuf parse failure")


def gen_bad():
    d = os.path.join(ROOT, "bad")
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    written = []

    def save(fname, m):
        p = os.path.join(d, fname)
        _write(p, m.SerializeToString())
        written.append(fname)

    valid = tiny_valid_model().SerializeToString()

    # truncated: a valid file cut in half (the cut lands inside the graph submessage)
    _must_not_parse(valid[:len(valid) // 2])
    _write(os.path.join(d, "truncated.onnx"), valid[:len(valid) // 2])
    written.append("truncated.onnx")

    # garbage: 256 random bytes; the first byte is forced to a tag with wire type 7 (invalid),
    # so no lenient parser can read it as a run of unknown fields
    rs = np.random.RandomState(12345)
    garbage = bytearray(rs.randint(0, 256, size=256, dtype=np.uint8).tobytes())
    garbage[0] = (garbage[0] & 0xF8) | 0x07
    _must_not_parse(bytes(garbage))
    _write(os.path.join(d, "garbage.onnx"), bytes(garbage))
    written.append("garbage.onnx")

    # raw_data 3 bytes short of dims x dtype (W is float [4, 5]: 80 bytes, has 77)
    m = tiny_valid_model()
    w = m.graph.initializer[0]
    assert w.name == "W" and len(w.raw_data) == 80
    w.raw_data = w.raw_data[:-3]
    save("raw_data_wrong_length.onnx", m)

    # gather_oob: Gather on a 10-row table; the index input in the .npy holds 12
    table = numpy_helper.from_array(
        np.arange(40, dtype=np.float32).reshape(10, 4) * 0.5, "table")
    nodes = [helper.make_node("Gather", ["table", "idx"], ["Y"], name="gather_rows", axis=0)]
    m = _model(nodes, [helper.make_tensor_value_info("idx", TensorProto.INT64, ["n"])],
               [_f32("Y", ["n", 4])], [table], "gather_oob")
    onnx.checker.check_model(m, full_check=True)
    save("gather_oob.onnx", m)
    save_npy(os.path.join(d, "gather_oob_input.npy"), np.array([3, 12, 0], dtype="<i8"))
    written.append("gather_oob_input.npy")

    # cycle: two Adds feeding each other
    nodes = [helper.make_node("Add", ["X", "b"], ["a"], name="add_a"),
             helper.make_node("Add", ["a", "X"], ["b"], name="add_b")]
    m = _model(nodes, [_f32("X", [2, 3])], [_f32("b", [2, 3])], [], "cycle")
    save("cycle.onnx", m)

    # dangling input: 'nowhere' is no graph input, initializer or node output
    nodes = [helper.make_node("Add", ["X", "nowhere"], ["Y"], name="add_dangling")]
    m = _model(nodes, [_f32("X", [2, 3])], [_f32("Y", [2, 3])], [], "dangling")
    save("dangling_input.onnx", m)

    # external data: a model whose initializers are all external
    def ext_model(entries):
        """entries: list of (name, array, location, offset, length)."""
        inits = []
        for nm, arr, loc, off, ln in entries:
            t = TensorProto()
            t.name = nm
            t.data_type = TensorProto.FLOAT
            t.dims.extend(arr.shape)
            t.data_location = TensorProto.EXTERNAL
            for k, v in (("location", loc), ("offset", str(off)), ("length", str(ln))):
                e = t.external_data.add()
                e.key, e.value = k, v
            inits.append(t)
        nodes = [helper.make_node("MatMul", ["X", "W"], ["xw"], name="matmul"),
                 helper.make_node("Add", ["xw", "B"], ["Y"], name="add")]
        return _model(nodes, [_f32("X", ["batch", 4])], [_f32("Y", ["batch", 5])], inits, "ext")

    rng = np.random.RandomState(99)
    W = rng.randn(4, 5).astype("<f4")
    Bv = rng.randn(5).astype("<f4")
    # extdata_ok.bin: W at offset 0 (80 bytes), 48 zero bytes of padding, B at offset 128
    binary = W.tobytes() + b"\0" * 48 + Bv.tobytes()
    _write(os.path.join(d, "extdata_ok.bin"), binary)
    written.append("extdata_ok.bin")
    save("extdata_ok.onnx", ext_model([("W", W, "extdata_ok.bin", 0, 80),
                                       ("B", Bv, "extdata_ok.bin", 128, 20)]))
    onnx.checker.check_model(os.path.join(d, "extdata_ok.onnx"), full_check=True)
    chk = onnx.load(os.path.join(d, "extdata_ok.onnx"))  # loads the external data
    assert np.array_equal(numpy_helper.to_array(chk.graph.initializer[0]), W)
    assert np.array_equal(numpy_helper.to_array(chk.graph.initializer[1]), Bv)
    # reference values for the check script
    save_npy(os.path.join(d, "extdata_ok_input_X.npy"), np.arange(12, dtype="<f4").reshape(3, 4) / 7)
    save_npy(os.path.join(d, "extdata_ok_output_Y.npy"),
             (np.arange(12, dtype="<f4").reshape(3, 4) / 7) @ W + Bv)
    written += ["extdata_ok_input_X.npy", "extdata_ok_output_Y.npy"]

    # B's 20 bytes would start 8 bytes before the end of the 148-byte file
    assert len(binary) == 148
    save("extdata_past_end.onnx", ext_model([("W", W, "extdata_ok.bin", 0, 80),
                                             ("B", Bv, "extdata_ok.bin", 140, 20)]))
    save("extdata_dotdot.onnx", ext_model([("W", W, "../secret.bin", 0, 80),
                                           ("B", Bv, "extdata_ok.bin", 128, 20)]))
    save("extdata_absolute.onnx", ext_model([("W", W, "/etc/passwd", 0, 80),
                                             ("B", Bv, "extdata_ok.bin", 128, 20)]))

    # shape_overflow: dims [2^40, 2^40, 16] (2^84 elements) with 16 bytes of raw_data
    t = TensorProto()
    t.name = "huge"
    t.data_type = TensorProto.FLOAT
    t.dims.extend([1 << 40, 1 << 40, 16])
    t.raw_data = b"\0" * 16
    nodes = [helper.make_node("Add", ["X", "huge"], ["Y"], name="add_huge")]
    m = _model(nodes, [_f32("X", [16])], [_f32("Y", [1 << 40, 1 << 40, 16])], [t], "overflow")
    save("shape_overflow.onnx", m)

    # unsupported_op: a node "FancyOp" in the default domain (a valid model otherwise); static
    # shapes, so nothing but the op stops preparation
    Wf = numpy_helper.from_array(np.ones((2, 3), np.float32), "Wf")
    nodes = [helper.make_node("Relu", ["X"], ["r"], name="relu"),
             helper.make_node("FancyOp", ["r", "Wf"], ["Y"], name="fancy_node", alpha=0.5)]
    m = _model(nodes, [_f32("X", [2, 3])], [_f32("Y", [2, 3])], [Wf], "unsupported")
    save("unsupported_op.onnx", m)
    return sorted(written)


def main():
    hists = gen_models()
    bad = gen_bad()
    for name, h in hists.items():
        print("%s: %s" % (name, ", ".join("%s %d" % kv for kv in sorted(h.items()))))
    print("bad/: " + " ".join(bad))
    total = 0
    for dp, _, fs in os.walk(ROOT):
        for f in fs:
            total += os.path.getsize(os.path.join(dp, f))
    print("tests/fixtures total: %.1f KiB" % (total / 1024))
    return 0


if __name__ == "__main__":
    sys.exit(main())
