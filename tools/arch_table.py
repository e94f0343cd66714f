#!/usr/bin/env python3
"""bench/architectures.json rows from one `tools/gpu.sh archs` call's folder: for each ARCH,
torch_ARCH.json (../shared/baselines/torch_hf.py: the HF module compiled in bf16) and
fp8run_ARCH.json (`fp8run bench` of its export in fp8), with gen_llama1b.json (fp8run's
generated Llama 1B in the same call) as the MFU reference.

    python3 tools/arch_table.py DIR COMMIT > architectures.json

Each row: arch, fp8run_tokens_per_s, torch_bf16_compiled_tokens_per_s, speedup, fp8run_mfu,
mfu_vs_generated_llama (fp8run_mfu over the generated Llama 1B's), device, commit (the one
fp8run's JSON names, else COMMIT). A row whose
run failed says so in "error" (its figures null). Prints the table to stderr as well."""
import glob
import json
import os
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        return {"error": "%s: %s" % (os.path.basename(path), e)}


def main():
    d, commit = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "unknown"
    ref = load(os.path.join(d, "gen_llama1b.json"))
    ref_mfu = ref.get("mfu_bf16_peak")
    rows = []
    for tp in sorted(glob.glob(os.path.join(d, "torch_*.json"))):
        arch = os.path.basename(tp)[len("torch_"):-len(".json")]
        t, f = load(tp), load(os.path.join(d, "fp8run_%s.json" % arch))
        row = {"arch": arch, "fp8run_tokens_per_s": f.get("tokens_per_s"),
               "torch_bf16_compiled_tokens_per_s": t.get("tokens_per_s"), "fp8run_mfu": f.get("mfu_bf16_peak"),
               "device": f.get("device") or t.get("device"), "commit": f.get("commit") or commit}
        a, b = row["fp8run_tokens_per_s"], row["torch_bf16_compiled_tokens_per_s"]
        row["speedup"] = round(a / b, 3) if a and b else None
        row["mfu_vs_generated_llama"] = round(row["fp8run_mfu"] / ref_mfu, 3) if row["fp8run_mfu"] and ref_mfu else None
        errors = [x["error"] for x in (t, f) if "error" in x]
        if errors:
            row["error"] = "; ".join(errors)
        rows.append(row)
    json.dump(rows, sys.stdout, indent=1)
    print()
    print("%-22s %12s %12s %8s %8s %10s" % ("arch", "fp8run tok/s", "torch tok/s", "speedup", "MFU", "vs Llama"),
          file=sys.stderr)
    for r in rows:
        print("%-22s %12s %12s %8s %8s %10s" % (r["arch"], r["fp8run_tokens_per_s"], r["torch_bf16_compiled_tokens_per_s"],
                                                r["speedup"], r["fp8run_mfu"], r["mfu_vs_generated_llama"]), file=sys.stderr)
    return 0 if rows and not any("error" in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
