#!/usr/bin/env python3
# Checks `fp8run run` against real Hugging Face architectures that are not in the repo:
# GPT-2, Llama, Mistral, Qwen2, BERT, OPT, GPT-NeoX, randomly initialised from tiny configs
# (hidden sizes 40/72, not multiples of 16; GQA where the architecture has it), exported by
# torch.onnx at opsets 14 and 17 with attention masks that pad, compared with PyTorch's logits.
# Needs Debian's python3-torch and a venv with transformers (no network beyond PyPI):
#   /usr/bin/python3 -m venv --system-site-packages /tmp/hf && /tmp/hf/bin/pip install transformers==4.37.2
#   /tmp/hf/bin/python tools/check_hf_exports.py /tmp/hf/out build/fp8run
import os, subprocess, sys, numpy as np, torch
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM, BertConfig, BertForMaskedLM, OPTConfig, OPTForCausalLM,
                          GPTNeoXConfig, GPTNeoXForCausalLM)
OUT, FP8RUN = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
V = 211
models = {
 "gpt2": GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=72, n_layer=2, n_head=6, n_positions=64)),
 "llama": LlamaForCausalLM(LlamaConfig(vocab_size=V, hidden_size=72, intermediate_size=200, num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=64)),
 "mistral": MistralForCausalLM(MistralConfig(vocab_size=V, hidden_size=40, intermediate_size=120, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, sliding_window=64)),
 "qwen2": Qwen2ForCausalLM(Qwen2Config(vocab_size=V, hidden_size=72, intermediate_size=200, num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=3, max_position_embeddings=64)),
 "bert": BertForMaskedLM(BertConfig(vocab_size=V, hidden_size=40, intermediate_size=100, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64)),
 "opt": OPTForCausalLM(OPTConfig(vocab_size=V, hidden_size=40, ffn_dim=100, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64, word_embed_proj_dim=40)),
 "gptneox": GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=V, hidden_size=40, intermediate_size=100, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64)),
}
B, T = 2, 11
failures = 0
for name, m in models.items():
    m.eval(); m.config.use_cache = False
    if hasattr(m.config, "return_dict"): m.config.return_dict = False
    ids = torch.randint(0, V, (B, T))
    mask = torch.ones(B, T, dtype=torch.long); mask[1, 8:] = 0
    for opset in (14, 17):
        d = os.path.join(OUT, f"{name}_op{opset}"); os.makedirs(d, exist_ok=True)
        inputs = (ids, mask)
        class W(torch.nn.Module):
            def __init__(s, m): super().__init__(); s.m = m
            def forward(s, input_ids, attention_mask): return s.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, return_dict=False)[0] if name != "bert" else s.m(input_ids=input_ids, attention_mask=attention_mask, return_dict=False)[0]
        w = W(m).eval()
        try:
            with torch.no_grad(): ref = w(*inputs)
            torch.onnx.export(w, inputs, d + "/model.onnx", input_names=["input_ids", "attention_mask"], output_names=["logits"],
                              dynamic_axes={"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}, "logits": {0: "batch", 1: "seq"}},
                              opset_version=opset)
            np.save(d + "/input_ids.npy", ids.numpy()); np.save(d + "/attention_mask.npy", mask.numpy()); np.save(d + "/ref.npy", ref.numpy())
            run = subprocess.run([FP8RUN, "run", d + "/model.onnx", "--input", "input_ids=" + d + "/input_ids.npy",
                                  "--input", "attention_mask=" + d + "/attention_mask.npy", "--output-dir", d + "/run"],
                                 capture_output=True, text=True)
            if run.returncode:
                print(f"{name:8s} opset {opset}: FAIL {run.stderr.strip()}"); failures += 1; continue
            out = np.load(d + "/run/logits.npy")
            err = float(np.linalg.norm(out - ref.numpy()) / np.linalg.norm(ref.numpy()))
            ok = err < 1e-4
            failures += not ok
            print(f"{name:8s} opset {opset}: {list(out.shape)} relative L2 vs PyTorch {err:.2e} {'ok' if ok else 'FAIL'}")
        except Exception as e:
            print(name, opset, "EXPORT FAILED", str(e)[:200])
sys.exit(1 if failures else 0)
