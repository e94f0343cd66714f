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
import re
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

    def test_jsonl_both_sides(self):
        """.jsonl records with bytes: the C reader (tools/cli/prepare_jsonl.c) writes what prepare.py does."""
        docs = random_docs(self.rng, 5) + ["", "nul \u0000 inside", "\u00e9\U0001f600"]
        lines = [json.dumps({"text": t, "id": i}, ensure_ascii=bool(i % 2)) for i, t in enumerate(docs)]
        files = [self.write("a.jsonl", "\n".join(lines[:4]) + "\n\n  \n"), self.write("b.txt", docs[0]),
                 self.write("c.jsonl", "\n".join(lines[4:]))]  # no newline at the end
        r = prep.prepare(files, self.p("j.bin"), "bytes", val_fraction=0.2)
        self.assertEqual(r["documents"], len(docs) + 1)
        self.cli_same(["--tokenizer", "bytes"] + files + ["-o", self.p("j.bin"), "--val-fraction", "0.2"], r["files"])

    def test_errors(self):
        f = self.write("a.txt", "ab")
        with self.assertRaisesRegex(prep.PrepareError, "too few"):
            prep.prepare([f], self.p("t.bin"), "bytes", val_fraction=0.1)
        with self.assertRaisesRegex(prep.PrepareError, "format 'npy'"):
            prep.prepare([f], self.p("t.bin"), "bytes", format="npy")
        with self.assertRaisesRegex(prep.PrepareError, "missing.txt: no such text file"):
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


def run_main(args, env=None):
    """prepare.py as the CLI runs it (a script): (exit code, stdout, stderr)."""
    r = subprocess.run([sys.executable, os.path.join(HERE, "..", "fp8run", "prepare.py")] + args,
                       capture_output=True, text=True, env=dict(os.environ, **(env or {})), timeout=60)
    return r.returncode, r.stdout, r.stderr


def run_cli(args, env=None):
    """`fp8run prepare ARGS` when FP8RUN_CLI is set (the C side: bytes, and the runner of prepare.py)."""
    r = subprocess.run([CLI, "prepare"] + args, capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, PYTHONPATH=os.path.join(HERE, ".."), FP8RUN_PYTHON=sys.executable,
                                **(env or {})))
    return r.returncode, r.stdout, r.stderr


class TestSafety(Base):
    """Nothing the user owns is lost: inputs are never outputs, only regular files are read,
    outputs are replaced whole or not at all; every failure is a one-line message."""

    def snapshot(self):
        """Every name in the folder with what it holds (a link's target, a file's bytes)."""
        def content(n):
            if os.path.islink(self.p(n)):
                return "-> " + os.readlink(self.p(n))
            if not os.path.isfile(self.p(n)):
                return None
            with open(self.p(n), "rb") as f:
                return f.read()
        return {n: content(n) for n in os.listdir(self.d)}

    def refused(self, args, pattern, code=1, runners=None):
        """Every runner (the script, and the CLI when there is one) refuses args with pattern on
        one line, without a traceback, and changes no file."""
        for run in runners or ([run_main] + ([run_cli] if CLI else [])):
            before = self.snapshot()
            rc, out, err = run(args)
            self.assertEqual(rc, code, "%s %s: %s" % (run.__name__, args, err))
            self.assertNotIn("Traceback", err)
            self.assertRegex(err, pattern, run.__name__)
            self.assertEqual(self.snapshot(), before, "%s changed files" % run.__name__)

    def test_output_is_an_input(self):
        a = self.write("a.txt", "some text")
        b = self.write("b.txt", "more")
        os.link(b, self.p("hard.bin"))
        os.symlink("a.txt", self.p("soft.bin"))
        spell = os.path.join(self.d, ".", "..", os.path.basename(self.d), "a.txt")
        for out in (a, spell, self.p("hard.bin"), self.p("soft.bin")):
            self.refused(["--tokenizer", "bytes", a, b, "-o", out], "would destroy the input")
        # --val-out, and the derived _val name, as an input
        self.refused(["--tokenizer", "bytes", a, b, "-o", self.p("t.bin"), "--val-fraction", "0.5",
                      "--val-out", b], "validation token file.* is the same file as the input file")
        c = self.write("t_val.bin", "an input that happens to have the derived name")
        self.refused(["--tokenizer", "bytes", c, "-o", self.p("t.bin"), "--val-fraction", "0.5"],
                     "t_val.bin.* the same file as the input")
        # the two outputs as one file, by two spellings
        self.refused(["--tokenizer", "bytes", a, "-o", self.p("t.bin"), "--val-fraction", "0.5",
                      "--val-out", os.path.join(self.d, ".", "t.bin")], "are the same file")
        with self.assertRaisesRegex(prep.PrepareError, "would destroy the input"):
            prep.prepare([a], a, "bytes")

    def test_non_regular_inputs(self):
        os.mkfifo(self.p("fifo"))
        os.mkdir(self.p("folder"))
        ok = self.write("a.txt", "x")
        for bad, kind in (("fifo", "a FIFO"), ("folder", "a folder"), ("/dev/zero", "a device")):
            path = bad if bad.startswith("/") else self.p(bad)
            self.refused(["--tokenizer", "bytes", ok, path, "-o", self.p("t.bin")], "is %s, not a regular file" % kind)
            if tokenizers is not None:
                self.refused(["--tokenizer", path, ok, "-o", self.p("t.bin")], "is %s, not a regular file" % kind)
        os.mkfifo(self.p("f.jsonl"))
        self.refused(["--tokenizer", "bytes", self.p("f.jsonl"), "-o", self.p("t.bin")], "is a FIFO")

    def test_non_regular_outputs(self):
        a = self.write("a.txt", "x")
        os.mkfifo(self.p("fifo.bin"))
        os.mkdir(self.p("dir.bin"))
        self.refused(["--tokenizer", "bytes", a, "-o", self.p("fifo.bin")], "is a FIFO: fp8run writes regular files")
        self.refused(["--tokenizer", "bytes", a, "-o", self.p("dir.bin")], "is a folder")
        self.refused(["--tokenizer", "bytes", a, "-o", self.p("nowhere/t.bin")], "does not exist")

    def test_links_replaced_not_followed(self):
        """A link planted at an output name (the derived _val name too) is replaced; its target
        stays as it was."""
        a = self.write("a.txt", "0123456789")
        victim = self.write("victim", "keep me")
        for run in [run_main] + ([run_cli] if CLI else []):
            os.symlink("victim", self.p("t.bin"))
            os.symlink("victim", self.p("t_val.bin"))
            rc, out, err = run(["--tokenizer", "bytes", a, "-o", self.p("t.bin"), "--val-fraction", "0.5"])
            self.assertEqual(rc, 0, err)
            self.assertEqual(open(victim).read(), "keep me")
            self.assertFalse(os.path.islink(self.p("t.bin")) or os.path.islink(self.p("t_val.bin")))
            self.assertEqual(len(tokens_of(self.p("t.bin"))) + len(tokens_of(self.p("t_val.bin"))), 11)
            os.unlink(self.p("t.bin"))
            os.unlink(self.p("t_val.bin"))

    def test_write_faults_keep_previous_files(self):
        a = self.write("a.txt", "0123456789")
        for name in ("t.bin", "t_val.bin"):
            self.write(name, "previous " + name)
        for fault in ("ENOSPC", "EIO", "fsync", "rename"):
            for run in [run_main] + ([run_cli] if CLI else []):
                before = self.snapshot()
                rc, out, err = run(["--tokenizer", "bytes", a, "-o", self.p("t.bin"), "--val-fraction", "0.5"],
                                   env={"FP8RUN_TEST_WRITE_FAULT": fault})
                self.assertEqual(rc, 1, "%s %s" % (run.__name__, fault))
                self.assertRegex(err, "the previous file, if any, is kept")
                self.assertNotIn("Traceback", err)
                self.assertEqual(self.snapshot(), before, "%s %s: a file changed or a temporary stayed" %
                                 (run.__name__, fault))

    def test_bad_jsonl(self):
        cases = [('{"text": 5}\n', ':1: the "text" field is a JSON int'),
                 ('{"text": null}\n', ':1: the "text" field is a JSON null'),
                 ('{"text": "ok"}\n[1, 2]\n', ':2: not a JSON record .*a JSON list'),
                 ('{"text": "ok"}\n\n{"other": "x"}\n', ':3: not a JSON record .*no "text" field'),
                 ('{"text": "caf\xc3"}\n', None),
                 ("[" * 100000 + "\n", ":1: JSON nested too deeply"),
                 ('{"text": "ok"}\n{"text": "unterminated\n', ":2: not a JSON record"),
                 ('{"text": "ok", "x": NaN}\n', ":1: not a JSON record")]
        for i, (text, pattern) in enumerate(cases):
            path = self.p("c%d.jsonl" % i)
            with open(path, "wb") as f:
                f.write(text.encode("latin-1") if pattern is None else text.encode("utf-8"))
            self.refused(["--tokenizer", "bytes", path, "-o", self.p("t.bin")],
                         re.escape(path) + (":1: not UTF-8" if pattern is None else pattern))

    def test_empty_values(self):
        a = self.write("a.txt", "x")
        for opt in ("--val-fraction", "--eos", "--val-out", "-o", "--tokenizer"):
            args = {"--tokenizer": "bytes", "-o": self.p("t.bin")}
            args[opt] = ""
            flat = [a] + [x for kv in args.items() for x in kv] + ([opt, ""] if opt not in args else [])
            self.refused(flat, "empty", code=2)

    @unittest.skipIf(tokenizers is None, "the Python package 'tokenizers' is not installed: tokenizer.json "
                     "failures not tested")
    def test_bad_tokenizer_json(self):
        a = self.write("a.txt", "x")
        cases = [("", "the file is empty"), ("{", "that `tokenizers` can load"), ('{"model": 5}', "can load"),
                 ("\xff\xfe", "not UTF-8"), ("[" * 100000, "can load")]
        for i, (text, pattern) in enumerate(cases):
            path = self.p("tok%d.json" % i)
            with open(path, "wb") as f:
                f.write(text.encode("latin-1"))
            self.refused(["--tokenizer", path, a, "-o", self.p("t.bin")], re.escape(path) + ": not a tokenizer.json.*"
                         + pattern)
        self.refused(["--tokenizer", self.p("missing.json"), a, "-o", self.p("t.bin")], "missing.json: no such")


if __name__ == "__main__":
    unittest.main()
