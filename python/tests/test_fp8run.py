"""Tests of the Python binding (stdlib unittest; Debian's python3 + python3-numpy):
llama_tiny trained through Python gives exactly the losses the C API gives for the same
batches (tools/example_host.c, built as fp8run_example), parameters, checkpoints, export, the
data loader, and errors raised as fp8run.Error with the library's message.

    FP8RUN_LIBRARY=build/libfp8run.so FP8RUN_EXAMPLE=build/fp8run_example \\
        python3 python/tests/test_fp8run.py -v"""
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))

import fp8run  # noqa: E402

FIXTURES = os.environ.get("FR_FIXTURES", os.path.join(REPO, "tests", "fixtures"))
MODEL = os.path.join(FIXTURES, "llama_tiny", "model.onnx")
TOKENS = os.path.join(FIXTURES, "train", "tokens.bin")
B, T = 2, 8


def example_binary():
    env = os.environ.get("FP8RUN_EXAMPLE")
    if env:
        return env
    lib = fp8run.library_path()
    cand = os.path.join(os.path.dirname(lib), "fp8run_example") if os.sep in lib else None
    return cand if cand and os.path.exists(cand) else None


def windows_like_example(tokens, step, batch=B, seq=T):
    """tools/example_host.c's batches: window b of step s starts at ((s*B + b) * T) mod (n - T)."""
    n = len(tokens)
    rows = [tokens[((step * batch + b) * seq) % (n - seq):][:seq + 1] for b in range(batch)]
    return np.stack(rows).astype(np.int64)


class FP8RunTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tokens = np.fromfile(TOKENS, dtype=np.uint16)
        cls.tmp = tempfile.TemporaryDirectory(prefix="fp8run-py-")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def path(self, name):
        return os.path.join(self.tmp.name, name)

    def assertError(self, status, needle, fn, *args, **kw):
        with self.assertRaises(fp8run.Error) as cm:
            fn(*args, **kw)
        self.assertEqual(cm.exception.status, status, str(cm.exception))
        if needle:
            self.assertIn(needle, cm.exception.message)
        return cm.exception

    # ---- basics ----

    def test_version(self):
        self.assertEqual(fp8run.version().count("."), 2)
        self.assertEqual(fp8run.abi_version(), 1)

    def test_train_config_from_the_library_table(self):
        # TrainConfig is laid out from fp8run_train_config_option: every field the library
        # declares, at the offset it reports, and the defaults fp8run_train_config_init gives
        from fp8run import _lib
        names = [f for f, _ in _lib.TrainConfig._fields_]
        self.assertEqual(names[0], "struct_size")
        self.assertEqual(names[1:], [o["name"] for o in _lib.TRAIN_CONFIG_OPTIONS])
        self.assertEqual(names[-27:], ["fuse_attention", "fuse_swiglu", "recompute", "world_size", "rank",
                                       "local_rank", "nccl_comm", "shard_optimizer", "optimizer_state",
                                       "master_weights", "lora_rank", "lora_alpha", "lora_targets",
                                       "lora_dropout", "attention", "shard_gradients",
                                       "fuse_attention_io", "fp8_fast_accum", "fuse_rmsnorm",
                                       "narrow_activations", "deterministic",
                                       "fuse_residual_norm", "shard_parameters", "packing", "sft",
                                       "chunked_lm_head", "sft_max_examples"])  # appended after 0.1.0
        self.assertIs(dict(_lib.TrainConfig._fields_)["nccl_comm"], ctypes.c_void_p)  # an opaque pointer
        by_name = {o["name"]: o for o in _lib.TRAIN_CONFIG_OPTIONS}
        self.assertEqual(by_name["recipe"]["choices"], ["delayed", "current", "block"])
        self.assertEqual(by_name["fuse_swiglu"]["flag"], "--no-fuse-swiglu")
        self.assertEqual(by_name["recompute"]["choices"], ["none", "attention", "mlp", "full"])
        self.assertEqual(by_name["attention"]["choices"], ["fp8run", "cudnn", "auto"])
        c = fp8run._config(2, 8, {"recipe": "block", "fuse_swiglu": 0, "seed": 2 ** 64 - 1, "dims": {"x": 3}})
        self.assertEqual((c.batch, c.seq_len, c.recipe, c.fuse_swiglu), (2, 8, b"block", 0))
        self.assertEqual((c.seed, c.n_dims, c.dim_values[0]), (2 ** 64 - 1, 1, 3))
        self.assertEqual((c.pad_multiple, c.amax_history_len, c.fuse_attention), (16, 1024, 1))
        self.assertEqual((c.world_size, c.nccl_comm, c.shard_optimizer), (0, None, 0))
        with self.assertRaises(TypeError):
            fp8run._config(1, 1, {"no_such_option": 1})

    def test_model_inspect(self):
        with fp8run.Model(MODEL) as m:
            self.assertEqual(m.path, MODEL)
            self.assertEqual(m.inputs, [fp8run.TensorInfo("input_ids", "int64", ("batch", "seq"))])
            self.assertEqual(m.outputs[0].name, "logits")
            self.assertEqual(m.outputs[0].shape, ("batch", "seq", 128))
            self.assertEqual(m.param_count, 108864)
            self.assertEqual(len(m.parameters), 21)
            self.assertEqual(sum(int(np.prod(p.shape)) for p in m.parameters), 108864)
            w = m.get_param("embed_tokens.weight")
            self.assertEqual(w.shape, (128, 64))
            self.assertEqual(w.dtype, np.float32)
        with open(MODEL, "rb") as f:
            m2 = fp8run.Model(data=f.read(), name="llama from memory")
        self.assertIsNone(m2.path)
        self.assertEqual(len(m2.parameters), 21)

    # ---- training: Python == C ----

    def test_losses_equal_the_c_api(self):
        exe = example_binary()
        if not exe:
            self.skipTest("fp8run_example not found (set FP8RUN_EXAMPLE)")
        steps = 4
        out = subprocess.run([exe, MODEL, TOKENS, "-n", str(steps), "-b", str(B), "-t", str(T), "-l", "1e-3",
                              "-o", self.tmp.name], check=True, capture_output=True, text=True).stdout
        c_losses = [float(line.split()[3]) for line in out.splitlines() if line.startswith("step ")]
        self.assertEqual(len(c_losses), steps)
        m = fp8run.Model(MODEL)
        s = fp8run.Session(m, batch=B, seq=T, lr=1e-3)
        py_losses = [s.train_step(windows_like_example(self.tokens, i)) for i in range(steps)]
        self.assertEqual(py_losses, c_losses)  # bit for bit (%.17g round-trips a double)
        self.assertEqual(s.steps_done, steps)
        self.assertTrue(4.0 < py_losses[0] < 5.5)

    def test_int32_batches_and_micro_batches(self):
        m = fp8run.Model(MODEL)
        a = fp8run.Session(m, batch=B, seq=T, grad_accum=2, precision="bf16")
        b = fp8run.Session(m, batch=B, seq=T, grad_accum=2, precision="bf16")
        w = np.stack([windows_like_example(self.tokens, i) for i in range(2)])  # [2, B, T+1]
        la = a.train_step(w)
        lb = b.train_step(w.astype(np.int32))
        self.assertEqual(la, lb)
        self.assertEqual(a.last_stats.step, 0)
        self.assertFalse(a.last_stats.skipped)
        self.assertGreater(a.last_stats.grad_norm, 0)
        self.assertEqual(a.report.precision, "bf16")

    def test_async_steps_equal_sync(self):
        m = fp8run.Model(MODEL)
        a = fp8run.Session(m, batch=B, seq=T, lr=1e-3)
        b = fp8run.Session(m, batch=B, seq=T, lr=1e-3, fuse_attention=1, fuse_swiglu=1)
        ws = [windows_like_example(self.tokens, i) for i in range(3)]
        sync = [a.train_step(w) for w in ws]
        self.assertEqual([b.train_step_async(w) for w in ws], [0, 1, 2])
        self.assertEqual(b.steps_queued, 3)
        got = [b.poll_stats() for _ in ws]
        self.assertEqual([s.loss for s in got], sync)  # bit for bit
        self.assertEqual([s.step for s in got], [0, 1, 2])
        self.assertEqual(b.steps_queued, 0)
        self.assertIsNone(b.poll_stats(wait=False))
        with self.assertRaises(TypeError):
            fp8run.Session(m, batch=B, seq=T, fuse_everything=1)

    # ---- parameters, checkpoints, export ----

    def test_params_roundtrip(self):
        m = fp8run.Model(MODEL)
        s = fp8run.Session(m, batch=B, seq=T, precision="fp8")
        # a member of a fused Linear (q of q/k/v): its values live in a slice of the fused weight
        fused = [layer for layer in s.report.layers if layer.n_fused > 1]
        self.assertTrue(fused)
        name = fused[0].weights.split(",")[1]
        self.assertIn(name, [p.name for p in s.parameters])
        w0 = s.get_param(name)
        np.testing.assert_array_equal(w0, m.get_param(name))
        batch = windows_like_example(self.tokens, 0)
        l0 = s.eval(batch)
        s.set_param(name, w0 * 0.5)
        np.testing.assert_array_equal(s.get_param(name), w0 * 0.5)
        self.assertNotEqual(s.eval(batch), l0)
        s.set_param(name, w0)
        self.assertEqual(s.eval(batch), l0)
        logits = s.output()
        self.assertEqual(logits.shape, (B, T, 128))
        self.assertError(fp8run.ERR_INVALID_ARG, "nope", s.get_param, "nope")
        self.assertError(fp8run.ERR_SHAPE, name, s.set_param, name, np.zeros(3))

    def test_dynamo_export_module_names(self):
        # torch.onnx dynamo export: parameters under the module's names and layouts
        d = os.path.join(FIXTURES, "hf", "llama_op18_static")
        with open(os.path.join(d, "meta.json")) as f:
            meta = json.load(f)["parameters"]
        m = fp8run.Model(os.path.join(d, "model.onnx"))
        self.assertEqual(sorted(p.name for p in m.parameters), sorted(meta))
        for p in m.parameters:
            self.assertEqual(list(p.shape), meta[p.name])
        q = m.get_param("model.layers.0.self_attn.q_proj.weight")
        self.assertEqual(q.shape, (72, 72))
        s = fp8run.Session(m, batch=2, seq=11, precision="fp32")
        np.testing.assert_array_equal(s.get_param("model.layers.0.self_attn.q_proj.weight"), q)
        self.assertError(fp8run.ERR_INVALID_ARG, "val_93", m.get_param, "val_93")

    def test_checkpoint_resume_and_export(self):
        m = fp8run.Model(MODEL)
        kw = dict(batch=B, seq=T, lr=2e-3, lr_schedule="cosine", warmup_steps=1, total_steps=6, grad_clip=1.0)
        s = fp8run.Session(m, **kw)
        d = fp8run.DataLoader(TOKENS, B, T, seed=3, vocab_size=128)
        ck = self.path("resume.ckpt")
        straight = []
        for i in range(6):
            straight.append(s.train_step(d.next()))
            if i == 2:
                s.save(ck, data=d)
        final = s.get_param("embed_tokens.weight")

        info = fp8run.Checkpoint(ck)
        self.assertEqual(info.step, 3)
        self.assertEqual(info.model_path, MODEL)
        self.assertTrue(info.has_data_state)
        self.assertEqual(info.config["lr"]["schedule"], "cosine")
        self.assertEqual(len(info.parameters), 21)
        self.assertTrue(fp8run.is_checkpoint(ck))
        self.assertFalse(fp8run.is_checkpoint(MODEL))

        m2 = fp8run.Model(info.model_path)
        self.assertEqual(m2.apply_checkpoint(ck), 21)
        s2 = fp8run.Session(m2, **kw)
        d2 = fp8run.DataLoader(TOKENS, B, T, seed=3, vocab_size=128)
        s2.load(ck, data=d2)
        self.assertEqual(s2.steps_done, 3)
        resumed = [s2.train_step(d2.next()) for _ in range(3)]
        self.assertEqual(resumed, straight[3:])
        np.testing.assert_array_equal(s2.get_param("embed_tokens.weight"), final)

        out = self.path("trained.onnx")
        s2.export(out)
        e = fp8run.Model(out)
        np.testing.assert_array_equal(e.get_param("embed_tokens.weight"), final)

    def test_compile_report(self):
        m = fp8run.Model(MODEL)
        r = m.compile(batch=B, seq=T, precision="fp8", bf16_boundary=1)
        self.assertEqual(r.precision, "fp8")
        self.assertGreater(r.linears["fp8"], 0)
        self.assertGreater(r.linears["bf16"], 0)
        fused = [layer for layer in r.layers if layer.n_fused > 1]
        self.assertTrue(fused)
        self.assertIn("fp8", str(r))
        self.assertEqual(m.compile(batch=B, seq=T).layers, [])

    def test_data_loader(self):
        d = fp8run.DataLoader(TOKENS, B, T, order="sequential")
        self.assertEqual(d.num_tokens, len(self.tokens))
        st = d.state
        a = d.next(k=2)
        self.assertEqual(a.shape, (2, B, T + 1))
        np.testing.assert_array_equal(a[0, 0], self.tokens[:T + 1])
        d.state = st
        np.testing.assert_array_equal(d.next(dtype=np.int32), a[0])
        self.assertEqual(d.batches_done, 1)
        v = fp8run.DataLoader(TOKENS, B, T, validation_batches=3)
        self.assertEqual(v.batches_per_epoch, 3)

    def test_log_callback(self):
        seen = []
        fp8run.set_log_callback(lambda level, msg: seen.append((level, msg)), level="info")
        try:
            fp8run.Session(fp8run.Model(MODEL), batch=B, seq=T, backend="auto", eval_only=1)
        finally:
            fp8run.set_log_callback(None)
        self.assertTrue(any(level == "info" and "using cpu" in msg for level, msg in seen), seen)

    # ---- inspection, the forward pass, generated and compiled models ----

    def test_info_and_run(self):
        m = fp8run.Model(MODEL)
        info = m.info
        self.assertFalse(info["compiled"])
        self.assertIn("ai.onnx", info["opsets"])
        hist = m.op_histogram
        self.assertEqual(sum(c for _, c in hist), info["nodes"])
        self.assertEqual([c for _, c in hist], sorted((c for _, c in hist), reverse=True))
        self.assertIsNone(m.compiled_for)
        ids = windows_like_example(self.tokens, 0)
        out = m.run({"input_ids": ids[:, :T]})
        self.assertEqual(out["logits"].shape, (B, T, 128))
        s = fp8run.Session(m, batch=B, seq=T, eval_only=1)
        s.eval(ids)
        np.testing.assert_allclose(out["logits"], s.output(), rtol=0, atol=1e-5)
        self.assertEqual(s.device, "CPU")
        self.assertEqual(s.attention, "CPU kernels")  # which kernels ran (a GPU names cuDNN or fp8run's)
        self.assertTrue(s.gemm.startswith("CPU kernels"), s.gemm)
        self.assertError(fp8run.ERR_INVALID_ARG, "'tokens'", m.run, {"tokens": ids[:, :T]})

    def test_generate_and_compiled(self):
        g = fp8run.Model.generate_llama("tiny", layers=1, seed=5)
        self.assertEqual(g.outputs[0].name, "logits")
        self.assertEqual(g.info["producer"], "fp8run generate")
        self.assertError(fp8run.ERR_INVALID_ARG, "tiny, 125m, 1b", fp8run.Model.generate_llama, "huge")
        with self.assertRaises(TypeError):
            fp8run.Model.generate_llama(width=3)
        m = fp8run.Model(MODEL)
        fbs = self.path("llama.fbs")
        r = m.write_compiled(fbs, batch=B, seq=T, amax_history_len=16)
        self.assertGreater(r.linears["fp8"], 0)
        c = fp8run.Model(fbs)
        self.assertEqual(c.compiled_for, (B, T, "fp8"))
        self.assertEqual(c.param_count, 108864)
        self.assertEqual(len(c.recorded_report().layers), len(r.layers))
        s = fp8run.Session(c, batch=B, seq=T)
        self.assertTrue(all(st["amax"] is None for st in s.fp8_stats()))
        s.train_step(windows_like_example(self.tokens, 0))
        stats = s.fp8_stats()
        self.assertEqual(len(stats), 3 * sum(1 for layer in r.layers if layer.precision == "fp8"))
        self.assertTrue(all(st["amax"] > 0 and st["recipe"] == "delayed" for st in stats))
        c.export(self.path("original.onnx"))
        self.assertFalse(fp8run.Model(self.path("original.onnx")).info["compiled"])

    # ---- errors ----

    def test_errors(self):
        e = self.assertError(fp8run.ERR_IO, "/nonexistent/model.onnx", fp8run.Model, "/nonexistent/model.onnx")
        self.assertEqual(e.status_name, "i/o error")
        self.assertError(fp8run.ERR_PARSE, "garbage.onnx", fp8run.Model, os.path.join(FIXTURES, "bad", "garbage.onnx"))
        self.assertError(fp8run.ERR_PARSE, None, fp8run.Model, data=b"\xff\xff\xff")
        m = fp8run.Model(MODEL)
        self.assertError(fp8run.ERR_UNAVAILABLE, "'cuda'", fp8run.Session, m, batch=B, seq=T, backend="cuda")
        self.assertError(fp8run.ERR_INVALID_ARG, "'fp16'", fp8run.Session, m, batch=B, seq=T, precision="fp16")
        self.assertError(fp8run.ERR_INVALID_ARG, "batch (0)", fp8run.Session, m, batch=0, seq=T)
        with self.assertRaises(TypeError):
            fp8run.Session(m, batch=B, seq=T, learning_rate=1.0)
        s = fp8run.Session(m, batch=B, seq=T)
        self.assertError(fp8run.ERR_SHAPE, "got 17 token ids", s.train_step, np.zeros(17, dtype=np.int64))
        with self.assertRaises(TypeError):
            s.train_step(np.zeros((B, T + 1), dtype=np.float32))
        bad = windows_like_example(self.tokens, 0)
        bad[1, 3] = 128
        self.assertError(fp8run.ERR_RANGE, "token id 128", s.train_step, bad)
        self.assertEqual(s.steps_done, 0)  # nothing changed
        self.assertError(fp8run.ERR_PARSE, "not an fp8run checkpoint", s.load, MODEL)
        self.assertError(fp8run.ERR_IO, "/nonexistent.ckpt", s.load, "/nonexistent.ckpt")
        self.assertError(fp8run.ERR_STATE, "no evaluation", s.output)
        self.assertError(fp8run.ERR_IO, "/nonexistent.bin", fp8run.DataLoader, "/nonexistent.bin", B, T)
        self.assertError(fp8run.ERR_INVALID_ARG, "order", fp8run.DataLoader, TOKENS, B, T, order="shuffled")
        self.assertError(fp8run.ERR_IO, "/nonexistent.ckpt", fp8run.Checkpoint, "/nonexistent.ckpt")
        s.close()
        self.assertError(fp8run.ERR_STATE, "closed", s.train_step, bad)
        s.close()  # twice is fine


    def test_safetensors(self):
        """Hugging Face weights in and out; files parsed here with numpy alone."""
        import json
        import struct

        def parse(path):
            with open(path, "rb") as f:
                blob = f.read()
            n = struct.unpack("<Q", blob[:8])[0]
            header = json.loads(blob[8:8 + n])
            header.pop("__metadata__", None)
            raw = {k: blob[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]] for k, v in header.items()}
            return header, raw

        hf = os.path.join(FIXTURES, "hf")
        weights = os.path.join(hf, "llama_safetensors")
        header, raw = parse(os.path.join(weights, "model.safetensors"))
        st = fp8run.Safetensors(weights)
        self.assertEqual(sorted(t.name for t in st.tensors), sorted(header))
        emb = "model.embed_tokens.weight"
        np.testing.assert_array_equal(st.read(emb), np.frombuffer(raw[emb], "<f4").reshape(header[emb]["shape"]))
        raw0, shape0 = raw, header[emb]["shape"]
        m = fp8run.Model(os.path.join(hf, "llama_op18_static", "model.onnx"))
        s = fp8run.Session(m, batch=2, seq=11)
        win = (np.arange(2 * 12, dtype=np.int64).reshape(2, 12) * 37 + 11) % 211
        loss0 = s.eval(win)
        r = s.load_safetensors(st)
        self.assertIn(emb, r.matched)
        self.assertEqual(len(r.matched) + len(r.missing), len(s.parameters))
        self.assertEqual(len(r.matched) + len(r.unexpected), len(header))
        self.assertEqual(s.eval(win), loss0)  # the same random init
        st.close()
        # bf16 export: every parameter, rounded to nearest even
        out = self.path("hf_bf16")
        m.save_safetensors(out, dtype="bf16")
        header, raw = parse(os.path.join(out, "model.safetensors"))
        self.assertEqual(list(header), sorted(p.name for p in m.parameters))
        for p in m.parameters:
            self.assertEqual(header[p.name]["dtype"], "BF16")
            u = m.get_param(p.name).reshape(-1).view(np.uint32).astype(np.uint64)
            want = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
            np.testing.assert_array_equal(np.frombuffer(raw[p.name], "<u2"), want)
        # a training checkpoint's weights, sharded
        s.save(self.path("st.ckpt"))
        out = self.path("hf_ckpt")
        fp8run.checkpoint_to_safetensors(self.path("st.ckpt"), out, max_shard_bytes=200000)
        with open(os.path.join(out, "model.safetensors.index.json")) as f:
            index = json.load(f)["weight_map"]
        self.assertEqual(sorted(index), sorted(p.name for p in s.parameters))
        for p in s.parameters:
            header, raw = parse(os.path.join(out, index[p.name]))
            np.testing.assert_array_equal(np.frombuffer(raw[p.name], "<f4").reshape(p.shape), s.get_param(p.name))
        # NaN/Inf in a loaded tensor: counted in the report; strict_weights refuses, loads nothing
        bad_emb = np.frombuffer(raw0[emb], "<f4").copy()
        bad_emb[[3, 50, 51]] = np.nan
        bad_emb[7] = -np.inf
        hdr = json.dumps({emb: {"dtype": "F32", "shape": shape0, "data_offsets": [0, bad_emb.nbytes]}}).encode()
        bad_path = self.path("nan.safetensors")
        with open(bad_path, "wb") as f:
            f.write(struct.pack("<Q", len(hdr)) + hdr + bad_emb.tobytes())
        before = s.get_param(emb)
        self.assertError(fp8run.ERR_NUMERIC, "NaN/Inf", s.load_safetensors, bad_path, strict_weights=True)
        np.testing.assert_array_equal(s.get_param(emb), before)
        r = s.load_safetensors(bad_path)
        self.assertEqual(r.nonfinite, {emb: 4})
        self.assertEqual(r.matched, [emb])
        self.assertEqual(np.isnan(s.get_param(emb)).sum(), 3)
        self.assertEqual(s.load_safetensors(weights).nonfinite, {})
        # the model's own parameters: counted at load
        self.assertEqual(m.nonfinite, {})
        m.set_param(emb, bad_emb.reshape(shape0))
        m.save(self.path("nan.onnx"))
        self.assertEqual(fp8run.Model(self.path("nan.onnx")).nonfinite, {emb: 4})
        self.assertError(fp8run.ERR_IO, "/nonexistent", fp8run.Safetensors, "/nonexistent")
        self.assertError(fp8run.ERR_INVALID_ARG, "'int8'", m.save_safetensors, out, dtype="int8")

if __name__ == "__main__":
    unittest.main()
