#!/usr/bin/env python3
"""Check the fixtures that tools/gen_fixtures.py wrote against onnxruntime.

Run with a Python that has onnxruntime and numpy (torch is not needed):

    python3 tools/check_fixtures_ort.py [FIXTURES_DIR]

For every tests/fixtures/NAME/model.onnx it feeds input_<name>.npy to onnxruntime (CPU) and
prints the relative L2 error ||ort - torch|| / ||torch|| of every output_<name>.npy; each must
be below 1e-4. It also checks that meta.json agrees with the files, that the .npy files are v1
little-endian, and a few things about tests/fixtures/bad/: extdata_ok.onnx runs and gives the
stored result, the files meant to fail do not load or run in onnxruntime. Exits 1 on any failure.
"""
import json
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort

TOL = 1e-4
HERE = os.path.dirname(os.path.abspath(__file__))


def load_npy(path):
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version != (1, 0):
            raise ValueError("%s: .npy format version %s, want 1.0" % (path, version))
        f.seek(0)
        arr = np.lib.format.read_array(f, allow_pickle=False)
    if arr.dtype.byteorder == ">":
        raise ValueError("%s: big-endian" % path)
    return arr


def session(path, optimize=False):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 4  # the bad files fail on purpose; keep onnxruntime's log quiet
    so.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                   else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def rel_l2(got, want):
    got = got.astype(np.float64)
    want = want.astype(np.float64)
    den = np.linalg.norm(want)
    num = np.linalg.norm(got - want)
    return num / den if den > 0 else num


def check_model(d, name):
    ok = True
    files = sorted(os.listdir(d))
    meta = json.load(open(os.path.join(d, "meta.json")))
    feeds = {f[len("input_"):-4]: load_npy(os.path.join(d, f))
             for f in files if f.startswith("input_") and f.endswith(".npy")}
    wants = {f[len("output_"):-4]: load_npy(os.path.join(d, f))
             for f in files if f.startswith("output_") and f.endswith(".npy")}
    for kind, arrs in (("inputs", feeds), ("outputs", wants)):
        if set(meta[kind]) != set(arrs):
            print("  %s: meta.json %s %s vs files %s" % (name, kind, sorted(meta[kind]), sorted(arrs)))
            ok = False
        for k, a in arrs.items():
            m = meta[kind].get(k, {})
            if m.get("dtype") != str(a.dtype) or m.get("shape") != list(a.shape):
                print("  %s: meta.json %s %s says %s, the file holds %s %s"
                      % (name, kind, k, m, a.dtype, list(a.shape)))
                ok = False
    model = onnx.load(os.path.join(d, "model.onnx"))
    opset = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")][0]
    if opset != meta["opset"]:
        print("  %s: opset %d, meta.json says %d" % (name, opset, meta["opset"]))
        ok = False
    # node by node (no graph optimizations: closest to what fp8run executes), then optimized
    for optimize in (False, True):
        sess = session(os.path.join(d, "model.onnx"), optimize)
        in_names = [i.name for i in sess.get_inputs()]
        if sorted(in_names) != sorted(feeds):
            print("  %s: graph inputs %s, files %s" % (name, in_names, sorted(feeds)))
            return False
        out_names = [o.name for o in sess.get_outputs()]
        got = dict(zip(out_names, sess.run(None, feeds)))
        for k, want in wants.items():
            if k not in got:
                print("  %s: no graph output %s" % (name, k))
                ok = False
                continue
            g = got[k]
            if g.shape != want.shape or g.dtype != want.dtype:
                print("  %s: output %s is %s %s, expected %s %s"
                      % (name, k, g.dtype, g.shape, want.dtype, want.shape))
                ok = False
                continue
            e = rel_l2(g, want)
            ok = ok and e < TOL
            print("%-16s opset %-2d %-9s output %-7s %-9s rel L2 %.3e  max abs %.3e  %s"
                  % (name, opset, "optimized" if optimize else "plain", k,
                     "x".join(map(str, want.shape)), e,
                     float(np.max(np.abs(g.astype(np.float64) - want))), "ok" if e < TOL else "FAIL"))
    return ok


def expect_failure(what, fn):
    try:
        fn()
    except Exception as e:  # onnxruntime raises its own exception types
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        print("bad/%-28s fails in onnxruntime as intended: %s" % (what, msg[:110]))
        return True
    print("bad/%-28s UNEXPECTEDLY loaded/ran in onnxruntime" % what)
    return False


def check_bad(bad):
    ok = True
    # the valid external-data model: runs, and gives X @ W + B
    sess = session(os.path.join(bad, "extdata_ok.onnx"))
    x = load_npy(os.path.join(bad, "extdata_ok_input_X.npy"))
    y = sess.run(None, {"X": x})[0]
    e = rel_l2(y, load_npy(os.path.join(bad, "extdata_ok_output_Y.npy")))
    print("bad/%-28s rel L2 %.3e  %s" % ("extdata_ok.onnx", e, "ok" if e < 1e-6 else "FAIL"))
    ok = ok and e < 1e-6
    # gather_oob: loads; onnxruntime refuses the index 12 at run time
    idx = load_npy(os.path.join(bad, "gather_oob_input.npy"))
    s = session(os.path.join(bad, "gather_oob.onnx"))
    ok &= expect_failure("gather_oob.onnx (run)", lambda: s.run(None, {"idx": idx}))
    for f in ("truncated.onnx", "garbage.onnx", "raw_data_wrong_length.onnx", "cycle.onnx",
              "dangling_input.onnx", "extdata_dotdot.onnx", "extdata_absolute.onnx",
              "extdata_past_end.onnx", "shape_overflow.onnx", "unsupported_op.onnx"):
        p = os.path.join(bad, f)
        ok &= expect_failure(f, lambda p=p: session(p).run(
            None, {"X": np.ones([d if isinstance(d, int) else 3 for d in session(p).get_inputs()[0].shape],
                                np.float32)}))
    return ok


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "..", "tests", "fixtures")
    root = os.path.normpath(root)
    print("onnxruntime %s, onnx %s, numpy %s" % (ort.__version__, onnx.__version__, np.__version__))
    ok = True
    n = 0
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        if os.path.isfile(os.path.join(d, "model.onnx")):
            ok = check_model(d, name) and ok
            n += 1
    if n < 5:
        print("only %d fixture models found under %s" % (n, root))
        ok = False
    if os.path.isdir(os.path.join(root, "bad")):
        ok = check_bad(os.path.join(root, "bad")) and ok
    print("ALL OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
