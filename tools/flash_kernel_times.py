#!/usr/bin/env python3
"""Kernel-alone TFLOP/s of the flash attention bench, from an ncu CSV.

On the device machine:
  FR_FLASH_BENCH=causal ncu --cache-control none --clock-control none \\
      -k regex:'_wg|_ws|_tc|cudnn_generated' --metrics gpu__time_duration.sum --csv \\
      build/test_gpu_flash > kernels.csv
  python3 tools/flash_kernel_times.py kernels.csv

FR_FLASH_BENCH=causal runs the bench's causal rows only (B8 H8 T2048, head dims 64, 128, 256,
fp8run's node then cuDNN's, 12 runs each). Prints, per head dim, the median time of each of
fp8run's kernels (forward: fwd_*, backward: dq_* + dkdv_*) and of cuDNN's fprop / bprop, as
TFLOP/s of the causal pairs (forward 4 x pairs x D per head, backward 2.5 x that). The node
figures of the bench itself include the float32 <-> bf16 conversions; these do not.
"""
import csv
import statistics
import sys

B, H, T = 8, 8, 2048
DIMS = [64, 128, 256]
RUNS = 12  # per node and head dim: the refusal check, a warm-up and 10 timed


def main(path):
    lines = [l for l in open(path) if l.startswith('"')]
    seq = sorted((int(r["ID"]), r["Kernel Name"], float(r["Metric Value"].replace(",", "")))
                 for r in csv.DictReader(lines) if r["Metric Name"] == "gpu__time_duration.sum")
    acc = {}
    for _, name, ns in seq:
        short = name.split("(")[0].replace("void ", "").replace("fr_attn::<unnamed>::", "")
        if "fprop" in short:
            short = "cudnn fprop"
        elif "bprop" in short:
            short = "cudnn bprop"
        elif not any(t in short for t in ("_wg<", "_ws<", "_tc<")):  # _ws: warp-specialized drafts
            continue
        acc.setdefault(short, []).append(ns / 1e3)
    us = {}
    for k, vals in acc.items():
        if k.startswith("cudnn"):  # one name for every head dim: in bench order
            for i, d in enumerate(DIMS):
                if vals[i * RUNS:(i + 1) * RUNS]:
                    us[(k, d)] = statistics.median(vals[i * RUNS:(i + 1) * RUNS])
        else:
            us[(k, int(k.split("<")[1].split(",")[0]))] = statistics.median(vals)
    pairs = T * (T + 1) / 2
    for d in DIMS:
        f = 4 * B * H * pairs * d
        fw = sum(v for (k, dd), v in us.items() if dd == d and k.startswith("fwd_"))
        bw = sum(v for (k, dd), v in us.items() if dd == d and k.startswith(("dq_", "dkdv_")))
        rate = lambda t, x: x / (t * 1e6) if t else float("nan")
        parts = ", ".join("%s %.1f us" % (k, v) for (k, dd), v in sorted(us.items()) if dd == d and not k.startswith("cudnn"))
        print("D %3d  fp8run fwd %6.1f  bwd %6.1f TFLOP/s | cuDNN fwd %6.1f  bwd %6.1f | %s" % (
            d, rate(fw, f), rate(bw, 2.5 * f), rate(us.get(("cudnn fprop", d), 0), f),
            rate(us.get(("cudnn bprop", d), 0), 2.5 * f), parts))


if __name__ == "__main__":
    main(sys.argv[1])
