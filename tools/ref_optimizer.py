#!/usr/bin/python3
"""Write PyTorch reference results for tests/test_optimizer.c.

Runs torch.optim.AdamW / torch.optim.SGD (foreach=False: the single-tensor path, CPU) for a few
steps on fixed small tensors and saves inputs and results as tests/fixtures/optim/<case>.bin.
Run with the system Python that has torch:  /usr/bin/python3 tools/ref_optimizer.py

Parameters of rank >= 2 get the weight decay; rank 0/1 parameters go in a second param group with
weight_decay=0 (fp8run's FR_DECAY_AUTO), unless the case sets decay_1d (one group).

File layout (little-endian throughout):
  char[8]  "FROPTFX1"
  int32    kind (1 AdamW, 2 SGD), n_params, steps, nesterov, decay_1d, clip
  float64  weight_decay, beta1, beta2, eps, momentum, dampening, max_norm
  float64  lr[steps]
  per parameter: int32 rank, int64 dims[rank]
  float32  initial values of every parameter (in order)
  float32  gradients: for each step, every parameter
  float64  norms[steps] returned by clip_grad_norm_ (only when clip)
  float32  parameters after each step: for each step, every parameter
  float32  state after the last step: for each state slot (AdamW exp_avg then exp_avg_sq; SGD
           with momentum momentum_buffer), every parameter
"""
import os
import struct
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "tests", "fixtures", "optim")

# Shapes: a matrix big enough for the 8-wide vectorized kernels plus a tail, an odd small matrix,
# a bias, and a scalar gain.
SHAPES = [(23, 13), (5, 3), (29,), ()]
# Per-step gradient scale: with max_norm 3 the clip case clips steps 1, 3, 5 and not 2, 4.
GRAD_SCALE = [1.0, 0.05, 1.0, 0.1, 2.0]
LRS = [1e-3, 2e-3, 3e-3, 2.5e-3, 1e-3]

CASES = [
    dict(name="adamw_wd", kind=1, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8),
    dict(name="adamw_nowd", kind=1, weight_decay=0.0, betas=(0.9, 0.999), eps=1e-8),
    dict(name="adamw_decay1d", kind=1, weight_decay=0.05, betas=(0.8, 0.99), eps=1e-6, decay_1d=1),
    dict(name="adamw_clip", kind=1, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8, clip=1, max_norm=3.0),
    dict(name="sgd_plain", kind=2, weight_decay=0.0, momentum=0.0, lrs=[0.1, 0.05, 0.2, 0.1, 0.01]),
    dict(name="sgd_momentum_wd", kind=2, weight_decay=0.01, momentum=0.9, lrs=[0.1, 0.05, 0.2, 0.1, 0.01]),
    dict(name="sgd_nesterov", kind=2, weight_decay=0.001, momentum=0.9, nesterov=1, decay_1d=1,
         lrs=[0.1, 0.05, 0.2, 0.1, 0.01]),
    dict(name="sgd_dampening", kind=2, weight_decay=0.0, momentum=0.8, dampening=0.3,
         lrs=[0.1, 0.05, 0.2, 0.1, 0.01]),
]


def f32(t):
    return t.detach().numpy().astype("<f4").tobytes()


def run_case(c, seed):
    gen = torch.Generator().manual_seed(seed)
    steps = 5
    lrs = c.get("lrs", LRS)
    params = [torch.nn.Parameter(torch.randn(s, generator=gen)) for s in SHAPES]
    p0 = [p.detach().clone() for p in params]
    # Gradients of differing scales per parameter and step; a few exact zeros.
    grads = []
    for t in range(steps):
        gs = []
        for i, s in enumerate(SHAPES):
            g = torch.randn(s, generator=gen) * (0.5 * (i + 1) * GRAD_SCALE[t])
            if g.dim() == 2:
                g[0, :3] = 0.0
            gs.append(g)
        grads.append(gs)
    decay_1d = c.get("decay_1d", 0)
    wd = c["weight_decay"]
    if decay_1d:
        groups = [dict(params=params, weight_decay=wd)]
    else:
        groups = [dict(params=[p for p in params if p.dim() >= 2], weight_decay=wd),
                  dict(params=[p for p in params if p.dim() < 2], weight_decay=0.0)]
    if c["kind"] == 1:
        opt = torch.optim.AdamW(groups, lr=lrs[0], betas=c["betas"], eps=c["eps"], foreach=False)
    else:
        opt = torch.optim.SGD(groups, lr=lrs[0], momentum=c.get("momentum", 0.0),
                              dampening=c.get("dampening", 0.0), nesterov=bool(c.get("nesterov", 0)),
                              foreach=False)
    norms, after = [], []
    for t in range(steps):
        for p, g in zip(params, grads[t]):
            p.grad = g.clone()
        if c.get("clip"):
            norms.append(float(torch.nn.utils.clip_grad_norm_(params, c["max_norm"])))
        for grp in opt.param_groups:
            grp["lr"] = lrs[t]
        opt.step()
        after.append([p.detach().clone() for p in params])
    if c["kind"] == 1:
        slots = ["exp_avg", "exp_avg_sq"]
    else:
        slots = ["momentum_buffer"] if c.get("momentum", 0.0) != 0 else []

    b = bytearray(b"FROPTFX1")
    b += struct.pack("<6i", c["kind"], len(params), steps, c.get("nesterov", 0), decay_1d, c.get("clip", 0))
    betas = c.get("betas", (0.0, 0.0))
    b += struct.pack("<7d", wd, betas[0], betas[1], c.get("eps", 0.0), c.get("momentum", 0.0),
                     c.get("dampening", 0.0), c.get("max_norm", 0.0))
    b += struct.pack("<%dd" % steps, *lrs)
    for s in SHAPES:
        b += struct.pack("<i", len(s)) + struct.pack("<%dq" % len(s), *s)
    for p in p0:
        b += f32(p)
    for gs in grads:
        for g in gs:
            b += f32(g)
    if c.get("clip"):
        b += struct.pack("<%dd" % steps, *norms)
    for ps in after:
        for p in ps:
            b += f32(p)
    for slot in slots:
        for p in params:
            b += f32(opt.state[p][slot])
    return bytes(b)


def main():
    os.makedirs(OUT, exist_ok=True)
    for k, c in enumerate(CASES):
        path = os.path.join(OUT, c["name"] + ".bin")
        with open(path, "wb") as f:
            f.write(run_case(c, 1234 + k))
        print("wrote", os.path.relpath(path))
    cap = torch.__config__.show()
    cap = [l.strip() for l in cap.splitlines() if "CPU capability" in l]
    with open(os.path.join(OUT, "SOURCE.txt"), "w") as f:
        f.write("Written by tools/ref_optimizer.py with torch %s, numpy %s, Python %s\n"
                % (torch.__version__, np.__version__, sys.version.split()[0]))
        f.write("%s\n" % (cap[0] if cap else "CPU capability: unknown"))
        f.write("torch.optim.AdamW / torch.optim.SGD with foreach=False on CPU, float32.\n")


if __name__ == "__main__":
    main()
