"""fp8run prepare --sft (python/fp8run/sft.py through prepare.py): chat data rendered and masked
exactly as transformers' apply_chat_template(..., return_assistant_tokens_mask=True) does, on
the tiny real tokenizer of tests/fixtures/sft (expected ids written by tools/gen_sft_fixture.py
with transformers); prompt/completion lines; bad lines, long examples, the split; the byte-level
form. Tests that need `tokenizers` and jinja2 skip, saying so, without them. With FP8RUN_CLI
set, `fp8run prepare --sft --tokenizer bytes` (C, no Python) must write the same bytes."""
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.normpath(os.path.join(HERE, "..", "..", "tests", "fixtures", "sft"))


def _load(name, file):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, "..", "fp8run", file))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


prep = _load("fp8run_prepare", "prepare.py")
sft = _load("fp8run_sft", "sft.py")
CLI = os.environ.get("FP8RUN_CLI")
try:
    import tokenizers  # noqa: F401
    import jinja2  # noqa: F401
    HAVE_HF = True
except ImportError:
    HAVE_HF = False
TOK = os.path.join(FIX, "tokenizer.json")


def _read(path):
    with open(path, "rb") as f:
        return f.read()


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name

    def tearDown(self):
        self.tmp.cleanup()

    def p(self, name):
        return os.path.join(self.d, name)

    def jsonl(self, name, records, raw_lines=()):
        path = self.p(name)
        with open(path, "w", encoding="utf-8") as f:
            for r in records:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
            for line in raw_lines:
                f.write(line + "\n")
        return path


@unittest.skipUnless(HAVE_HF, "needs the Python packages tokenizers and jinja2 (pip install tokenizers jinja2)")
class TestChatTemplate(Base):
    def expected(self):
        with open(os.path.join(FIX, "expected.json")) as f:
            return json.load(f)["examples"]

    def check(self, chat_template):
        r = prep.prepare(os.path.join(FIX, "chat.jsonl"), self.p("s.bin"), TOK, sft=True, chat_template=chat_template)
        got = sft.read_sft(self.p("s.bin"))["examples"]
        want = self.expected()
        self.assertEqual(len(got), len(want))
        for i, ((ids, tgt), e) in enumerate(zip(got, want)):
            self.assertEqual(ids, e["input_ids"], "example %d" % i)
            self.assertEqual(e["assistant_masks"][0], 0)  # a BOS: nothing to predict it from
            self.assertEqual(tgt, e["assistant_masks"], "example %d" % i)
        self.assertEqual(r["target_tokens"], sum(sum(e["assistant_masks"]) for e in want))
        self.assertEqual(r["tokens"], sum(len(e["input_ids"]) for e in want))

    def test_generation_blocks_match_transformers(self):
        self.check(None)  # tokenizer_config.json's template, with {% generation %} blocks

    def test_prefix_spans_match_transformers(self):
        self.check(os.path.join(FIX, "plain_template.jinja"))  # no blocks: spans from prefixes

    def test_train_on_prompt_and_prompt_completion(self):
        prep.prepare(os.path.join(FIX, "chat.jsonl"), self.p("a.bin"), TOK, sft=True, train_on_prompt=True)
        for ids, tgt in sft.read_sft(self.p("a.bin"))["examples"]:
            self.assertEqual(tgt, [0] + [1] * (len(ids) - 1))
        tk = tokenizers.Tokenizer.from_file(TOK)
        path = self.jsonl("pc.jsonl", [{"prompt": "What is the capital of France?", "completion": " Paris."}])
        r = prep.prepare(path, self.p("pc.bin"), TOK, sft=True)
        (ids, tgt), = sft.read_sft(self.p("pc.bin"))["examples"]
        p = tk.encode("What is the capital of France?").ids
        c = tk.encode(" Paris.", add_special_tokens=False).ids
        eos = tk.token_to_id("<|endoftext|>")
        self.assertEqual(ids, p + c + [eos])
        self.assertEqual(tgt, [0] * len(p) + [1] * (len(c) + 1))
        self.assertEqual(r["eos"], eos)

    def test_chat_template_jinja_file_wins(self):
        """A folder as save_pretrained writes it now: chat_template.jinja beside the config."""
        import shutil
        d = self.p("tok")
        os.mkdir(d)
        shutil.copy(TOK, d)
        with open(os.path.join(FIX, "tokenizer_config.json")) as f:
            cfg = json.load(f)
        cfg["chat_template"] = "{{ raise_exception('the config template is not the one') }}"
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump(cfg, f)
        shutil.copy(os.path.join(FIX, "plain_template.jinja"), os.path.join(d, "chat_template.jinja"))
        prep.prepare(os.path.join(FIX, "chat.jsonl"), self.p("j.bin"), os.path.join(d, "tokenizer.json"), sft=True)
        got = sft.read_sft(self.p("j.bin"))["examples"]
        self.assertEqual([t for _, t in got], [e["assistant_masks"] for e in self.expected()])

    def test_template_errors_name_the_line(self):
        bad = self.p("raise.jinja")
        with open(bad, "w") as f:
            f.write("{% if messages[0]['role'] == 'system' %}{{ raise_exception('no system role') }}{% endif %}x")
        path = self.jsonl("c.jsonl", [{"messages": [{"role": "user", "content": "a"}]},
                                      {"messages": [{"role": "system", "content": "a"}]}])
        with self.assertRaisesRegex(prep.PrepareError, r"c\.jsonl:2: the chat template failed: no system role"):
            prep.prepare(path, self.p("o.bin"), TOK, sft=True, chat_template=bad, train_on_prompt=True)


class TestBytes(Base):
    def test_prompt_completion_and_messages(self):
        path = self.jsonl("d.jsonl", [{"prompt": "Q: 2+2?\n", "completion": "A: 4"},
                                      {"messages": [{"role": "user", "content": "hé"},
                                                    {"role": "assistant", "content": "ok"}]},
                                      {"messages": [{"role": "assistant", "content": "x"},
                                                    {"role": "user", "content": "y"}]}])
        r = prep.prepare(path, self.p("b.bin"), "bytes", sft=True)
        f = sft.read_sft(self.p("b.bin"))
        self.assertEqual((f["vocab_size"], f["eos"], f["width"]), (256, 0, 2))
        (i0, t0), (i1, t1), (i2, t2) = f["examples"]
        self.assertEqual(bytes(i0), b"Q: 2+2?\nA: 4\0")
        self.assertEqual(t0, [0] * 8 + [1] * 5)
        self.assertEqual(bytes(i1), "user: hé\nassistant: ok\n\0".encode())
        self.assertEqual(t1, [0] * 21 + [1] * 4)
        self.assertEqual(bytes(i2), b"assistant: x\nuser: y\n\0")
        self.assertEqual(t2, [0] * 11 + [1] * 2 + [0] * 9)
        self.assertEqual(r["target_tokens"], 5 + 4 + 2)
        self.cli_same(["--sft", "--tokenizer", "bytes", path, "-o", self.p("b.bin")], [self.p("b.bin")])

    def test_bad_lines_long_examples_split(self):
        good = [{"prompt": "p" * k, "completion": "c" * k} for k in range(1, 9)]
        raw = ["{not json", json.dumps({"prompt": 1, "completion": "x"}), json.dumps({"messages": []}), ""]
        path = self.jsonl("d.jsonl", good, raw)
        with self.assertRaisesRegex(prep.PrepareError, r"d\.jsonl:9: not JSON"):
            prep.prepare(path, self.p("o.bin"), "bytes", sft=True)
        # k + k + 1 tokens: seq 8 holds 9: k <= 4 fit, 5..8 are truncated (or dropped)
        r = prep.prepare(path, self.p("o.bin"), "bytes", sft=True, skip_bad_lines=True, seq=8, val_fraction=0.25)
        self.assertEqual((r["bad_lines"], r["truncated"], r["dropped"], r["examples"]), (3, 4, 0, 8))
        self.assertEqual((r["train_examples"], r["val_examples"]), (6, 2))
        ex = sft.read_sft(self.p("o.bin"))["examples"] + sft.read_sft(self.p("o_val.bin"))["examples"]
        self.assertTrue(all(len(i) <= 9 for i, _ in ex))
        self.assertEqual(bytes(ex[7][0]), b"pppppppp\x63")  # truncated to 9 tokens: prompt and one target
        lengths = [len(i) for i, _ in ex]
        self.assertEqual(r["windows_packed"], sft.pack_count(lengths, 8))
        self.assertAlmostEqual(r["padding_efficiency"], sum(lengths) / (8 * 9))
        r = prep.prepare(path, self.p("o.bin"), "bytes", sft=True, skip_bad_lines=True, seq=8, long="drop")
        self.assertEqual((r["dropped"], r["examples"]), (4, 4))
        self.cli_same(["--sft", "--tokenizer", "bytes", path, "-o", self.p("o.bin"), "--skip-bad-lines", "--seq", "8",
                       "--long", "drop"], [self.p("o.bin")], "--seq 8: packed %d windows" % r["windows_packed"])
        # a prompt longer than the window leaves no target: dropped, and counted
        path = self.jsonl("e.jsonl", [{"prompt": "p" * 20, "completion": "c"}, {"prompt": "a", "completion": "b"}])
        r = prep.prepare(path, self.p("o.bin"), "bytes", sft=True, seq=8)
        self.assertEqual((r["no_target"], r["truncated"], r["examples"]), (1, 1, 1))

    def test_packing(self):
        self.assertEqual(sft.pack([5, 5, 5], 10), [0, 0, 1])  # windows of 10: [5 5] [5]
        self.assertEqual(sft.pack([6, 6, 4, 4], 10), [0, 1, 0, 1])  # first fit: [6 4] [6 4]
        self.assertEqual(sft.pack_count([10, 1, 9], 9), 2)  # [10] [1 9]
        self.assertEqual(sft.pack_count([], 9), 0)
        # only the last 64 windows take examples: an early window's room stays unused
        self.assertEqual(sft.pack([9] + [10] * 64 + [1], 10), [0] + list(range(1, 65)) + [65])
        # at most 63 examples a window, however short: the 64th starts the next one
        self.assertEqual(sft.pack([1] * 130, 2049), [0] * 63 + [1] * 63 + [2] * 4)

    def cli_same(self, args, outputs, stdout_has=""):
        """`fp8run prepare ARGS` (C, no Python) writes the same bytes, and prints stdout_has."""
        if not CLI:
            return
        kept = {o: _read(o) for o in outputs}
        for o in outputs:
            os.remove(o)
        # no Python: the bytes are done in C
        r = subprocess.run([CLI, "prepare"] + args, capture_output=True, text=True,
                           env=dict(os.environ, FP8RUN_PYTHON="/nonexistent"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(stdout_has, r.stdout)
        for o, data in kept.items():
            self.assertEqual(_read(o), data, o)

    def test_packing_matches_c(self):
        """The summary's packed windows: Python's pack and the C one (fp8run prepare) agree."""
        import random
        rng = random.Random(29)
        # the first example's empty prompt: the C reader's first append is of zero bytes
        ex = [{"prompt": "", "completion": "c"}]
        ex += [{"prompt": "p" * rng.randint(0, 20), "completion": "c" * rng.randint(1, 20)} for _ in range(300)]
        path = self.jsonl("r.jsonl", ex)
        r = prep.prepare(path, self.p("r.bin"), "bytes", sft=True, seq=63)
        self.assertGreater(r["packing_efficiency"], 0.9)
        self.cli_same(["--sft", "--tokenizer", "bytes", path, "-o", self.p("r.bin"), "--seq", "63"], [self.p("r.bin")],
                      "--seq 63: packed %d windows" % r["windows_packed"])


@unittest.skipUnless(os.environ.get("FP8RUN_LIBRARY"), "needs the library (FP8RUN_LIBRARY) and numpy")
class TestSession(Base):
    """fp8run.prepare(sft=True) -> fp8run.train on it -> fp8run.sample, on the bundled llama_tiny."""

    def test_prepare_train_sample(self):
        sys.path.insert(0, os.path.join(HERE, ".."))
        import numpy as np
        import fp8run
        model = os.path.join(FIX, "..", "llama_tiny", "model.onnx")
        ex = [{"prompt": "echo %d%d: " % (i % 10, i // 10), "completion": "%d%d" % (i % 10, i // 10)}
              for i in range(100)]
        path = self.jsonl("d.jsonl", ex)
        r = fp8run.prepare(path, self.p("s.bin"), "bytes", sft=True, seq=15)
        self.assertTrue(fp8run.is_sft_file(self.p("s.bin")))
        self.assertEqual(r["examples"], 100)
        dl = fp8run.DataLoader(self.p("s.bin"), 4, 15, order="sequential", vocab_size=128)
        self.assertTrue(dl.is_sft)
        self.assertEqual(dl.sft_info["examples"], 100)
        self.assertEqual(dl.sft_info["max_examples"], 1)  # 12 tokens an example, windows of 16
        w, seg, tgt, n = dl.next_sft()
        self.assertEqual((w.shape, seg.dtype, tgt.dtype), ((4, 16), np.int32, np.uint8))
        self.assertEqual(n, 4 * 3)  # two digits and EOS per example
        dl.close()
        sess = fp8run.train(model, self.p("s.bin"), steps=120, batch=4, seq=15, lr=3e-3, backend="cpu",
                            progress=False, save=self.p("c.ckpt"))
        hist = sess.history
        self.assertTrue(all("target_tokens" in h for h in hist if "loss" in h))
        self.assertLess(hist[-1]["loss"], hist[0]["loss"] / 3)
        loss, n = sess.eval_sft(*fp8run.DataLoader(self.p("s.bin"), 4, 15, order="sequential").next_sft()[:3])
        self.assertGreater(n, 0)
        sess.close()
        self.assertEqual(fp8run.sample(model, "echo 36: ", max_new_tokens=3, checkpoint=self.p("c.ckpt"),
                                       backend="cpu"), "36")


if __name__ == "__main__":
    unittest.main()
