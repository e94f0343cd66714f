#!/usr/bin/env python3
"""Cross-check fp8run's FP8/BF16 conversions (graph/fp8_format.h, graph/tensor.c) against
ml_dtypes (float8_e4m3fn, float8_e5m2, bfloat16) on a few million random and edge-case floats.

Builds a small C helper in a temporary directory that converts a binary file of float32
values with fp8run's code, then compares byte for byte with numpy + ml_dtypes.

ml_dtypes does not saturate: an overflow becomes NaN (E4M3FN) or Inf (E5M2), and +-Inf
becomes NaN (E4M3FN). So fp8run's NON-saturating conversion is compared with it on every
input, and the saturating one on every input whose ml_dtypes result is finite; where ml_dtypes
overflows, fp8run's saturating result must be +-max. NaN inputs: fp8run (like CUDA) gives
0x7F whatever the sign; only "is a NaN" is compared there.

Usage: python3 tools/fp8_format_check.py [--n 4000000] [--seed S] [--cc cc]
Exit status 0 when everything agrees.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import ml_dtypes
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HELPER = r"""
#include <stdio.h>
#include <stdlib.h>
#include "graph/fp8_format.h"
/* in: n float32; out: n bytes each of e4m3 sat, e4m3 nosat, e5m2 sat, e5m2 nosat, then
 * n uint16 bf16, then the 256 + 256 decoded codes as float32. */
int main(int argc, char **argv)
{
    if (argc != 3) return 2;
    FILE *f = fopen(argv[1], "rb");
    if (!f) return 3;
    fseek(f, 0, SEEK_END);
    long n = ftell(f) / 4;
    fseek(f, 0, SEEK_SET);
    float *x = malloc((size_t)n * 4 + 1);
    uint8_t *q = malloc((size_t)n * 4 + 1);
    uint16_t *b = malloc((size_t)n * 2 + 1);
    if (!x || !q || !b || fread(x, 4, (size_t)n, f) != (size_t)n) return 4;
    fclose(f);
    for (long i = 0; i < n; i++) {
        q[i] = fr_f32_to_e4m3(x[i], 1);
        q[n + i] = fr_f32_to_e4m3(x[i], 0);
        q[2 * n + i] = fr_f32_to_e5m2(x[i], 1);
        q[3 * n + i] = fr_f32_to_e5m2(x[i], 0);
        b[i] = fr_f32_to_bf16(x[i]);
    }
    float dec[512];
    for (int c = 0; c < 256; c++) {
        dec[c] = fr_e4m3_to_f32((uint8_t)c);
        dec[256 + c] = fr_e5m2_to_f32((uint8_t)c);
    }
    FILE *o = fopen(argv[2], "wb");
    if (!o) return 5;
    if (fwrite(q, 1, (size_t)n * 4, o) != (size_t)n * 4 || fwrite(b, 2, (size_t)n, o) != (size_t)n ||
        fwrite(dec, 4, 512, o) != 512) return 6;
    return fclose(o) ? 7 : 0;
}
"""


def build_helper(tmp, cc):
    src = os.path.join(tmp, "fp8_helper.c")
    exe = os.path.join(tmp, "fp8_helper")
    with open(src, "w") as f:
        f.write(HELPER)
    cmd = [cc, "-std=c11", "-O2", "-Wall", "-Wextra", "-D_POSIX_C_SOURCE=200809L", "-I" + REPO,
           src, os.path.join(REPO, "graph", "tensor.c"), os.path.join(REPO, "graph", "status.c"),
           "-lm", "-o", exe]
    subprocess.run(cmd, check=True)
    return exe


def inputs(n, rng):
    """Random bit patterns (every exponent, Inf, NaN), log-uniform magnitudes across both
    formats' ranges, every fp8/bf16 midpoint and its float neighbours, and named edges."""
    parts = [rng.integers(0, 2**32, size=n // 2, dtype=np.uint64).astype(np.uint32).view(np.float32)]
    mags = 10.0 ** rng.uniform(-9, 6, size=n // 2)
    parts.append((mags * rng.choice([-1.0, 1.0], size=n // 2)).astype(np.float32))
    for dt in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2):
        v = np.arange(256, dtype=np.uint8).view(dt).astype(np.float64)
        v = np.unique(v[np.isfinite(v)])
        step = v[-1] - v[-2]
        v = np.append(v, v[-1] + step)          # the value past max: its midpoint is the overflow edge
        mids = ((v[:-1] + v[1:]) / 2).astype(np.float32)
        near = [mids, np.nextafter(mids, np.float32(np.inf)), np.nextafter(mids, np.float32(-np.inf)),
                v.astype(np.float32)]
        near = np.concatenate(near)
        parts += [near, -near]
    hb = np.arange(0x7F80, dtype=np.uint32)     # bf16 midpoints (every positive finite bf16)
    bm = ((hb << 16) | 0x8000).view(np.float32)
    parts += [bm, -bm, np.nextafter(bm, np.float32(np.inf)), np.nextafter(bm, np.float32(0))]
    edges = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 448, 464, 480, 57344, 61440,
                      65536, 3.4028235e38, 1e-45, -1e-45, 2**-10, 2**-17], dtype=np.float32)
    parts.append(edges)
    parts.append(np.array([0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7FC00000, 0xFFC00000],
                          dtype=np.uint32).view(np.float32))
    return np.concatenate(parts).astype(np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=4_000_000)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    rng = np.random.default_rng(seed)
    x = inputs(a.n, rng)
    n = x.size
    print(f"ml_dtypes {ml_dtypes.__version__}, numpy {np.__version__}, seed {seed}, {n} inputs")
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_helper(tmp, a.cc)
        fin, fout = os.path.join(tmp, "x.bin"), os.path.join(tmp, "q.bin")
        x.tofile(fin)
        subprocess.run([exe, fin, fout], check=True)
        raw = np.fromfile(fout, dtype=np.uint8)
    q = raw[:4 * n].reshape(4, n)
    bf = raw[4 * n:6 * n].view(np.uint16)
    dec = raw[6 * n:].view(np.float32)
    ok = True
    xnan = np.isnan(x)

    def report(name, bad, total):
        nonlocal ok
        ok &= bad == 0
        print(f"  {name:52s} {total - bad:>9d} / {total:<9d} {'OK' if bad == 0 else 'MISMATCH'}")

    formats = [("e4m3", ml_dtypes.float8_e4m3fn, 448.0, 0x7E, q[0], q[1], dec[:256]),
               ("e5m2", ml_dtypes.float8_e5m2, 57344.0, 0x7B, q[2], q[3], dec[256:])]
    with np.errstate(over="ignore", invalid="ignore"):
        for name, dt, fmax, maxcode, sat, nosat, mydec in formats:
            ml = x.astype(dt)
            mlb = ml.view(np.uint8)
            mlv = ml.astype(np.float32)
            mlnan = np.isnan(mlv)
            mynan = np.isnan(np.arange(256, dtype=np.uint8).view(dt).astype(np.float32))[nosat]
            # non-saturating: bit-exact except NaN results, which must both be NaN
            bad = int(np.sum(np.where(mlnan, ~mynan, nosat != mlb)))
            report(f"{name} nosat vs ml_dtypes (all inputs)", bad, n)
            bad = int(np.sum(nosat[xnan] != 0x7F)) + int(np.sum(sat[xnan] != 0x7F))
            report(f"{name} NaN input -> 0x7F (sat and nosat)", bad, 2 * int(xnan.sum()))
            fin_ml = np.isfinite(mlv)
            bad = int(np.sum(sat[fin_ml] != mlb[fin_ml]))
            report(f"{name} sat vs ml_dtypes where ml_dtypes is finite", bad, int(fin_ml.sum()))
            over = ~fin_ml & ~xnan      # ml_dtypes overflowed (or x = +-Inf)
            want = np.where(np.signbit(x[over]), 0x80 | maxcode, maxcode)
            bad = int(np.sum(sat[over] != want))
            report(f"{name} sat = +-{fmax:g} where ml_dtypes overflows / Inf", bad, int(over.sum()))
            codes = np.arange(256, dtype=np.uint8).view(dt).astype(np.float32)
            bad = int(np.sum(~((codes.view(np.uint32) == mydec.view(np.uint32)) |
                               (np.isnan(codes) & np.isnan(mydec)))))
            report(f"{name} decode of all 256 codes", bad, 256)
        mlb16 = x.astype(ml_dtypes.bfloat16)
        bad = int(np.sum(np.where(xnan, ~np.isnan(bf.view(ml_dtypes.bfloat16).astype(np.float32)),
                                  bf != mlb16.view(np.uint16))))
        report("bf16 vs ml_dtypes (NaN compared as NaN)", bad, n)
    print("ALL AGREE" if ok else "DISAGREEMENTS FOUND")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
