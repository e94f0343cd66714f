"""Text files into token files for training: `fp8run prepare` and fp8run.prepare(...).

Each input file is one document (a .jsonl file: one document per line, its "text" field).
Documents are tokenized (Hugging Face `tokenizers` with a tokenizer.json, or "bytes": each
UTF-8 byte is a token), joined with the EOS id after each document, and split: the last
val_fraction of the tokens go to the validation file. Formats:
  fp8run   raw little-endian uint16 (vocab <= 65536) or uint32 tokens (train --data-dtype)
  nanogpt  raw uint16 (nanoGPT's train.bin / val.bin; vocab <= 65536)
  llmc     llm.c: a 256 x int32 header (magic 20240520 version 1 with uint16 tokens, or magic
           20240801 version 7 with uint32) then the tokens

With sft=True (`--sft`) each .jsonl line is a supervised fine-tuning example (a prompt and a
completion, or chat messages) and the output is an SFT token file: the examples' tokens and
which of them are targets (sft.py describes both).

This file uses only the standard library (and `tokenizers` when asked for, jinja2 for chat
templates): the C CLI runs it as a script, without importing the fp8run package (which loads
libfp8run)."""
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


def _sft_module():
    """sft.py beside this file, also when this file runs as a script outside its package."""
    try:
        from . import sft  # noqa: F401
        return sft
    except ImportError:
        import importlib.util
        spec = importlib.util.spec_from_file_location("_fp8run_sft", os.path.join(os.path.dirname(
            os.path.abspath(__file__)), "sft.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod


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


def prepare(files, out, tokenizer="bytes", val_fraction=0.0, format="fp8run", eos=None, val_out=None, sft=False,
            seq=None, long="truncate", train_on_prompt=False, skip_bad_lines=False, chat_template=None):
    """Tokenize text files into out (and, with val_fraction > 0, the validation file val_out,
    default out with _val before the extension). Returns a dict: tokens, train_tokens,
    val_tokens, documents, vocab_size, eos, dtype ("uint16"/"uint32"), files written.
    sft=True: JSONL examples into an SFT token file (prepare_sft's arguments and result)."""
    if sft:
        return prepare_sft(files, out, tokenizer, val_fraction, eos, val_out, seq, long, train_on_prompt,
                           skip_bad_lines, chat_template)
    if chat_template or train_on_prompt or skip_bad_lines or seq:
        raise PrepareError("chat_template, train_on_prompt, skip_bad_lines and seq are options of sft=True (--sft)")
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


def prepare_sft(files, out, tokenizer="bytes", val_fraction=0.0, eos=None, val_out=None, seq=None,
                long="truncate", train_on_prompt=False, skip_bad_lines=False, chat_template=None):
    """JSONL examples into an SFT token file. seq: examples longer than seq + 1 tokens (what a
    window of seq inputs holds) are truncated to it or dropped (long); an example left without a
    target is dropped. The last val_fraction of the examples go to val_out. Returns a dict:
    examples, tokens, target_tokens, prompt_tokens, bad_lines, truncated, dropped, no_target,
    vocab_size, eos, dtype, files, and with seq: windows_packed, windows_padded and the share of
    window tokens that are examples' (packing_efficiency, padding_efficiency)."""
    sft = _sft_module()
    if isinstance(files, (str, os.PathLike)):
        files = [files]
    files = [os.fspath(f) for f in files]
    if not files:
        raise PrepareError("no input files")
    if long not in sft.LONG_MODES:
        raise PrepareError("long '%s': use truncate or drop" % long)
    if seq is not None and int(seq) < 1:
        raise PrepareError("seq %s is not a positive number of tokens" % seq)
    if not 0 <= val_fraction < 1:
        raise PrepareError("val_fraction %g is not in [0, 1)" % val_fraction)
    if tokenizer == "bytes":
        enc = sft.BytesEncoder()
        if eos is not None and int(eos) != enc.eos:
            raise PrepareError("bytes SFT examples end with EOS 0; --eos does not apply")
    else:
        hf = _HF(os.fspath(tokenizer))
        enc = sft.HFEncoder(hf.tok, hf.eos() if eos is None else int(eos), chat_template, os.fspath(tokenizer))
    stats = {"bad_lines": 0}
    r = {"truncated": 0, "dropped": 0, "no_target": 0}
    examples = []
    cap = int(seq) + 1 if seq is not None else None
    try:
        for path in files:
            if not os.path.exists(path):
                raise PrepareError("no input file '%s'" % path)
            for ids, tgt in sft.read_examples(path, enc, train_on_prompt, skip_bad_lines, stats):
                if cap is not None and len(ids) > cap:
                    if long == "drop":
                        r["dropped"] += 1
                        continue
                    ids, tgt = ids[:cap], tgt[:cap]
                    r["truncated"] += 1
                if not any(tgt):
                    r["no_target"] += 1
                    continue
                examples.append((ids, tgt))
    except sft.SFTError as e:
        raise PrepareError(str(e))
    if not examples:
        raise PrepareError("no usable examples in %s" % ", ".join(files))
    vocab = max(enc.vocab_size, enc.eos + 1, max(max(i) for i, _ in examples) + 1)
    width = _width(vocab, "fp8run")
    n_val = int(math.floor(len(examples) * val_fraction + 0.5))
    if val_fraction > 0 and (n_val == 0 or n_val == len(examples)):
        raise PrepareError("%d examples are too few to split %g of them off for validation" % (len(examples),
                                                                                              val_fraction))
    written = [os.fspath(out)]
    sft.write_sft(written[0], examples[:len(examples) - n_val], width, vocab, enc.eos)
    if n_val:
        written.append(os.fspath(val_out) if val_out else val_path(written[0]))
        sft.write_sft(written[1], examples[len(examples) - n_val:], width, vocab, enc.eos)
    n_tok = sum(len(i) for i, _ in examples)
    n_tgt = sum(sum(t) for _, t in examples)
    r.update({"examples": len(examples), "train_examples": len(examples) - n_val, "val_examples": n_val,
              "tokens": n_tok, "target_tokens": n_tgt, "prompt_tokens": n_tok - n_tgt,
              "bad_lines": stats["bad_lines"], "vocab_size": vocab, "eos": enc.eos,
              "dtype": "uint16" if width == 2 else "uint32", "files": written, "sft": True, "seq": seq})
    if cap is not None:
        lengths = [len(i) for i, _ in examples]
        r["windows_packed"] = sft.pack_count(lengths, int(seq))
        r["windows_padded"] = len(examples)
        r["packing_efficiency"] = n_tok / (r["windows_packed"] * cap)
        r["padding_efficiency"] = n_tok / (len(examples) * cap)
    return r


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
    p.add_argument("--sft", action="store_true")
    p.add_argument("--seq", type=int)
    p.add_argument("--long", default="truncate", choices=("truncate", "drop"))
    p.add_argument("--train-on-prompt", action="store_true")
    p.add_argument("--skip-bad-lines", action="store_true")
    p.add_argument("--chat-template")
    a = p.parse_args(argv)
    if a.sft and a.format != "fp8run":
        p.error("--sft writes an SFT token file; --format does not apply")
    try:
        r = prepare(a.files, a.out, a.tokenizer, a.val_fraction, a.format, a.eos, a.val_out, a.sft, a.seq, a.long,
                    a.train_on_prompt, a.skip_bad_lines, a.chat_template)
    except (PrepareError, OSError) as e:
        print("fp8run: error: %s" % e, file=sys.stderr)
        return 1
    summary(r, sys.stdout)
    return 0


def summary(r, f):
    """The result as the CLI prints it."""
    if r.get("sft"):
        return summary_sft(r, f)
    f.write("%d documents, %d tokens (vocab %d, eos %d, %s)\n" % (r["documents"], r["tokens"], r["vocab_size"],
                                                                r["eos"], r["dtype"]))
    f.write("wrote %s (%d tokens)\n" % (r["files"][0], r["train_tokens"]))
    if len(r["files"]) > 1:
        f.write("wrote %s (%d tokens)\n" % (r["files"][1], r["val_tokens"]))


def summary_sft(r, f):
    """An SFT result as the CLI prints it (tools' C side prints the same lines for bytes)."""
    f.write("%d examples: %d tokens, %d targets, %d prompt (vocab %d, eos %d, %s)\n" % (
        r["examples"], r["tokens"], r["target_tokens"], r["prompt_tokens"], r["vocab_size"], r["eos"], r["dtype"]))
    f.write("skipped: %d bad lines, %d without targets; longer than --seq: %d truncated, %d dropped\n" % (
        r["bad_lines"], r["no_target"], r["truncated"], r["dropped"]))
    if r.get("seq"):
        f.write("--seq %d: packed %d windows (%.1f%% examples' tokens), unpacked %d windows (%.1f%%)\n" % (
            r["seq"], r["windows_packed"], 100 * r["packing_efficiency"], r["windows_padded"],
            100 * r["padding_efficiency"]))
    f.write("wrote %s (%d examples)\n" % (r["files"][0], r["train_examples"]))
    if len(r["files"]) > 1:
        f.write("wrote %s (%d examples)\n" % (r["files"][1], r["val_examples"]))


if __name__ == "__main__":
    sys.exit(main())
