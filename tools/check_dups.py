#!/usr/bin/env python3
"""No block of six or more lines is written twice in the library (registered with
ctest as check_dups, label cpu). Reads graph/ ops/ passes/ runtime/ include/ (.c .h .cu .cuh
.def), folds each line (comments, blank lines, lone punctuation and #include lines dropped,
white space collapsed) and fails on any run of MIN folded lines that stands in two places,
naming both. Only identical runs count: code alike in shape but with other names is for review
(the `duplicates` tool), not for a gate.
A run may be kept on purpose: tools/check_dups.allow lists it by the key this script prints,
each with its reason.
  tools/check_dups.py [ROOT]    exit 0 when clean; else one line per repeated run"""
import hashlib
import pathlib
import re
import sys

MIN = 6
DIRS = ["graph", "ops", "passes", "runtime", "include"]
EXTS = {".c", ".h", ".cu", ".cuh", ".def"}
PUNCT = re.compile(r"^[{}()\[\];,]*(\\)?$")


def folded_lines(text):
    """(line number, folded text) for each line that counts."""
    out = []
    in_comment = False
    for no, line in enumerate(text.split("\n"), 1):
        s = ""
        i = 0
        while i < len(line):
            if in_comment:
                j = line.find("*/", i)
                if j < 0:
                    i = len(line)
                else:
                    in_comment = False
                    i = j + 2
                continue
            if line.startswith("/*", i):
                in_comment = True
                i += 2
                continue
            if line.startswith("//", i):
                break
            if line[i] == '"':  # a string literal: copied whole (it may hold "/*")
                j = i + 1
                while j < len(line) and line[j] != '"':
                    j += 2 if line[j] == "\\" else 1
                s += line[i:j + 1]
                i = j + 1
                continue
            s += line[i]
            i += 1
        s = " ".join(s.split())
        if not s or PUNCT.match(s) or s.startswith("#include"):
            continue
        out.append((no, s))
    return out


def key_of(run):
    return hashlib.sha1("\n".join(run).encode()).hexdigest()[:12]


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent)
    allow = set()
    allow_file = root / "tools" / "check_dups.allow"
    if allow_file.exists():
        for line in allow_file.read_text().split("\n"):
            line = line.split("#", 1)[0].strip()
            if line:
                allow.add(line.split()[0])
    seen = {}  # key -> (file, first line, last line)
    bad = []
    used = set()
    for d in DIRS:
        for p in sorted((root / d).rglob("*")):
            if p.suffix not in EXTS or not p.is_file():
                continue
            rel = str(p.relative_to(root))
            lines = folded_lines(p.read_text(errors="replace"))
            allowed_at = -2  # the last window of this file that an allowed run covered
            for i in range(len(lines) - MIN + 1):
                run = [t for _, t in lines[i:i + MIN]]
                k = key_of(run)
                where = (rel, lines[i][0], lines[i + MIN - 1][0])
                if k not in seen:
                    seen[k] = where + (i,)
                    continue
                f0, a0, b0, i0 = seen[k]
                if f0 == rel and i - i0 < MIN:
                    continue  # a run overlapping itself (a repeated line), not a copy
                if k in allow or allowed_at == i - 1:  # an allowed run and its continuation
                    if k in allow:
                        used.add(k)
                    allowed_at = i
                    continue
                # a longer repeated block is reported once: a run continuing the last report
                # extends it
                if bad and bad[-1][3] == rel and bad[-1][6] == i - 1 and bad[-1][0] == f0:
                    b = bad[-1]
                    bad[-1] = (f0, b[1], b0, rel, b[4], where[2], i, b[7])
                    continue
                bad.append((f0, a0, b0, rel, where[1], where[2], i, k))
    for f0, a0, b0, f1, a1, b1, _, k in bad:
        print(f"check_dups: {f1}:{a1}-{b1} repeats {f0}:{a0}-{b0} (key {k}): write it once, "
              f"or list the key in tools/check_dups.allow with the reason")
    stale = allow - used
    for k in sorted(stale):
        print(f"check_dups: tools/check_dups.allow lists {k}, which no longer repeats: remove it")
    if bad or stale:
        return 1
    print(f"check_dups: no run of {MIN} lines repeated in {', '.join(d + '/' for d in DIRS)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
