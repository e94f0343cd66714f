#!/usr/bin/env python3
"""Read `fp8run bench --json` files and `fp8run train --log` JSONL logs and compare them: the
checks tools/gpu.sh makes after its runs, kept out of shell. Each command prints its figures and
exits 1 when its criterion (if one is given) fails.

  compare_runs.py bench A.json B.json ... [--max-mem-ratio R]
      one line per bench (step, tokens/s, peak seen, planned, losses); with R: the last file's
      peak seen over the first's must be <= R
  compare_runs.py run RUN.json [REF.json] [--min-steps N] [--min-tflops F] [--within X]
      one bench as a training run: tokens/s, model TFLOP/s, peak seen; it fails when fewer than N
      steps ran (warmup and timed), any was skipped, it ran below F model TFLOP/s, or its last
      loss is not within X (relative) of REF's (a bench of the same model, tokens and steps)
  compare_runs.py same-loss A.json B.json
      two benches' first and last losses must be equal (repeatable runs)
  compare_runs.py losses A.jsonl B.jsonl [--from STEP] [--max-rel X]
      the largest relative loss difference over the steps both logs have
  compare_runs.py tps REF.jsonl OTHER.jsonl ... [--min-ratio R]
      tokens/s (per GPU) of each log, the median of its steps 3 on, against the first; with R:
      each other log's must be >= R times the first's
  compare_runs.py val --ref 'BF16_GLOB' --new 'FP8_GLOB' [--within X]
      the last validation loss, averaged over the logs of each glob (one per data order):
      the new mean must be within X (relative) of the reference's
"""
import argparse
import glob
import json
import statistics
import sys

GIB = 2**30


def jsonl(path):
    try:
        return [json.loads(line) for line in open(path) if line.strip()]
    except (OSError, ValueError) as e:
        print("%s: %s" % (path, e))
        return []


def step_losses(path):
    return {r["step"]: r["loss"] for r in jsonl(path) if "loss" in r and "step" in r and "val_loss" not in r}


def bench(a):
    rs = []
    for p in a.files:
        try:
            r = json.load(open(p))
        except (OSError, ValueError) as e:
            print("%s: no result (%s)" % (p, e))
            rs.append(None)
            continue
        rs.append(r)
        print("%s: %.2f ms, %.0f tok/s, %.2f GiB peak seen, %.2f GiB planned, loss %.6f -> %.6f" % (
            p.rsplit("/", 1)[-1], r["step_ms_median"], r["tokens_per_s"], r["device_memory_used_bytes"] / GIB,
            r["memory_planned_bytes"] / GIB, r["loss_first"], r["loss_last"]))
        for k in ("attention", "gemm"):
            if a.notes and r.get(k):
                print("    %s: %s" % (k, r[k][:150]))
    if a.max_mem_ratio is None:
        return all(rs)
    if not (rs and rs[0] and rs[-1] and rs[0]["device_memory_used_bytes"]):
        print("peak seen: no figures to compare")
        return False
    q = rs[-1]["device_memory_used_bytes"] / rs[0]["device_memory_used_bytes"]
    print("peak seen, last / first: %.3f (at most %.2f: %s); speed %.2fx" % (
        q, a.max_mem_ratio, "ok" if q <= a.max_mem_ratio else "FAIL", rs[-1]["tokens_per_s"] / rs[0]["tokens_per_s"]))
    return q <= a.max_mem_ratio


def run(a):
    try:
        r = json.load(open(a.run))
    except (OSError, ValueError) as e:
        print("run: no result (%s)" % e)
        return False
    n = r["warmup"] + r["steps"]
    ok = n >= a.min_steps and r["skipped"] == 0
    print("%s: %s, %s x %s x %s micro-batches, %d steps (%d skipped): %.0f tokens/s, %.1f model TFLOP/s, "
          "%.2f s per step, %.2f GiB peak seen (%.2f planned), loss %.4f -> %.4f" % (
              a.run.rsplit("/", 1)[-1], r["precision"], r["batch"], r["seq"], r.get("grad_accum", 1), n, r["skipped"],
              r["tokens_per_s"], r["model_tflops"], r["step_ms_median"] / 1e3, r["device_memory_used_bytes"] / GIB,
              r["memory_planned_bytes"] / GIB, r["loss_first"], r["loss_last"]))
    if n < a.min_steps:
        print("FAIL: %d steps, at least %d asked" % (n, a.min_steps))
    if r["skipped"]:
        print("FAIL: %d steps skipped" % r["skipped"])
    if a.min_tflops is not None:
        good = r["model_tflops"] >= a.min_tflops
        print("model TFLOP/s %.1f, target %.0f: %s" % (r["model_tflops"], a.min_tflops, "ok" if good else "FAIL"))
        ok = ok and good
    if a.ref:
        try:
            f = json.load(open(a.ref))
        except (OSError, ValueError) as e:
            print("reference: no result (%s)" % e)
            return False
        rel = (r["loss_last"] - f["loss_last"]) / f["loss_last"]
        good = f["skipped"] == 0 and (a.within is None or abs(rel) <= a.within)
        print("last loss %.4f against %.4f (%s, %d steps, %d skipped): %+.3f%%%s" % (
            r["loss_last"], f["loss_last"], f["precision"], f["warmup"] + f["steps"], f["skipped"], 100 * rel,
            "" if a.within is None else " (within %.1f%%: %s)" % (100 * a.within, "ok" if good else "FAIL")))
        ok = ok and good
    return ok


def same_loss(a):
    try:
        x, y = (json.load(open(p)) for p in (a.a, a.b))
    except (OSError, ValueError) as e:
        print("same-loss: %s" % e)
        return False
    lx, ly = (x["loss_first"], x["loss_last"]), (y["loss_first"], y["loss_last"])
    print("losses %r and %r: %s" % (lx, ly, "equal" if lx == ly else "DIFFER"))
    return lx == ly


def losses(a):
    x, y = step_losses(a.a), step_losses(a.b)
    ks = sorted(k for k in x if k in y and k >= a.start)
    if not ks:
        print("losses: no common steps")
        return False
    rel = {k: abs(x[k] - y[k]) / abs(y[k]) for k in ks}
    k = max(ks, key=rel.get)
    print("max relative loss difference %.3e over %d steps (%d equal; worst step %d: %.9g vs %.9g)" % (
        rel[k], len(ks), sum(x[j] == y[j] for j in ks), k, x[k], y[k]))
    return a.max_rel is None or rel[k] <= a.max_rel


def tps(a):
    ref = None
    ok = True
    for p in a.logs:
        v = [r["tokens_per_s"] for r in jsonl(p) if r.get("tokens_per_s")][2:]
        if not v:
            print("%s: no steps" % p)
            ok = False
            continue
        m = statistics.median(v)
        ref = ref or m
        print("%s: %.0f tokens/s per GPU (%.1f%% of the first)" % (p.rsplit("/", 1)[-1], m, 100 * m / ref))
        ok = ok and (a.min_ratio is None or m >= a.min_ratio * ref)
    return ok


def val(a):
    def last(pattern):
        out = []
        for p in sorted(glob.glob(pattern)):
            v = [r["val_loss"] for r in jsonl(p) if "val_loss" in r]
            if v:
                out.append(v[-1])
                print("%s: last validation loss %.4f" % (p.rsplit("/", 1)[-1], v[-1]))
        return out
    ref, new = last(a.ref), last(a.new)
    if not ref or len(ref) != len(new):
        print("val: %d reference and %d new logs with a validation" % (len(ref), len(new)))
        return False
    mr, mn = sum(ref) / len(ref), sum(new) / len(new)
    rel = (mn - mr) / mr
    ok = a.within is None or abs(rel) <= a.within
    print("mean last validation loss over %d runs: reference %.4f, new %.4f (%+.2f%%)%s" % (
        len(ref), mr, mn, 100 * rel, "" if a.within is None else ": " + ("PASS" if ok else "FAIL")))
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("bench")
    p.add_argument("files", nargs="+")
    p.add_argument("--max-mem-ratio", type=float)
    p.add_argument("--notes", action="store_true", help="also the attention and GEMM notes")
    p.set_defaults(fn=bench)
    p = sub.add_parser("run")
    p.add_argument("run")
    p.add_argument("ref", nargs="?")
    p.add_argument("--min-steps", type=int, default=1)
    p.add_argument("--min-tflops", type=float)
    p.add_argument("--within", type=float)
    p.set_defaults(fn=run)
    p = sub.add_parser("same-loss")
    p.add_argument("a")
    p.add_argument("b")
    p.set_defaults(fn=same_loss)
    p = sub.add_parser("losses")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--from", dest="start", type=int, default=1)
    p.add_argument("--max-rel", type=float)
    p.set_defaults(fn=losses)
    p = sub.add_parser("tps")
    p.add_argument("logs", nargs="+")
    p.add_argument("--min-ratio", type=float)
    p.set_defaults(fn=tps)
    p = sub.add_parser("val")
    p.add_argument("--ref", required=True)
    p.add_argument("--new", required=True)
    p.add_argument("--within", type=float)
    p.set_defaults(fn=val)
    a = ap.parse_args()
    sys.exit(0 if a.fn(a) else 1)


if __name__ == "__main__":
    main()
