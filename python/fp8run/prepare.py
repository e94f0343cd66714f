"""Text files into token files for training: `fp8run prepare` and fp8run.prepare(...).

Each input file is one document (a .jsonl file: one document per line, its "text" field).
Documents are tokenized (Hugging Face `tokenizers` with a tokenizer.json, or "bytes": each
UTF-8 byte is a token), joined with the EOS id after each document, and split: the last
val_fraction of the tokens go to the validation file. Formats:
  fp8run   raw little-endian uint16 (vocab <= 65536) or uint32 tokens (train --data-dtype)
  nanogpt  raw uint16 (nanoGPT's train.bin / val.bin; vocab <= 65536)
  llmc     llm.c: a 256 x int32 header (magic 20240520 version 1 with uint16 tokens, or magic
           20240801 version 7 with uint32) then the tokens

This file uses only the standard library (and `tokenizers` when asked for): the C CLI runs it
as a script, without importing the fp8run package (which loads libfp8run)."""
import array
import json
import math
import os
import sys

FORMATS = ("fp8run", "nanogpt", "llmc")
LLMC = {2: (20240520, 1), 4: (20240801, 7)}  # token width -> (magic, version)
BYTES_VOCAB = 256
BYTES_EOS = 0  # NUL: never in text, and the vocabulary stays 256
_EOS_NAMES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eot_id|>", "[SEP]")


class PrepareError(Exception):
    pass


def _documents(path):
    if path.endswith(".jsonl"):
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f, 1):
                if line.strip():
                    try:
                        yield json.loads(line)["text"]
                    except (ValueError, KeyError, TypeError) as e:
                        raise PrepareError("%s:%d: not a JSON record with a \"text\" field (%s)" % (path, i, e))
    else:
        with open(path, encoding="utf-8", errors="replace") as f:
            yield f.read()


class _Bytes:
    vocab_size = BYTES_VOCAB

    def encode(self, text):
        return text.encode("utf-8")

    def eos(self):
        return BYTES_EOS


class _HF:
    def __init__(self, path):
        try:
            import tokenizers
        except ImportError:
            raise PrepareError("--tokenizer %s needs the Python package 'tokenizers' (pip install tokenizers) for %s; "
                               "--tokenizer bytes needs nothing" % (path, sys.executable))
        if not os.path.exists(path):
            raise PrepareError("no tokenizer file '%s' (a Hugging Face tokenizer.json, or 'bytes')" % path)
        self.tok = tokenizers.Tokenizer.from_file(path)
        self.vocab_size = self.tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text):
        return self.tok.encode(text, add_special_tokens=False).ids

    def eos(self):
        for name in _EOS_NAMES:
            i = self.tok.token_to_id(name)
            if i is not None:
                return i
        raise PrepareError("the tokenizer has none of the usual end-of-text tokens (%s): give eos= (--eos ID)" %
                           ", ".join(_EOS_NAMES))


def _width(vocab, fmt):
    if vocab <= 65536:
        return 2
    if fmt == "nanogpt":
        raise PrepareError("nanoGPT files hold uint16 tokens; this vocabulary has %d: use format fp8run or llmc" % vocab)
    return 4


def write_tokens(path, tokens, width, fmt):
    """Write a token list (ints) as a token file of format fmt with width-byte tokens."""
    a = array.array("H" if width == 2 else "I", tokens)
    if sys.byteorder != "little":
        a.byteswap()
    with open(path, "wb") as f:
        if fmt == "llmc":
            magic, version = LLMC[width]
            header = array.array("i", [0] * 256)
            header[0], header[1], header[2] = magic, version, len(a)
            if sys.byteorder != "little":
                header.byteswap()
            f.write(header.tobytes())
        f.write(a.tobytes())


def val_path(out):
    """tokens.bin -> tokens_val.bin"""
    root, ext = os.path.splitext(out)
    return root + "_val" + (ext or ".bin")


def prepare(files, out, tokenizer="bytes", val_fraction=0.0, format="fp8run", eos=None, val_out=None):
    """Tokenize text files into out (and, with val_fraction > 0, the validation file val_out,
    default out with _val before the extension). Returns a dict: tokens, train_tokens,
    val_tokens, documents, vocab_size, eos, dtype ("uint16"/"uint32"), files written."""
    if isinstance(files, (str, os.PathLike)):
        files = [files]
    files = [os.fspath(f) for f in files]
    if not files:
        raise PrepareError("no input files")
    if format not in FORMATS:
        raise PrepareError("format '%s': use one of %s" % (format, ", ".join(FORMATS)))
    if not 0 <= val_fraction < 1:
        raise PrepareError("val_fraction %g is not in [0, 1)" % val_fraction)
    tok = _Bytes() if tokenizer == "bytes" else _HF(os.fspath(tokenizer))
    eos_id = tok.eos() if eos is None else int(eos)
    vocab = max(tok.vocab_size, eos_id + 1)
    width = _width(vocab, format)
    tokens, docs = array.array("I"), 0
    for path in files:
        if not os.path.exists(path):
            raise PrepareError("no input file '%s'" % path)
        for text in _documents(path):
            tokens.extend(tok.encode(text))
            tokens.append(eos_id)
            docs += 1
    # half away from zero, as the C side (fp8run prepare) rounds: Python's round() goes to even
    n_val = int(math.floor(len(tokens) * val_fraction + 0.5))
    if val_fraction > 0 and (n_val == 0 or n_val == len(tokens)):
        raise PrepareError("%d tokens are too few to split %g of them off for validation" % (len(tokens), val_fraction))
    written = [os.fspath(out)]
    write_tokens(written[0], tokens[:len(tokens) - n_val], width, format)
    if n_val:
        written.append(os.fspath(val_out) if val_out else val_path(written[0]))
        write_tokens(written[1], tokens[len(tokens) - n_val:], width, format)
    return {"tokens": len(tokens), "train_tokens": len(tokens) - n_val, "val_tokens": n_val, "documents": docs,
            "vocab_size": vocab, "eos": eos_id, "dtype": "uint16" if width == 2 else "uint32", "files": written}


def main(argv=None):
    import argparse
    p = argparse.ArgumentParser(prog="fp8run prepare", description=__doc__.split("\n\n")[0])
    p.add_argument("files", nargs="+")
    p.add_argument("--tokenizer", required=True, help="a Hugging Face tokenizer.json, or 'bytes'")
    p.add_argument("-o", "--out", required=True)
    p.add_argument("--val-out")
    p.add_argument("--val-fraction", type=float, default=0.0)
    p.add_argument("--format", default="fp8run", choices=FORMATS)
    p.add_argument("--eos", type=int)
    a = p.parse_args(argv)
    try:
        r = prepare(a.files, a.out, a.tokenizer, a.val_fraction, a.format, a.eos, a.val_out)
    except (PrepareError, OSError) as e:
        print("fp8run: error: %s" % e, file=sys.stderr)
        return 1
    summary(r, sys.stdout)
    return 0


def summary(r, f):
    """The result as the CLI prints it."""
    f.write("%d documents, %d tokens (vocab %d, eos %d, %s)\n" % (r["documents"], r["tokens"], r["vocab_size"],
                                                                r["eos"], r["dtype"]))
    f.write("wrote %s (%d tokens)\n" % (r["files"][0], r["train_tokens"]))
    if len(r["files"]) > 1:
        f.write("wrote %s (%d tokens)\n" % (r["files"][1], r["val_tokens"]))


if __name__ == "__main__":
    sys.exit(main())
