"""from_torch end to end, for a machine with torch (run by hand; CI has no torch):

    PYTHONPATH=python FP8RUN_LIBRARY=build/libfp8run.so FP8RUN_CLI=build/fp8run \
        python3 python/tests/check_from_torch.py [--device cuda|cpu] [--precision fp8|bf16|fp32]
        [--tokenizer auto|hf|bytes] [--out DIR]

(or without the variables after `pip install .`). Needs torch (2.11 tested for), transformers
(5.x), onnxscript (torch.onnx's dynamo exporter) and numpy.

A tiny Hugging Face Llama with random weights is fine-tuned on text prepared by
`fp8run prepare --tokenizer tokenizer.json` (the CLI; a byte-level BPE of 512 tokens trained
here with `tokenizers`, offline) and fp8run.prepare (the same bytes), through fp8run.from_torch
and fp8run.train; --tokenizer bytes (or auto without `tokenizers`, saying so) uses fp8run's
byte tokenizer instead. The trained weights are loaded back into the module with
load_state_dict(strict=False) and checked:
  - the loss fell (last 10 steps' mean below 80% of the first step's),
  - every module parameter came back (no unexpected names; missing ones are only buffers), and
    changed,
  - the module's logits equal the exported trained model's on fp8run's CPU forward (float32,
    relative L2 < 1e-4),
  - the module's loss on held-out windows is within 5% of the session's own evaluation (in the
    training precision: FP8 GEMMs there),
  - where onnxruntime is installed, it loads the exported trained model (a dynamo export, the
    module's names) and reproduces fp8run's logits (max relative 1e-4).
Prints PASS or raises; files stay in --out (default a new temporary folder)."""
import argparse
import os
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F
from transformers import LlamaConfig, LlamaForCausalLM

import fp8run
import fp8run._cli

ap = argparse.ArgumentParser()
ap.add_argument("--device", default="auto")
ap.add_argument("--precision", default="fp8")
ap.add_argument("--steps", type=int, default=150)
ap.add_argument("--tokenizer", default="bytes", choices=["auto", "hf", "bytes"])
ap.add_argument("--out")
a = ap.parse_args()
B, T = 8, 64
d = a.out or tempfile.mkdtemp(prefix="fp8run_from_torch_")
os.makedirs(d, exist_ok=True)
text = os.path.join(d, "text.txt")
with open(text, "w") as f:
    rng = np.random.default_rng(0)
    words = "the quick brown fox jumps over a lazy dog while fp8 scales keep every amax in range".split()
    # ~1 token a word with the BPE (~5 with bytes): the 5% validation split holds the 20 batches
    # of 8 x 65 that fp8run.train's validation reads either way
    f.write(" ".join(rng.choice(words) for _ in range(250000)))

# text in: a tokenizer.json as Hugging Face writes them, or fp8run's bytes
tok, vocab = "bytes", 256
if a.tokenizer != "bytes":
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
    except ImportError:
        if a.tokenizer == "hf":
            raise
        print("tokenizer: bytes (the Python package 'tokenizers' is not installed)")
    else:
        bpe = Tokenizer(models.BPE())
        bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        bpe.decoder = decoders.ByteLevel()
        bpe.train([text], trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>"],
                                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        tok = os.path.join(d, "tokenizer.json")
        bpe.save(tok)
        vocab = bpe.get_vocab_size(with_added_tokens=True)
        print("tokenizer: byte-level BPE, %d tokens (%s)" % (vocab, tok))
# the CLI and the Python function write the same token files
tokens = os.path.join(d, "tokens.bin")
fp8run._cli.run(["prepare", "--tokenizer", tok, text, "-o", tokens, "--val-fraction", "0.05"])
r = fp8run.prepare([text], os.path.join(d, "py.bin"), tokenizer=tok, val_fraction=0.05)
assert open(r["files"][0], "rb").read() == open(tokens, "rb").read(), "CLI and Python prepare differ"
val = os.path.join(d, "tokens_val.bin")
print("prepared: %d train + %d validation tokens, eos %d" % (os.path.getsize(tokens) // 2, os.path.getsize(val) // 2,
                                                              r["eos"]))

# ---- the ten lines a user writes ----
torch.manual_seed(0)
module = LlamaForCausalLM(LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=T,
                                      tie_word_embeddings=False))
before = {k: v.clone() for k, v in module.state_dict().items()}
model = fp8run.from_torch(module, torch.randint(0, vocab, (B, T)))
sess = fp8run.train(model, tokens, steps=a.steps, batch=B, seq=T, lr=3e-3, warmup_steps=10, val=val, val_every=50,
                    log=os.path.join(d, "run.jsonl"), log_fp8=10, precision=a.precision, backend=a.device)
result = module.load_state_dict(sess.state_dict(module), strict=False)
# ------------------------------------

losses = [h["loss"] for h in sess.history if "loss" in h]
assert np.mean(losses[-10:]) < 0.8 * losses[0], "the loss did not fall: %s" % losses[::10]
assert not result.unexpected_keys, result.unexpected_keys
params = dict(module.named_parameters())
assert not [k for k in result.missing_keys if k in params], "parameters not returned: %s" % result.missing_keys
unchanged = [k for k, p in params.items() if torch.equal(p.detach(), before[k])]
assert not unchanged, "parameters that training did not change: %s" % unchanged

# logits: the loaded module against the exported trained model on fp8run's CPU forward
windows = fp8run.DataLoader(val, B, T, validation_batches=1).next()
ids = windows[:, :T]
exported = os.path.join(d, "trained.onnx")
sess.export(exported)
ours = fp8run.Model(exported).run({"input_ids": ids})["logits"]
module.eval()
with torch.no_grad():
    theirs = module(input_ids=torch.from_numpy(ids)).logits.float().numpy()
rel = np.linalg.norm(ours - theirs) / np.linalg.norm(theirs)
print("logits: relative L2 %.2e (fp8run CPU forward of the trained model vs the module)" % rel)
assert rel < 1e-4, rel

# the loss: the module's on held-out windows against the session's own evaluation
torch_loss = F.cross_entropy(torch.from_numpy(theirs).reshape(-1, vocab), torch.from_numpy(windows[:, 1:]).reshape(-1))
sess_loss = sess.eval(windows)
print("held-out loss: module %.4f, session (%s) %.4f" % (torch_loss.item(), a.precision, sess_loss))
assert abs(sess_loss - torch_loss.item()) < 0.05 * torch_loss.item()

# onnxruntime on the exported trained model, where installed
try:
    import onnxruntime as ort
except ImportError:
    print("onnxruntime: SKIP (not installed)")
else:
    y = ort.InferenceSession(exported, providers=["CPUExecutionProvider"]).run(None, {"input_ids": ids.astype(np.int64)})[0]
    e = float(np.abs(y - ours).max() / np.abs(ours).max())
    print("onnxruntime %s on the exported trained model: max rel %.1e against fp8run's logits" % (ort.__version__, e))
    assert e <= 1e-4, e
fp8run.plot(os.path.join(d, "run.jsonl"), os.path.join(d, "run.svg"))
print("PASS (files in %s)" % d)
