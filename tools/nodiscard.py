#!/usr/bin/env python3
"""Put FR_NODISCARD (runtime/status.h) in front of every fr_status function declared in the
library's headers (graph/ passes/ ops/ runtime/, .h and .cuh). Idempotent; prints what it changed.
  tools/nodiscard.py [ROOT]          add the macro where it is missing
  tools/nodiscard.py --check [ROOT]  change nothing; exit 1 when a declaration lacks it"""
import re, sys, pathlib
check = "--check" in sys.argv
args = [a for a in sys.argv[1:] if a != "--check"]
root = pathlib.Path(args[0] if args else ".")
dirs = ["graph", "passes", "ops", "runtime"]
# a declaration whose return type is fr_status: optional template<...>, storage/inline words,
# then `fr_status name(` (the name and '(' are on the same line in this tree; parameters may
# continue on later lines, which does not matter for where the macro goes)
pat = re.compile(r"^(\s*(?:template\s*<[^>]*>\s*)?(?:(?:static|inline|extern|__host__|__device__)\s+)*)"
                 r"(fr_status\s+[A-Za-z_]\w*\s*\()")
n = 0
for d in dirs:
    for p in sorted((root / d).rglob("*")):
        if p.suffix not in (".h", ".cuh"):
            continue
        lines = p.read_text().split("\n")
        changed = False
        in_comment = False
        for i, l in enumerate(lines):
            s = l.strip()
            if in_comment:
                if "*/" in s: in_comment = False
                continue
            if s.startswith("/*") and "*/" not in s:
                in_comment = True
                continue
            if s.startswith(("*", "//", "#")) or "FR_NODISCARD" in l:
                continue
            m = pat.match(l)
            if not m:
                continue
            lines[i] = m.group(1) + "FR_NODISCARD " + l[m.end(1):]
            changed = True
            n += 1
            print(f"{p.relative_to(root)}:{i+1}: {lines[i].strip()[:100]}")
        if changed and not check:
            p.write_text("\n".join(lines))
print(n, "declarations" + (" lack FR_NODISCARD" if check else " marked"), file=sys.stderr)
sys.exit(1 if check and n else 0)
