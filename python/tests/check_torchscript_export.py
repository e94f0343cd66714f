"""docs/cli.md's TorchScript-exporter call on today's torch (run by hand or by
tools/gpu.sh user; CI has no torch):

    PYTHONPATH=python FP8RUN_LIBRARY=build/libfp8run.so python3 python/tests/check_torchscript_export.py

A tiny Hugging Face Llama (random init, GQA) exported with `torch.onnx.export(...,
dynamo=False, opset_version=17, dynamic_axes=...)` exactly as docs/cli.md "Exporting from PyTorch"
writes it, then on fp8run's CPU backend:
  - the forward at two shapes (the dynamic axes) matches the module's logits (relative L2 <= 1e-4);
  - 10 fp32 AdamW steps train with no skipped step and the loss falls;
  - how many parameters the stated rule trains (the file carries no exporter record) is printed.
Prints PASS or raises."""
import os
import sys
import tempfile
import warnings

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import fp8run

warnings.filterwarnings("ignore")
d = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="fp8run_ts_")
os.makedirs(d, exist_ok=True)
torch.manual_seed(0)
V, B, T = 160, 2, 24
model = LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                     tie_word_embeddings=False)).eval()
model.config.use_cache = False
ids = torch.randint(0, V, (B, T))
path = os.path.join(d, "model_ts.onnx")


class LogitsOnly(torch.nn.Module):
    """The causal LM's own children under their own names (so initializers keep the
    state_dict's names), returning the logits tensor alone: the tracer takes no ModelOutput."""

    def __init__(self, lm):
        super().__init__()
        self.model, self.lm_head = lm.model, lm.lm_head

    def forward(self, input_ids):
        return self.lm_head(self.model(input_ids).last_hidden_state)


# TS_VARIANT: which form to trace (transformers 5 dropped the tuple outputs the tracer needs
# from `config.return_dict = False`: LlamaForCausalLM reads .last_hidden_state of its model)
variant = os.environ.get("TS_VARIANT", "wrapper")
if variant == "tuple":
    model.config.return_dict = False
elif variant == "torchscript":
    model.config.torchscript = True
exported = LogitsOnly(model) if variant == "wrapper" else model
print("TorchScript export variant: %s" % variant)
# ---- docs/cli.md "Exporting from PyTorch", the TorchScript exporter ----
torch.onnx.export(exported, (ids,), path, dynamo=False, opset_version=17,
                  input_names=["input_ids"], output_names=["logits"],
                  dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}})
# ------------------------------------------------------------------
m = fp8run.Model(path)
print("TorchScript export (torch %s): %d parameters trained by the stated rule" % (torch.__version__,
                                                                               len(m.parameters)))
for b, t in ((B, T), (1, 9)):
    x = torch.randint(0, V, (b, t))
    with torch.no_grad():
        want = LogitsOnly(model)(x).float().numpy()
    got = m.run({"input_ids": x.numpy()})["logits"]
    rel = float(np.linalg.norm(got - want) / np.linalg.norm(want))
    print("logits %dx%d: relative L2 %.2e against the module" % (b, t, rel))
    assert rel <= 1e-4, rel

s = fp8run.Session(m, batch=B, seq=T, precision="fp32", lr=1e-3)
rng = np.random.default_rng(0)
windows = rng.integers(0, V, (B, T + 1)).astype(np.int64)
losses = [s.train_step(windows) for _ in range(10)]
print("10 fp32 steps on one batch: loss %.4f -> %.4f, %d skipped" % (losses[0], losses[-1], s.steps_skipped))
assert all(np.isfinite(losses)) and losses[-1] < losses[0], losses
assert s.steps_skipped == 0
print("PASS")
