"""tools/step_kinds.py on a profile written as `fp8run bench` with FP8RUN_PROFILE=2 writes it:
the by-op table is summed into kinds, the slowest-nodes table below it (the same ops again,
node by node) is not, GEMM time goes to its precision's kind and the rest to memory-bound, and
the step less the ops is "optimizer, rest". The rows' times are drawn afresh each run.
Standard library only.

usage: step_kinds_check.py TOOLS_DIR"""
import importlib.util
import json
import os
import random
import subprocess
import sys
import tempfile


def row(name, nodes, ms, gemm):
    g = f"{gemm:.3f}" if gemm is not None else "-"
    return f"  {name:<40} {nodes:>5} {ms:>9.3f}  10.0% {g:>9}     1.000    1.000     1.000  50.0%  memory"


def main():
    tools = sys.argv[1]
    r = random.Random()
    ops = {  # op: (nodes, ms, ms in GEMM or None)
        "Linear fp8": (63, r.uniform(15, 25), None),
        "LinearGradData bf16": (64, r.uniform(30, 40), None),
        "AttentionQKVGrad": (16, r.uniform(15, 25), None),
        "AttentionQKV": (16, r.uniform(4, 8), None),
        "AddRMSNormGrad": (32, r.uniform(4, 6), None),
    }
    ops["Linear fp8"] = (63, ops["Linear fp8"][1], ops["Linear fp8"][1] * r.uniform(0.7, 0.9))
    ops["LinearGradData bf16"] = (64, ops["LinearGradData bf16"][1], ops["LinearGradData bf16"][1] * r.uniform(0.8, 0.95))
    # as printed: ms to 3 decimals, the step to 2
    ops = {k: (n, round(ms, 3), None if g is None else round(g, 3)) for k, (n, ms, g) in ops.items()}
    total = sum(v[1] for v in ops.values())
    step = round(total + r.uniform(3, 9), 2)
    lines = ["bench: building ...", "GPU time per run by op (3 runs, %.2f ms per run)" % total,
             "  op                                       nodes        ms  share   in GEMM     TFLOP       GB   ceil ms  %ceil  bound"]
    lines += [row(k, *v) for k, v in ops.items()]
    lines.append(row("all ops", 191, total, None))
    # the slowest nodes: ops whose names take two words with the node's, which the by-op rows'
    # pattern also matches
    lines.append("the 40 slowest nodes (FP8RUN_PROFILE=2):")
    for i in range(16):
        lines.append(row(f"AttentionQKVGrad: ~/AttentionQKVGrad_{100 + i}", 1, ops["AttentionQKVGrad"][1] / 16, None))
        lines.append(row(f"AddRMSNormGrad: ~/AddRMSNormGrad_{200 + i}", 1, 0.16, None))
    lines.append(row("Linear fp8: ~/layers.1/MatMul_247)", 1, 1.05, 0.98))
    lines.append("step time        %.2f ms (3 steps queued back to back: wall time / 3)" % step)
    torch = {"kinds_ms": {"GEMM fp8": 60.0, "GEMM bf16": 9.0, "attention": 22.0, "norms": 4.0, "RoPE": 3.0,
                          "optimizer": 7.0}, "step_ms": 136.0, "top": []}
    with tempfile.TemporaryDirectory() as d:
        p, t = os.path.join(d, "profile.log"), os.path.join(d, "torch.json")
        with open(p, "w") as f:
            f.write("\n".join(lines) + "\n")
        with open(t, "w") as f:
            json.dump(torch, f)
        spec = importlib.util.spec_from_file_location("step_kinds", os.path.join(tools, "step_kinds.py"))
        sk = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sk)
        k = sk.fp8run_kinds("\n".join(lines))
        out = subprocess.run([sys.executable, os.path.join(tools, "step_kinds.py"), p, t], capture_output=True,
                             text=True, check=True).stdout
    want = {
        "FP8 GEMMs": ops["Linear fp8"][2],
        "BF16 GEMMs": ops["LinearGradData bf16"][2],
        "attention": ops["AttentionQKVGrad"][1] + ops["AttentionQKV"][1],
        "memory-bound": ops["AddRMSNormGrad"][1] + ops["Linear fp8"][1] - ops["Linear fp8"][2] +
        ops["LinearGradData bf16"][1] - ops["LinearGradData bf16"][2],
        "optimizer, rest": step - total,
        "step": step,
    }
    bad = [f"{name}: {k.get(name)} want {v}" for name, v in want.items() if abs(k.get(name, -1e9) - v) > 2e-3]
    if "| attention | %.1f | 22.0 |" % want["attention"] not in out:
        bad.append("the table's attention row: " + out)
    if bad:
        print("step_kinds_check: FAILED\n  " + "\n  ".join(bad))
        return 1
    print("step_kinds_check: kinds as the by-op table sums them (attention %.3f ms, rest %.3f ms)" %
          (want["attention"], want["optimizer, rest"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
