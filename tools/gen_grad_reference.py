#!/usr/bin/python3
"""Write PyTorch autograd gradients of the fixture models for tests/test_model_grads.c.

Run with the system Python that has torch 1.13 and onnx 1.12 (Debian: python3-torch
python3-onnx):

    /usr/bin/python3 tools/gen_grad_reference.py

For each fixture model NAME (tests/fixtures/NAME/model.onnx, rebuilt here with the seeds and
configurations of tools/gen_fixtures.py) it writes tests/fixtures/grads/NAME/:
    windows.npy   int64 [B, T+1] token windows (inputs are the first T, labels the last T: the
                  trainer's next-token convention)
    grads.npy     float32, the gradients of every float initializer of rank >= 1 concatenated
                  (flattened, in the ONNX file's initializer order, in the ONNX layout)
    manifest.txt  "loss L" then one "name numel" line per initializer, in that order

The loss is the mean next-token cross-entropy over the B*T positions; the model runs in eval
mode (no dropout), in float64, so the reference carries no float32 rounding of its own. Graph
inputs other than the tokens get what fp8run's trainer feeds: attention_mask ones,
token_type_ids zeros.

Gradients are given in the ONNX file's layout: an initializer the exporter stored transposed
(onnx::MatMul_N, read by the MatMul of module path P) gets P.weight's gradient transposed. Where
constant folding gave a tied weight a transposed copy of its own (gpt2_tiny's LM head), the
module stays tied, as fp8run re-ties the copy (passes/retie.c): the copy is left out of the
manifest and the embedding's gradient is the sum of both uses, as in PyTorch.
"""
import os
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_fixtures  # noqa: E402

import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, "..", "tests", "fixtures"))
OUT = os.path.join(ROOT, "grads")


def build(name):
    if name in ("gpt2_tiny", "gpt2_tiny_op13"):
        return gen_fixtures.build_gpt2(1001)
    if name == "llama_tiny":
        return gen_fixtures.build_llama(2002, d=64, hidden=176)
    if name == "llama_tiny_op14":
        return gen_fixtures.build_llama(3003, d=40, hidden=104)
    if name == "bert_tiny":
        torch.manual_seed(4004)
        return gen_fixtures.init_weights(
            gen_fixtures.Bert(vocab=80, d=32, n_head=2, n_layer=2, inter=64, max_pos=16), 4004)
    raise ValueError(name)


def onnx_params(path):
    """[(initializer name, array, module param name, transposed)] for float initializers."""
    m = onnx.load(path)
    inits = [(t.name, numpy_helper.to_array(t)) for t in m.graph.initializer]
    matmul_of = {}
    for node in m.graph.node:
        if node.op_type == "MatMul":
            path_ = node.name.strip("/").rsplit("/", 1)[0].replace("/", ".")
            matmul_of[node.input[1]] = path_ + ".weight"
    inputs = [i.name for i in m.graph.input]
    out = []
    for name, a in inits:
        if a.dtype != np.float32 or a.ndim < 1:
            continue
        if name in matmul_of and name.startswith("onnx::"):
            out.append((name, a, matmul_of[name], True))
        else:
            out.append((name, a, name, False))
    return out, inputs


def all_params(model):
    """name -> Parameter, tied weights listed under every name (torch 1.13 has no
    named_parameters(remove_duplicate=False))."""
    out = {}
    for mod_name, mod in model.named_modules():
        for pn, p in mod._parameters.items():
            if p is not None:
                out[(mod_name + "." if mod_name else "") + pn] = p
    return out


def tied_copies(model, params):
    """ONNX initializers that stand for a Parameter another initializer already stands for
    (a tied weight that constant folding copied): fp8run re-ties them (passes/retie.c), so
    they are not trained on their own and have no gradient of their own."""
    named = all_params(model)
    seen, copies = set(), set()
    for pname, _, mod_name, _ in params:
        key = id(named[mod_name])
        if key in seen:
            copies.add(pname)
        seen.add(key)
    return copies


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.set_num_threads(1)
    for k, name in enumerate(["gpt2_tiny", "gpt2_tiny_op13", "llama_tiny", "llama_tiny_op14",
                              "bert_tiny"]):
        path = os.path.join(ROOT, name, "model.onnx")
        params, inputs = onnx_params(path)
        model = build(name)
        copies = tied_copies(model, params)
        named = all_params(model)
        for pname, a, mod_name, tr in params:  # the rebuilt module is the exported one
            w = named[mod_name].detach().numpy()
            assert np.array_equal(w.T if tr else w, a), (name, pname)
        model = model.double().eval()
        meta_dims = __import__("json").load(open(os.path.join(ROOT, name, "meta.json")))["dims"]
        B, T = meta_dims["batch"], meta_dims["seq"]
        vocab = named[params[0][2]].shape[0]
        g = torch.Generator().manual_seed(7000 + k)
        win = torch.randint(0, vocab, (B, T + 1), generator=g, dtype=torch.int64)
        x, y = win[:, :T], win[:, 1:]
        args = [x]
        for extra in inputs[1:]:
            if extra == "attention_mask":
                args.append(torch.ones(B, T, dtype=torch.int64))
            elif extra == "token_type_ids":
                args.append(torch.zeros(B, T, dtype=torch.int64))
            else:
                raise ValueError("%s: input %s" % (name, extra))
        model.zero_grad(set_to_none=True)
        logits = model(*args)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        named = all_params(model)
        d = os.path.join(OUT, name)
        os.makedirs(d, exist_ok=True)
        flat, lines = [], ["loss %.17g" % loss.item()]
        for pname, a, mod_name, tr in params:
            if pname in copies:
                continue
            gr = named[mod_name].grad
            gr = np.zeros(a.shape) if gr is None else gr.numpy()
            gr = gr.T if tr else gr
            assert gr.shape == a.shape, (pname, gr.shape, a.shape)
            flat.append(np.ascontiguousarray(gr).reshape(-1))
            lines.append("%s %d" % (pname, a.size))
        gen_fixtures.save_npy(os.path.join(d, "windows.npy"), win.numpy().astype("<i8"))
        gen_fixtures.save_npy(os.path.join(d, "grads.npy"), np.concatenate(flat).astype("<f4"))
        with open(os.path.join(d, "manifest.txt"), "w") as f:
            f.write("\n".join(lines) + "\n")
        print("%-16s loss %.6f, %d parameters" % (name, loss.item(), len(params)))
    with open(os.path.join(OUT, "SOURCE.txt"), "w") as f:
        f.write("Written by tools/gen_grad_reference.py with torch %s, onnx %s, numpy %s\n"
                % (torch.__version__, onnx.__version__, np.__version__))
    return 0


if __name__ == "__main__":
    sys.exit(main())
