#!/usr/bin/env python3
"""Where a kernel's warps wait, by stretches of SASS, from ncu's per-instruction samples.

On the device machine (one launch of one kernel, here the flash bench's first D 128 dK/dV):
  FR_FLASH_BENCH=causal ncu --section SourceCounters --section WarpStateStats \\
      -k regex:dkdv_wg --launch-skip 2 --launch-count 1 -o dkdv build/test_gpu_flash
  ncu --import dkdv.ncu-rep --page source --csv --print-source sass > dkdv_sass.csv
  python3 tools/ncu_sass_stalls.py dkdv_sass.csv [block]

Prints, for every block of `block` (default 100) consecutive SASS instructions that ran: its
share of the stall samples, the instructions it executed, the kinds of instruction that mark
it (HGMMA, MUFU.EX2, LDGSTS, TRYWAIT, ...: which part of the kernel it is) and its three main
stall reasons (percent of the block's samples). Then the single instructions with more than 1%
of the samples.
"""
import csv
import sys

MARKS = ("HGMMA", "UTMALDG", "TRYWAIT", "SYNCS.ARRIVE", "LDGSTS", "MUFU.EX2", "VOTE", "EXIT", "BAR.SYNC", "STG",
         "F2FP", "LDS", " LDG", "CALL")


def main(path, block):
    rows = list(csv.reader(open(path)))
    hdr, data = rows[1], rows[2:]
    i_src, i_smp, i_exe = hdr.index("Source"), hdr.index("Warp Stall Sampling (All Samples)"), hdr.index(
        "Instructions Executed")
    stall = [i for i, h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
    num = lambda r, i: int(r[i] or 0)
    total = sum(num(r, i_smp) for r in data) or 1
    print("samples %d, instructions executed %d" % (total, sum(num(r, i_exe) for r in data)))
    for b in range(0, len(data), block):
        seg = data[b:b + block]
        n, e = sum(num(r, i_smp) for r in seg), sum(num(r, i_exe) for r in seg)
        if n == 0 and e == 0:
            continue
        marks = sorted({m.strip() for r in seg for m in MARKS if m in r[i_src]})
        why = {}
        for r in seg:
            for i in stall:
                why[hdr[i][6:]] = why.get(hdr[i][6:], 0) + num(r, i)
        top = " ".join("%s:%d" % (k, v * 100 // max(n, 1)) for k, v in sorted(why.items(), key=lambda x: -x[1])[:3])
        print("%5d %6.2f%% exec %10d %-45s %s" % (b, 100.0 * n / total, e, " ".join(marks), top))
    print("instructions with more than 1% of the samples:")
    for k, r in enumerate(data):
        if num(r, i_smp) > total / 100:
            print("%5d %6.2f%% %s" % (k, 100.0 * num(r, i_smp) / total, r[i_src].strip()[:80]))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 100)
