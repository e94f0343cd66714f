#!/usr/bin/env python3
"""fp8run's training step and the compiled PyTorch baseline's side by side, kind by kind.

    python3 tools/step_kinds.py PROFILE_LOG TORCH_OPS_JSON

PROFILE_LOG: the output of `fp8run bench ... FP8RUN_PROFILE=2` (`tools/gpu.sh profile`: its
"GPU time per run by op" table and "step time" line). TORCH_OPS_JSON: tools/torch_op_times.py's
--json of the same model and precision. Prints a markdown table, ms a step:

  FP8 GEMMs       fp8run: the "in GEMM" time of the fp8 Linear ops; PyTorch: GEMM fp8 kernels
  BF16 GEMMs      the bf16 Linear ops' and LinearCrossEntropy's GEMM time; GEMM bf16 kernels
  attention       the Attention* ops whole (cuDNN's kernels and the staging around them);
                  PyTorch's attention kernels (its RoPE is fused into other kernels)
  memory-bound    every other op time, and the Linears' non-GEMM time; PyTorch's norms,
                  SwiGLU, casts and amaxes, RoPE, cross-entropy, embedding, copies, other
  optimizer, rest fp8run: step time less op time; PyTorch: its optimizer kernels
  step            fp8run's step under the profiler; PyTorch's unprofiled step (its kinds add up
                  to its profiled kernel time, a few % more)

A JSON whose top kernels a later classifier puts elsewhere (torch_op_times.kind_of) has those
kernels' time moved to their kind, so older runs read with today's rules.
"""
import importlib.util
import json
import os
import re
import sys

MEMORY = ("fp8 casts, amax", "norms", "cross-entropy", "SwiGLU", "RoPE", "embedding", "memset/copy", "other")


def fp8run_kinds(text):
    rows, step, in_table = {}, None, False
    for line in text.splitlines():
        # only the by-op table: the slowest-nodes table below it repeats its ops node by node
        # ("AttentionQKVGrad: ~/name"), which would count them twice
        if line.startswith("GPU time per run by op"):
            in_table = True
        elif line.startswith("  all ops"):
            in_table = False
        m = re.match(r"\s+(\S+(?: \S+)?)\s+(\d+)\s+([\d.]+)\s+[\d.]+%\s+(\S+)", line)
        if in_table and m and not m.group(1).startswith("op") and not m.group(1).endswith(":"):
            gemm = float(m.group(4)) if m.group(4) != "-" else 0.0
            rows[m.group(1)] = (float(m.group(3)), gemm)
        m = re.match(r"step time\s+([\d.]+) ms", line)
        if m:
            step = float(m.group(1))
    if not rows or step is None:
        raise ValueError("no FP8RUN_PROFILE table or step time in the log")
    k = dict.fromkeys(("FP8 GEMMs", "BF16 GEMMs", "attention", "memory-bound"), 0.0)
    for op, (ms, gemm) in rows.items():
        if op.startswith("Attention"):
            k["attention"] += ms
            continue
        if gemm > 0:
            k["FP8 GEMMs" if op.endswith(" fp8") else "BF16 GEMMs"] += gemm
        k["memory-bound"] += ms - gemm
    total = sum(ms for ms, _ in rows.values())
    k["optimizer, rest"] = step - total
    k["step"] = step
    return k


def torch_kinds(d, kind_of):
    kinds = dict(d["kinds_ms"])
    for t in d.get("top", []):  # a kernel the classifier now puts elsewhere moves with its time
        now = kind_of(t["name"])
        if now != t["kind"]:
            kinds[t["kind"]] = kinds.get(t["kind"], 0.0) - t["ms"]
            kinds[now] = kinds.get(now, 0.0) + t["ms"]
    return {
        "FP8 GEMMs": kinds.get("GEMM fp8", 0.0),
        "BF16 GEMMs": kinds.get("GEMM bf16", 0.0),
        "attention": kinds.get("attention", 0.0),
        "memory-bound": sum(kinds.get(x, 0.0) for x in MEMORY),
        "optimizer, rest": kinds.get("optimizer", 0.0),
        "step": d["step_ms"],
    }


def main(argv):
    if len(argv) != 3:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    spec = importlib.util.spec_from_file_location("torch_op_times", os.path.join(os.path.dirname(__file__),
                                                                                 "torch_op_times.py"))
    tot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tot)
    with open(argv[1]) as f:
        ours = fp8run_kinds(f.read())
    with open(argv[2]) as f:
        theirs = torch_kinds(json.load(f), tot.kind_of)
    print("| kind | fp8run ms | PyTorch ms | fp8run - PyTorch |")
    print("| --- | --- | --- | --- |")
    for k in ours:
        print(f"| {k} | {ours[k]:.1f} | {theirs[k]:.1f} | {ours[k] - theirs[k]:+.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
