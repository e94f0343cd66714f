"""Runs the shared compiled-PyTorch baseline (torch_hf.py) unchanged while other timed work
shares the machine: `torch_hf_locked.py LOCK SCRIPT ARGS...` runs SCRIPT as a program, except
that after its first optimizer step (torch.compile's warm-up) it takes LOCK (flock) and keeps it
until it exits. Its second warm-up step and its timed steps then never share the GPU with
another holder of LOCK (`tools/gpu.sh archtable` runs fp8run's benches under `flock LOCK`),
while its compilation overlaps them. `torch_hf_locked.py --wait JSON [DONE]`: stands in for the
baseline where another process runs it: returns once JSON exists, or fails once DONE (that
process's end) exists without it."""
import fcntl
import os
import runpy
import sys
import time


def wait_for(path, done=None):
    while not os.path.exists(path):
        if done and os.path.exists(done):
            sys.exit("%s: the baselines ended without it" % path)
        time.sleep(2)
    time.sleep(1)  # the writer's json.dump may still be flushing
    print(open(path).read())


def run_locked(lock_path, script, args):
    import torch

    lock = open(lock_path, "w")
    base = torch.optim.AdamW

    class AdamW(base):
        steps = 0

        def step(self, *a, **k):
            r = super().step(*a, **k)
            AdamW.steps += 1
            if AdamW.steps == 1:
                torch.cuda.synchronize()
                fcntl.flock(lock, fcntl.LOCK_EX)  # released when the process exits
            return r

    torch.optim.AdamW = AdamW
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    sys.argv = [script] + args
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--wait":
        wait_for(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
    elif len(sys.argv) > 2:
        run_locked(sys.argv[1], sys.argv[2], sys.argv[3:])
    else:
        sys.exit(__doc__)
