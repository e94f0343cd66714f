"""fp8run.train (the CLI's loop and log records), fp8run.plot (the CLI's charts), Progress (in
place on a tty, lines elsewhere, off), log_to_python (the library's messages in `logging`), and
from_torch/state_dict failing clearly without torch. Needs the library (FP8RUN_LIBRARY), the
CLI (FP8RUN_CLI) and FR_FIXTURES."""
import io
import json
import logging
import os
import random
import tempfile
import unittest
import xml.etree.ElementTree as ET

import fp8run

FIX = os.environ.get("FR_FIXTURES", os.path.join(os.path.dirname(__file__), "..", "..", "tests", "fixtures"))
MODEL = os.path.join(FIX, "llama_tiny", "model.onnx")
TOKENS = os.path.join(FIX, "train", "tokens.bin")


class TestTrainPlot(unittest.TestCase):
    def test_train_log_plot(self):
        with tempfile.TemporaryDirectory() as d:
            log = os.path.join(d, "run.jsonl")
            lr = random.choice([1e-3, 2e-3, 3e-3])
            s = fp8run.train(MODEL, TOKENS, steps=6, batch=2, seq=16, lr=lr, val=TOKENS, val_every=3, val_batches=2,
                             log=log, log_fp8=2, precision="fp8", backend="cpu", progress=False,
                             save=os.path.join(d, "c.ckpt"))
            with open(log) as f:
                recs = [json.loads(line) for line in f]
            steps = [r for r in recs if "loss" in r]
            self.assertEqual([r["step"] for r in steps], [1, 2, 3, 4, 5, 6])
            self.assertEqual(set(steps[0]), {"step", "loss", "lr", "grad_norm", "tokens_per_s", "skipped"})
            self.assertAlmostEqual(steps[0]["lr"], lr, places=9)
            self.assertEqual([r["step"] for r in recs if "val_loss" in r], [3, 6])
            fp8 = [r for r in recs if "fp8" in r]
            self.assertEqual([r["step"] for r in fp8], [2, 4, 6])
            self.assertEqual({x["operand"] for x in fp8[0]["fp8"]}, {"x", "w", "dy"})
            self.assertEqual(s.steps_done, 6)
            self.assertEqual(recs, s.history)
            self.assertTrue(fp8run.is_checkpoint(os.path.join(d, "c.ckpt")))
            # the same validation loss from a fresh evaluation of the trained weights
            vl = fp8run.DataLoader(TOKENS, 2, 16, validation_batches=2)
            ev = sum(s.eval(vl.next()) for _ in range(vl.batches_per_epoch)) / vl.batches_per_epoch
            self.assertAlmostEqual(ev, recs[-1]["val_loss"], places=4)
            p = fp8run.plot(log, os.path.join(d, "run.svg"), title="py <run>")
            root = ET.fromstring(p._repr_svg_())
            texts = [t.text for t in root.iter("{http://www.w3.org/2000/svg}text")]
            self.assertIn("py <run>", texts)
            self.assertIn("FP8 range use of dy (amax*scale/max)", texts)
            with self.assertRaisesRegex(RuntimeError, "no records"):
                open(os.path.join(d, "empty.jsonl"), "w").close()
                fp8run.plot(os.path.join(d, "empty.jsonl"), os.path.join(d, "x.svg"))


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


class TestProgress(unittest.TestCase):
    def test_tty_in_place(self):
        f = FakeTTY()
        with fp8run.Progress(4, "train", file=f) as p:
            for i in range(4):
                p.update(1, loss=4.0 - i)
        out = f.getvalue()
        self.assertEqual(out.count("\r"), 4)
        self.assertEqual(out.count("\n"), 1)  # only the final newline
        self.assertIn("train 100% |####################| 4/4 | loss 1", out)

    def test_lines_and_off(self):
        f = io.StringIO()
        p = fp8run.Progress(100, "x", file=f, every_s=3600)
        for _ in range(100):
            p.update()
        p.close()
        lines = f.getvalue().splitlines()
        self.assertEqual(len(lines), 2)  # the first update and the last, not every step
        self.assertTrue(lines[1].startswith("x 100%"), lines)
        f = io.StringIO()
        p = fp8run.Progress(3, file=f, mode="off")
        p.update(3)
        p.write("hidden")
        self.assertEqual(f.getvalue(), "")


class TestLogging(unittest.TestCase):
    def test_library_messages_reach_logging(self):
        got = []

        class H(logging.Handler):
            def emit(self, rec):
                got.append((rec.levelno, rec.getMessage()))

        log = fp8run.log_to_python("fp8run.test", "info")
        h = H()
        log.addHandler(h)
        log.setLevel(logging.DEBUG)
        try:
            with fp8run.Model(MODEL) as m:
                fp8run.Session(m, 2, 16, backend="cpu").close()
        finally:
            fp8run.log_to_python(None)
            log.removeHandler(h)
        self.assertTrue(any(lvl == logging.INFO and "session on cpu" in msg for lvl, msg in got), got)


class TestCliPython(unittest.TestCase):
    def test_prepare_runs_this_interpreter(self):
        # the CLI, run from Python (fp8run._cli: plot, the console script of a pip install), runs
        # prepare.py with this interpreter, not PATH's python3: a venv's `tokenizers` is found
        import fp8run._cli
        with tempfile.TemporaryDirectory() as d:
            fake = os.path.join(d, "python3")
            with open(fake, "w") as f:
                f.write("#!/bin/sh\necho FAKE python3 >&2\nexit 9\n")
            os.chmod(fake, 0o755)
            text = os.path.join(d, "t.txt")
            with open(text, "w") as f:
                f.write("text")
            env = dict(os.environ, PATH=d + os.pathsep + os.environ.get("PATH", ""))
            env.pop("FP8RUN_PYTHON", None)
            old = os.environ.copy()
            os.environ.clear()
            os.environ.update(env)
            try:
                with self.assertRaises(RuntimeError) as e:  # no such tokenizer file: prepare.py says so
                    fp8run._cli.run(["prepare", "--tokenizer", os.path.join(d, "none.json"), text, "-o",
                                     os.path.join(d, "t.bin")])
            finally:
                os.environ.clear()
                os.environ.update(old)
        msg = str(e.exception)
        self.assertNotIn("FAKE", msg)
        self.assertTrue("no tokenizer file" in msg or "'tokenizers'" in msg, msg)


class TestTorchMissing(unittest.TestCase):
    def test_clear_import_error(self):
        try:
            import torch  # noqa: F401
            self.skipTest("torch is installed: python/tests/check_from_torch.py covers from_torch")
        except ImportError:
            pass
        with self.assertRaises(ImportError):
            fp8run.from_torch(object(), None)


if __name__ == "__main__":
    unittest.main()
