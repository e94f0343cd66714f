#!/usr/bin/env python3
"""GPU time per step of the compiled PyTorch baseline, by kind of kernel, to set beside
`FP8RUN_PROFILE=2` (fp8run's time per op) when explaining where the two steps differ.

On the GPU machine (torch there; fp8run itself never imports this):
  python3 tools/torch_op_times.py --script .devpkg/torch_llama.py --preset 1b --precision fp8 \\
      [--steps 3] [--json F] [--trace F]

It builds the script's own model, optimizer and step (the baseline module is imported from
--script, not copied), compiles it, warms up, then records --steps steps with torch.profiler and
sums each CUDA kernel's duration from the trace. Kernels are put in kinds by name (rules below,
first match wins); the top kernels are listed with their kind so that a misplaced one shows.
"""
import argparse
import importlib.util
import json
import os
import re
import sys
import tempfile
import time
from collections import defaultdict

GEMM = ("gemm", "nvjet", "cutlass", "xmma", "splitkreduce", "matmul")
RULES = [  # (kind, words any of which in a GEMM-free kernel name puts it there)
    ("attention", ("flash", "fmha", "sdpa", "attention", "cudnn")),
    ("optimizer", ("adam", "multi_tensor")),
    ("fp8 casts, amax", ("amax", "abs_", "_abs", "float8", "fp8", "e4m3", "e5m2", "clamp")),
    ("norms", ("rsqrt", "rms_norm", "mean_mul_pow", "pow_rsqrt")),
    ("cross-entropy", ("log_softmax", "nll", "logsumexp", "cross_entropy", "_softmax")),
    ("SwiGLU", ("silu", "sigmoid")),
    ("RoPE", ("cos", "sin", "cat")),
    ("embedding", ("embedding", "index_select", "indexselect", "scatter", "index_put")),
    ("memset/copy", ("memset", "memcpy", "copy_kernel")),
]


def fp8_gemm(n):
    """cuBLASLt's nvjet kernels spell their types in letters after nvjet_[sm90_]: A, B, C, D, scale
    (t bf16, s float32, q e4m3, r e5m2: qqtst is an e4m3 forward, qrsss a weight gradient with an
    e5m2 dY and float32 out); other libraries name the formats."""
    m = re.search(r"nvjet_(?:sm\d+_)?([a-z]+)_", n)
    if m and len(m.group(1)) >= 2:
        return m.group(1)[0] in "qr" or m.group(1)[1] in "qr"
    return any(w in n for w in ("e4m3", "e5m2", "f8", "fp8"))


def kind_of(name):
    n = name.lower()
    if any(w in n for w in GEMM):
        return "GEMM fp8" if fp8_gemm(n) else "GEMM bf16"
    for kind, words in RULES:
        if any(w in n for w in words):
            return kind
    return "other"


def load(path):
    spec = importlib.util.spec_from_file_location("torch_baseline_under_profile", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--script", required=True, help="the baseline (torch_llama.py)")
    ap.add_argument("--preset", default="1b")
    ap.add_argument("--precision", choices=["bf16", "fp8"], default="fp8")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json")
    ap.add_argument("--trace", help="keep the chrome trace here")
    a = ap.parse_args()
    import torch

    mod = load(a.script)
    c = mod.PRESETS[a.preset]
    B, T = c["B"], c["T"]
    torch.manual_seed(0)
    m = mod.Llama(c["V"], c["d"], c["L"], c["nh"], c["nkv"], c["ff"], T, a.precision == "fp8").cuda()
    opt = torch.optim.AdamW(m.parameters(), lr=3e-4, fused=True)
    fwd = torch.compile(m)
    idx = torch.randint(0, c["V"], (B, T), device="cuda")
    tgt = torch.randint(0, c["V"], (B, T), device="cuda")

    def step():  # the baseline's own step (torch_llama.py main)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(idx, tgt)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(a.steps):
        step()
    e1.record()
    torch.cuda.synchronize()
    step_ms = e0.elapsed_time(e1) / a.steps  # unprofiled, as the baseline times itself
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
    trace = a.trace or os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(trace)
    with open(trace) as f:
        events = json.load(f)
    events = events.get("traceEvents", events) if isinstance(events, dict) else events
    per_kind, per_kernel, count = defaultdict(float), defaultdict(float), defaultdict(int)
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memset", "gpu_memcpy"):
            continue
        name = e.get("name", "?")
        ms = float(e.get("dur", 0)) / 1e3 / a.steps
        per_kind["memset/copy" if e["cat"] != "kernel" else kind_of(name)] += ms
        per_kernel[name] += ms
        count[name] += 1
    if not a.trace:
        os.remove(trace)
    total = sum(per_kind.values())
    if total <= 0:
        print("torch_op_times: the trace holds no CUDA kernels", file=sys.stderr)
        return 1
    dev = torch.cuda.get_device_name()
    print(f"{dev}, torch {torch.__version__}: {os.path.basename(a.script)} --preset {a.preset} "
          f"--precision {a.precision} --compile, B{B} x T{T}")
    print(f"step {step_ms:.2f} ms (unprofiled); kernel time {total:.2f} ms a step ({a.steps} profiled steps)")
    print(f"  {'kind':<20} {'ms/step':>9} {'share':>7}")
    for k, v in sorted(per_kind.items(), key=lambda kv: -kv[1]):
        print(f"  {k:<20} {v:9.3f} {100 * v / total:6.1f}%")
    print(f"top {a.top} kernels (ms a step, launches a step, kind):")
    top = sorted(per_kernel.items(), key=lambda kv: -kv[1])[:a.top]
    for name, v in top:
        print(f"  {v:8.3f} {count[name] / a.steps:6.1f}  {kind_of(name):<16} {name[:110]}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"device": dev, "torch": torch.__version__, "preset": a.preset, "precision": a.precision,
                       "batch": B, "seq": T, "step_ms": step_ms, "kernel_ms": total,
                       "kinds_ms": dict(per_kind),
                       "top": [{"name": n, "ms": v, "launches": count[n] / a.steps, "kind": kind_of(n)}
                               for n, v in top]}, f, indent=1)
    return 0


if __name__ == "__main__":
    t0 = time.time()
    rc = main()
    print(f"torch_op_times: {time.time() - t0:.0f} s", file=sys.stderr)
    sys.exit(rc)
