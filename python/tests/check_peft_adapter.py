"""fp8run's LoRA adapter export against peft (run where torch, transformers and peft are
installed, e.g. the GPU machine):

 1. fp8run trains rank-4 LoRA adapters (q_proj|v_proj, alpha 8) on the transformers Llama
    fixture's ONNX export (tests/fixtures/hf/llama_op18_static) for --steps steps, evaluates a
    batch (the adapter model's logits) and writes the adapter with export_adapter;
 2. transformers loads the same model's weights (tests/fixtures/hf/llama_safetensors: the same
    random init), peft applies the exported adapter (PeftModel.from_pretrained), and its
    logits for the same input ids are compared with fp8run's;
 3. peft's merge_and_unload() gives the same logits too (the merged model).

The adapters must have moved (the logits differ from the base model's), so the comparison is
not trivial. Tolerance (relative L2 of the logits): 1e-5 for fp32 training, 1e-2 for bf16/fp8
(fp8run's forward then runs those GEMMs in lower precision, peft's in float32).

    FP8RUN_LIBRARY=build/libfp8run.so python3 python/tests/check_peft_adapter.py \\
        [--backend cuda] [--precision fp8] [--steps 20]
Exit status 0 when every check passes."""
import argparse
import os
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))

import fp8run  # noqa: E402

FIXTURES = os.environ.get("FR_FIXTURES", os.path.join(REPO, "tests", "fixtures"))
MODEL = os.path.join(FIXTURES, "hf", "llama_op18_static", "model.onnx")
WEIGHTS = os.path.join(FIXTURES, "hf", "llama_safetensors")
B, T, VOCAB = 2, 11, 211  # the static export's input shape


def rel_l2(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def train_fp8run(args, out_dir):
    rng = np.random.default_rng(args.seed)
    model = fp8run.Model(MODEL)
    s = fp8run.Session(model, batch=B, seq=T, backend=args.backend, precision=args.precision, lr=args.lr,
                       seed=args.seed, lora_rank=args.rank, lora_alpha=args.alpha, lora_targets=args.targets)
    print("fp8run: %s on %s, %s; params %s" % (args.precision, s.device, args.targets, s.param_bytes()))
    for i in range(args.steps):
        loss = s.train_step(rng.integers(0, VOCAB, size=(B, T + 1), dtype=np.int64))
    print("fp8run: %d steps, last loss %.5f" % (args.steps, loss))
    windows = rng.integers(0, VOCAB, size=(B, T + 1), dtype=np.int64)
    s.eval(windows)
    logits = s.output()
    s.export_adapter(out_dir)
    return windows[:, :T], logits


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "fp8"])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--rank", type=int, default=4)
    ap.add_argument("--alpha", type=float, default=8.0)
    ap.add_argument("--targets", default="q_proj|v_proj")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--keep", help="write the adapter here (default: a temporary folder)")
    args = ap.parse_args()
    tol = 1e-5 if args.precision == "fp32" else 1e-2

    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    with tempfile.TemporaryDirectory() as tmp:
        out = args.keep or os.path.join(tmp, "adapter")
        ids, want = train_fp8run(args, out)
        torch.manual_seed(0)
        x = torch.from_numpy(ids)

        def load_base():
            return AutoModelForCausalLM.from_pretrained(WEIGHTS, torch_dtype=torch.float32,
                                                        attn_implementation="eager").eval()

        with torch.no_grad():
            base_logits = load_base()(input_ids=x).logits.numpy()
            peft_model = PeftModel.from_pretrained(load_base(), out).eval()
            n_lora = sum(1 for n, _ in peft_model.named_parameters() if "lora_" in n)
            got = peft_model(input_ids=x).logits.numpy()
            merged = peft_model.merge_and_unload()(input_ids=x).logits.numpy()

    checks = [
        ("peft found the adapters (%d lora tensors)" % n_lora, n_lora > 0),
        ("adapters moved the model: rel L2 vs base %.3g > 1e-3" % rel_l2(base_logits, want),
         rel_l2(base_logits, want) > 1e-3),
        ("peft adapter model vs fp8run: rel L2 %.3g <= %g" % (rel_l2(got, want), tol), rel_l2(got, want) <= tol),
        ("peft merged model vs fp8run: rel L2 %.3g <= %g" % (rel_l2(merged, want), tol),
         rel_l2(merged, want) <= tol),
    ]
    ok = True
    for what, good in checks:
        print("%s %s" % ("ok  " if good else "FAIL", what))
        ok = ok and good
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
