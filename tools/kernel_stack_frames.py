#!/usr/bin/env python3
"""Lists the CUDA kernels that use a stack frame (local memory), from ptxas's own report.

Why: a kernel that takes a reference to one of several parameter structs, or indexes a
parameter array with a run-time value, makes every thread copy those parameters to local
memory first; ptxas reports it as a stack frame without spills. That pattern once cost
AttentionQKV's RoPE staging half its speed (104 bytes a thread, more traffic than its data).
This runs here, without a GPU: each file is compiled for sm_90a with -Xptxas -v (about a
minute a large file on two cores).

  python3 tools/kernel_stack_frames.py [FILE.cu ...]   # default: ops/cuda/*.cu runtime/cuda/*.cu

Prints "bytes  file  kernel" for every kernel with a frame, largest first; exits 0 (a report,
not a check: some frames are legitimate, e.g. a kernel that runs once per node).
"""
import glob
import re
import subprocess
import sys


def frames(path, build_gen):
    cmd = ["nvcc", "-std=c++17", "-O3", "-gencode=arch=compute_90a,code=sm_90a", "-DFP8RUN_SM90A=1",
           "-DFP8RUN_HAVE_CUDA=1", "-I.", "-Iinclude", "-I" + build_gen, "-c", path, "-o", "/dev/null",
           "-Xptxas", "-v"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write("%s: nvcc failed\n%s" % (path, out.stderr[-2000:]))
        return []
    found, kernel = [], None
    for line in out.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            kernel = m.group(1)
            continue
        m = re.search(r"(\d+) bytes stack frame", line)
        if m and kernel:
            if int(m.group(1)) > 0:
                found.append((int(m.group(1)), path, demangle(kernel)))
            kernel = None
    return found


def demangle(name):
    try:
        return subprocess.run(["c++filt", name], capture_output=True, text=True).stdout.strip()[:160]
    except OSError:
        return name[:160]


def main(argv):
    files = argv or sorted(glob.glob("ops/cuda/*.cu") + glob.glob("runtime/cuda/*.cu"))
    gen = next(iter(glob.glob("build*/generated")), "build/generated")
    rows = []
    for f in files:
        rows += frames(f, gen)
    for b, f, k in sorted(rows, reverse=True):
        print("%5d  %s  %s" % (b, f, k))
    print("%d kernels with a stack frame in %d files" % (len(rows), len(files)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
