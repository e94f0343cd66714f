#!/usr/bin/env python3
"""bench/peers.json rows from one `tools/gpu.sh peers` call's folder: fp8run's `bench --json`
files of the generated Llama (*_llama{8b,1b,125m}_*_{bf16,fp8}.json), the shared PyTorch baseline
compiled (torch_llama_{SIZE}_{bf16,fp8}_compile.json, ../shared/baselines/torch_llama.py) and
torchao float8 on the same model (torchao.json, torchao_llama.py: a list of rows; without it, the
rows torchao.log holds, which the script prints as each run ends).

    python3 tools/peers_table.py DIR [COMMIT] > peers.json

Each row: system (fp8run-fp8, fp8run-bf16, torch-fp8-compiled, torch-bf16-compiled,
torchao-tensorwise, torchao-rowwise), model (8b, 1b, 125m), tokens_per_s, peak_gib (fp8run: the
device's peak seen, and fp8run_planned_gib its own allocation; PyTorch:
torch.cuda.max_memory_allocated), model_tflops (the same model FLOPs for every system of a
size: fp8run's flops_per_step over each one's step time), device and commit (fp8run's JSON's,
else COMMIT); an fp8run row whose bench timed the CUDA graph's capture (warmed up one step)
says so in "note". Only the sizes the folder holds files of get rows; a system whose file is missing
or failed is a row with "error". The table goes
to stderr with each system's ratio to the best PyTorch figure of its size."""
import glob
import json
import os
import re
import sys

from arch_table import load  # a JSON file, or {"error": ...} naming it

SIZES = ("8b", "1b", "125m")


def fp8run_file(d, size, prec):
    hits = sorted(glob.glob(os.path.join(d, "*_llama%s_*_%s.json" % (size, prec))))
    return load(hits[0]) if hits else {"error": "no fp8run %s %s bench file in %s" % (size, prec, d)}


def capture_timed(o):
    """A note when fp8run's bench timed the CUDA graph's capture: warmed up fewer than two steps
    (the first runs eagerly, the second captures) with the graph replayed; else None."""
    m = re.search(r"CUDA graph: \d+ of \d+ runs replayed \((\d+) captures", o.get("gemm") or "")
    if m and int(m.group(1)) > 0 and o.get("warmup", 2) < 2:
        return ("warmed up %d step: the timed steps include the CUDA graph's capture (a steady step is "
                "faster)" % o["warmup"])
    return None


def torchao_log_rows(path):
    """The rows torchao_llama.py printed as each run ended (one JSON object a line): what a run
    cut by its time limit measured before it wrote torchao.json."""
    rows = []
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("{"):
                    try:
                        r = json.loads(line)
                    except ValueError:
                        continue
                    if isinstance(r, dict) and "recipe" in r and "tokens_per_s" in r:
                        rows.append(r)
    except OSError:
        pass
    return rows


def main():
    d = sys.argv[1]
    commit = sys.argv[2] if len(sys.argv) > 2 else "unknown"
    ao = load(os.path.join(d, "torchao.json"))
    ao = ao if isinstance(ao, list) else [ao]
    if not any("recipe" in x for x in ao):
        ao += torchao_log_rows(os.path.join(d, "torchao.log"))
    rows = []
    # the sizes this folder measured (a call may hold one: all rows of a model come from one call)
    sizes = [z for z in SIZES if glob.glob(os.path.join(d, "*_llama%s_*.json" % z)) or
             glob.glob(os.path.join(d, "torch_llama_%s_*.json" % z)) or any(x.get("preset") == z for x in ao)]
    for size in sizes:
        ours = {p: fp8run_file(d, size, p) for p in ("fp8", "bf16")}
        flops = next((o["flops_per_step"] for o in ours.values() if "flops_per_step" in o), None)
        device = next((o["device"] for o in ours.values() if "device" in o), None)
        build = next((o["commit"] for o in ours.values() if "commit" in o), commit)

        def row(system, tps, step_ms, peak, err=None, dev=None, **extra):
            r = {"system": system, "model": size, "tokens_per_s": round(tps, 1) if tps else None,
                 "peak_gib": round(peak, 2) if peak is not None else None,
                 "model_tflops": round(flops / (step_ms / 1e3) / 1e12, 1) if flops and step_ms else None,
                 "device": dev or device, "commit": build}
            r.update(extra)
            if err:
                r["error"] = err
            rows.append(r)

        for p in ("fp8", "bf16"):
            o = ours[p]
            note = capture_timed(o)
            row("fp8run-" + p, o.get("tokens_per_s"), o.get("step_ms_median"),
                o["device_memory_used_bytes"] / 2**30 if o.get("device_memory_used_bytes") else None, o.get("error"),
                fp8run_planned_gib=round(o["memory_planned_bytes"] / 2**30, 2) if "memory_planned_bytes" in o else None,
                **({"note": note} if note else {}))
        for p in ("fp8", "bf16"):
            t = load(os.path.join(d, "torch_llama_%s_%s_compile.json" % (size, p)))
            row("torch-%s-compiled" % p, t.get("tokens_per_s"), t.get("step_ms"), t.get("peak_gib"), t.get("error"),
                t.get("device"))
        for recipe in ("tensorwise", "rowwise"):
            t = next((x for x in ao if x.get("preset") == size and x.get("recipe") == recipe), None)
            if t is None:
                t = next((x for x in ao if x.get("name") == "%s-%s" % (size, recipe)), None) or \
                    {"error": "no torchao %s %s row" % (size, recipe)}
            row("torchao-" + recipe, t.get("tokens_per_s"), t.get("step_ms"), t.get("peak_gib"), t.get("error"))
    json.dump(rows, sys.stdout, indent=1)
    print()
    print("%-20s %-5s %12s %9s %8s %22s" % ("system", "model", "tokens/s", "peak GiB", "TFLOP/s", "vs best PyTorch"),
          file=sys.stderr)
    for r in rows:
        best = max((x["tokens_per_s"] for x in rows if x["model"] == r["model"] and x["tokens_per_s"]
                    and not x["system"].startswith("fp8run")), default=None)
        ratio = "%.3f" % (r["tokens_per_s"] / best) if best and r["tokens_per_s"] else "-"
        print("%-20s %-5s %12s %9s %8s %22s%s" % (r["system"], r["model"], r["tokens_per_s"], r["peak_gib"],
                                                 r["model_tflops"], ratio, "  " + r["error"] if "error" in r else ""),
              file=sys.stderr)
    return 0 if rows and not any("error" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
