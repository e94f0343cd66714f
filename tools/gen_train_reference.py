#!/usr/bin/python3
"""Write the training fixtures for tests/test_trainer.c and tests/test_train_cli.c.

Run with the system Python that has torch 1.13 and onnx 1.12:

    /usr/bin/python3 tools/gen_train_reference.py

It writes tests/fixtures/train/:
    tokens.bin      raw little-endian uint16 token ids (< 128, the llama_tiny vocabulary), drawn
                    from a small fixed Markov chain so that a model can learn something
    val.bin         the same kind of tokens from another seed (validation)
    llama_tiny_adamw_losses.txt
                    the loss of each of the first STEPS training steps of PyTorch training
                    tests/fixtures/llama_tiny/model.onnx's module (rebuilt by tools/gen_fixtures.py
                    with the fixture's seed), one "%.9e" per line after '#' comment lines
    SOURCE.txt      versions and settings

The training run: sequential (B, T+1) windows of tokens.bin as fp8run's sequential data loader
takes them (batch k, window b starts at k*B*T + b*T; inputs are the first T, labels the last T),
mean cross-entropy over the B*T positions, torch.optim.AdamW(lr 1e-3, betas (0.9, 0.95),
eps 1e-8, weight_decay 0.1 on parameters of rank >= 2 and 0 on the others: fp8run's default),
foreach=False, torch.nn.utils.clip_grad_norm_(max_norm 1.0) before each step.

Before training, the rebuilt module's weights are checked against the ONNX fixture's initializers
(the exporter stores Linear weights transposed as onnx::MatMul_N initializers; they are matched
through the MatMul node that reads them), so the reference starts from the very same weights.
"""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen_fixtures  # noqa: E402  (the fixture models; imported, never edited here)

import onnx  # noqa: E402
from onnx import numpy_helper  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, "..", "tests", "fixtures"))
OUT = os.path.join(ROOT, "train")

VOCAB = 128
B, T = 2, 13  # the llama_tiny fixture's batch x seq
STEPS = 20
LR, BETAS, EPS, WD, CLIP = 1e-3, (0.9, 0.95), 1e-8, 0.1, 1.0
N_TRAIN, N_VAL = 2048, 512


def markov_tokens(seed, n):
    """Tokens from a sparse random Markov chain: each token has 4 likely successors."""
    rs = np.random.RandomState(seed)
    succ = rs.randint(0, VOCAB, size=(VOCAB, 4))
    probs = np.array([0.55, 0.25, 0.12, 0.08])
    out = np.empty(n, dtype=np.int64)
    cur = rs.randint(0, VOCAB)
    for i in range(n):
        out[i] = cur
        if rs.rand() < 0.05:  # a little noise: any token
            cur = rs.randint(0, VOCAB)
        else:
            cur = succ[cur, rs.choice(4, p=probs)]
    assert out.max() < VOCAB and out.min() >= 0
    return out


def write_tokens(path, toks):
    with open(path, "wb") as f:
        f.write(toks.astype("<u2").tobytes())


def check_weights(model, onnx_path):
    """Every module parameter equals its ONNX initializer (transposed for MatMul weights)."""
    m = onnx.load(onnx_path)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    # onnx::MatMul_N -> module path, from the MatMul node that reads it ("/layers.0/mlp/up_proj/MatMul")
    matmul_of = {}
    for node in m.graph.node:
        if node.op_type == "MatMul" and node.input[1] in inits:
            path = node.name.strip("/").rsplit("/", 1)[0].replace("/", ".")
            matmul_of[path + ".weight"] = node.input[1]
    params = dict(model.named_parameters())
    checked = 0
    for name, p in params.items():
        w = p.detach().numpy()
        if name in inits:
            onnx_w = inits[name]
        elif name in matmul_of:
            onnx_w = inits[matmul_of[name]].T  # exported as x @ W^T with W^T stored
        else:
            raise AssertionError("parameter %s has no ONNX initializer" % name)
        assert onnx_w.shape == w.shape, (name, onnx_w.shape, w.shape)
        assert np.array_equal(onnx_w, w), "weights differ: %s" % name
        checked += 1
    n_float_inits = sum(1 for a in inits.values() if a.dtype == np.float32 and a.ndim >= 1)
    # every float initializer of rank >= 1 is a parameter (no buffers survive folding here)
    assert checked == len(params) == n_float_inits, (checked, len(params), n_float_inits)
    return checked


def sequential_windows(toks, step):
    """fp8run's sequential loader: batch `step`, windows at p + b*T, wrapping at the end."""
    per_epoch = (len(toks) - 1) // (B * T)
    p = (step % per_epoch) * B * T
    rows = [toks[p + b * T: p + b * T + T + 1] for b in range(B)]
    return torch.tensor(np.stack(rows), dtype=torch.int64)


def train(model, toks):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=LR, betas=BETAS, eps=EPS, foreach=False)
    model.train()
    losses, norms = [], []
    for step in range(STEPS):
        w = sequential_windows(toks, step)
        x, y = w[:, :T], w[:, 1:]
        opt.zero_grad(set_to_none=True)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        losses.append(float(loss.item()))
        norms.append(float(norm.item()))
    return losses, norms


def main():
    os.makedirs(OUT, exist_ok=True)
    train_toks = markov_tokens(5150, N_TRAIN)
    val_toks = markov_tokens(5151, N_VAL)
    write_tokens(os.path.join(OUT, "tokens.bin"), train_toks)
    write_tokens(os.path.join(OUT, "val.bin"), val_toks)

    model = gen_fixtures.build_llama(2002, d=64, hidden=176)  # as gen_fixtures' llama_tiny
    n = check_weights(model, os.path.join(ROOT, "llama_tiny", "model.onnx"))
    losses, norms = train(model, train_toks)
    with open(os.path.join(OUT, "llama_tiny_adamw_losses.txt"), "w") as f:
        f.write("# tools/gen_train_reference.py: PyTorch losses of steps 1..%d of llama_tiny\n" % STEPS)
        f.write("# B=%d T=%d sequential tokens.bin, AdamW lr=%g betas=%s eps=%g wd=%g (rank>=2), clip %g\n"
                % (B, T, LR, BETAS, EPS, WD, CLIP))
        for l in losses:
            f.write("%.9e\n" % l)
    with open(os.path.join(OUT, "SOURCE.txt"), "w") as f:
        f.write("Written by tools/gen_train_reference.py with torch %s, onnx %s, numpy %s, Python %s\n"
                % (torch.__version__, onnx.__version__, np.__version__, sys.version.split()[0]))
        f.write("tokens.bin: %d uint16 tokens (seed 5150), val.bin: %d (seed 5151), vocab %d\n"
                % (N_TRAIN, N_VAL, VOCAB))
        f.write("llama_tiny rebuilt with gen_fixtures.build_llama(2002, d=64, hidden=176); "
                "%d parameters checked equal to the ONNX initializers\n" % n)
        f.write("grad norms before clipping: %s\n" % " ".join("%.4f" % x for x in norms))
    print("losses:", " ".join("%.4f" % l for l in losses))
    print("grad norms:", " ".join("%.3f" % x for x in norms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
