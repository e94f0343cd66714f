"""fp8run.prepare (python/fp8run/prepare.py): bytes always; a Hugging Face tokenizer.json when
the `tokenizers` package is installed (skipped, saying so, when not: CI has no PyPI). With
FP8RUN_CLI set, `fp8run prepare` must write the same bytes. Needs only the standard library:
prepare.py is loaded by path, as the CLI runs it, without the library."""
import array
import importlib.util
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("fp8run_prepare", os.path.join(HERE, "..", "fp8run", "prepare.py"))
prep = importlib.util.module_from_spec(spec)
spec.loader.exec_module(prep)
CLI = os.environ.get("FP8RUN_CLI")
try:
    import tokenizers
except ImportError:
    tokenizers = None


def tokens_of(path, width=2, header=False):
    data = open(path, "rb").read()
    if header:
        data = data[1024:]
    a = array.array("H" if width == 2 else "I")
    a.frombytes(data)
    return list(a)


def random_docs(rng, n):
    words = ["fp8", "scale", "amax", "the", "loss", "héllo", "wörld", "gradient", "e4m3", "\n"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 40))) for _ in range(n)]


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.d = self.tmp.name
        self.rng = random.Random()

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, text):
        p = os.path.join(self.d, name)
        with open(p, "w", encoding="utf-8") as f:
            f.write(text)
        return p

    def p(self, name):
        return os.path.join(self.d, name)

    def cli_same(self, args, outputs):
        """`fp8run prepare ARGS` writes the same bytes as prepare() did into outputs."""
        if not CLI:
            return
        kept = {o: open(o, "rb").read() for o in outputs}
        r = subprocess.run([CLI, "prepare"] + args, capture_output=True, text=True,
                           env=dict(os.environ, PYTHONPATH=os.path.join(HERE, ".."), FP8RUN_PYTHON=sys.executable))
        self.assertEqual(r.returncode, 0, r.stderr)
        for o, data in kept.items():
            self.assertEqual(open(o, "rb").read(), data, o)


class TestBytes(Base):
    def test_join_split_formats(self):
        docs = random_docs(self.rng, 3)
        files = [self.write("d%d.txt" % i, t) for i, t in enumerate(docs)]
        want = []
        for t in docs:
            want += list(t.encode("utf-8")) + [0]
        r = prep.prepare(files, self.p("t.bin"), "bytes", val_fraction=0.1)
        n_val = int(math.floor(len(want) * 0.1 + 0.5))  # rounded as the CLI does
        self.assertEqual((r["tokens"], r["val_tokens"], r["documents"], r["dtype"]), (len(want), n_val, 3, "uint16"))
        self.assertEqual(r["files"], [self.p("t.bin"), self.p("t_val.bin")])
        self.assertEqual(tokens_of(self.p("t.bin")), want[:-n_val])
        self.assertEqual(tokens_of(self.p("t_val.bin")), want[-n_val:])
        self.cli_same(["--tokenizer", "bytes"] + files + ["-o", self.p("t.bin"), "--val-fraction", "0.1"],
                      r["files"])
        r = prep.prepare(files, self.p("l.bin"), "bytes", format="llmc", eos=999)
        head = struct.unpack("<3i", open(self.p("l.bin"), "rb").read(12))
        self.assertEqual(head, (20240520, 1, len(want)))
        self.assertEqual(tokens_of(self.p("l.bin"), header=True), [999 if t == 0 else t for t in want])
        self.cli_same(["--tokenizer", "bytes"] + files + ["-o", self.p("l.bin"), "--format", "llmc", "--eos", "999"],
                      r["files"])

    def test_errors(self):
        f = self.write("a.txt", "ab")
        with self.assertRaisesRegex(prep.PrepareError, "too few"):
            prep.prepare([f], self.p("t.bin"), "bytes", val_fraction=0.1)
        with self.assertRaisesRegex(prep.PrepareError, "format 'npy'"):
            prep.prepare([f], self.p("t.bin"), "bytes", format="npy")
        with self.assertRaisesRegex(prep.PrepareError, "no input file"):
            prep.prepare([self.p("missing.txt")], self.p("t.bin"), "bytes")
        with self.assertRaisesRegex(prep.PrepareError, "not a JSON record"):
            prep.prepare([self.write("bad.jsonl", "{\"txt\": 1}\n")], self.p("t.bin"), "bytes")


@unittest.skipIf(tokenizers is None, "the Python package 'tokenizers' is not installed (pip install tokenizers): "
                 "tokenizer.json preparation not tested")
class TestTokenizers(Base):
    def bpe(self):
        from tokenizers import Tokenizer, models, pre_tokenizers, trainers
        tok = Tokenizer(models.BPE(unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]", "<|endoftext|>"])
        tok.train_from_iterator(random_docs(self.rng, 50), trainer)
        path = self.p("tokenizer.json")
        tok.save(path)
        return tok, path

    def test_bpe_jsonl_and_text(self):
        tok, path = self.bpe()
        docs = random_docs(self.rng, 4)
        files = [self.write("a.txt", docs[0]),
                 self.write("b.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in docs[1:]))]
        eos = tok.token_to_id("<|endoftext|>")
        want = []
        for t in docs:
            want += tok.encode(t, add_special_tokens=False).ids + [eos]
        r = prep.prepare(files, self.p("t.bin"), path, val_fraction=0.2, format="nanogpt")
        self.assertEqual((r["documents"], r["eos"], r["dtype"]), (4, eos, "uint16"))
        self.assertEqual(tokens_of(self.p("t.bin")) + tokens_of(self.p("t_val.bin")), want)
        self.assertEqual(len(tokens_of(self.p("t_val.bin"))), int(math.floor(len(want) * 0.2 + 0.5)))
        self.cli_same(["--tokenizer", path] + files + ["-o", self.p("t.bin"), "--val-fraction", "0.2",
                                                       "--format", "nanogpt"], r["files"])

    def test_large_vocab_uint32(self):
        from tokenizers import Tokenizer, models, pre_tokenizers
        vocab = {"w%d" % i: i for i in range(70000)}
        vocab["[UNK]"] = 70000
        tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        path = self.p("big.json")
        tok.save(path)
        ids = [self.rng.randrange(70000) for _ in range(50)]
        f = self.write("a.txt", " ".join("w%d" % i for i in ids))
        r = prep.prepare([f], self.p("t.bin"), path, format="llmc", eos=70000)
        self.assertEqual(r["dtype"], "uint32")
        self.assertEqual(struct.unpack("<3i", open(self.p("t.bin"), "rb").read(12)), (20240801, 7, 51))
        self.assertEqual(tokens_of(self.p("t.bin"), 4, header=True), ids + [70000])
        with self.assertRaisesRegex(prep.PrepareError, "nanoGPT files hold uint16"):
            prep.prepare([f], self.p("n.bin"), path, format="nanogpt", eos=70000)
        with self.assertRaisesRegex(prep.PrepareError, "end-of-text"):
            prep.prepare([f], self.p("n.bin"), path)


if __name__ == "__main__":
    unittest.main()
