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
import errno
import json
import math
import os
import stat
import sys

FORMATS = ("fp8run", "nanogpt", "llmc")
LLMC = {2: (20240520, 1), 4: (20240801, 7)}  # token width -> (magic, version)
BYTES_VOCAB = 256
BYTES_EOS = 0  # NUL: never in text, and the vocabulary stays 256
_EOS_NAMES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eot_id|>", "[SEP]")


class PrepareError(Exception):
    """A failure the user can fix; str() is "FILE[:LINE]: what is wrong" where a file is at fault."""
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


# The read and write rules of the C library (graph/safe_io.h), for the files this module
# touches: inputs are regular files only (a FIFO would block, /dev/zero never ends, a folder is
# no document), checked on the open descriptor before anything is read, and size-checked;
# outputs are written to a temporary file in their folder, fsync'ed and renamed into place,
# never over an input or over each other.
MAX_TEXT_BYTES = 4 << 30       # one plain-text document is read whole
MAX_TOKENIZER_BYTES = 1 << 30  # a tokenizer.json (the largest on the hub are ~30 MB)
MAX_JSONL_LINE = 256 << 20     # one .jsonl record


def _kind(mode):
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def open_regular(path, what, max_bytes=None):
    """A binary file object for `path`, refused unless it is a regular file (of at most
    max_bytes): the check is made on the descriptor, opened without blocking."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise PrepareError("%s: no such %s" % (path, what))
    except OSError as e:
        raise PrepareError("%s: cannot open the %s: %s" % (path, what, e.strerror or e))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PrepareError("%s: the %s is %s, not a regular file (refused)" % (path, what, _kind(st.st_mode)))
        if max_bytes is not None and st.st_size > max_bytes:
            raise PrepareError("%s: the %s is %d bytes, more than the %d it may have (refused)" %
                               (path, what, st.st_size, max_bytes))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _file_id(path, follow):
    try:
        st = os.stat(path) if follow else os.lstat(path)
    except OSError:
        return None, None
    return (st.st_dev, st.st_ino), st.st_mode


def check_outputs(inputs, outputs):
    """Refuse outputs that are inputs (by device and inode), that name one file, or that are not
    regular files or links. inputs, outputs: lists of (path, what)."""
    ids = {}
    for path, what in inputs:
        fid, _ = _file_id(path, True)
        if fid is not None:
            ids.setdefault(fid, (path, what))
    names = {}
    for path, what in outputs:
        if not path or path.endswith(os.sep):
            raise PrepareError("%s: the %s must name a file" % (path, what))
        folder = os.path.dirname(path) or "."
        dfid, dmode = _file_id(folder, True)
        if dfid is None or not stat.S_ISDIR(dmode):
            raise PrepareError("%s: its folder '%s' does not exist (create it first)" % (path, folder))
        key = (dfid, os.path.basename(path))
        lid, lmode = _file_id(path, False)
        if lid is not None:
            if not (stat.S_ISREG(lmode) or stat.S_ISLNK(lmode)):
                raise PrepareError("%s: the %s is %s: fp8run writes regular files only (refused)" %
                                   (path, what, _kind(lmode)))
            fid, _ = _file_id(path, True)
            for cand, how in ((lid, "the same file as"), (fid, "a link to")):
                if cand in ids:
                    ipath, iwhat = ids[cand]
                    raise PrepareError("%s: the %s is %s the %s '%s' (refused: writing it would destroy the input)" %
                                       (path, what, how, iwhat, ipath))
        other = names.get(key) or (names.get(lid) if lid is not None else None)
        if other:
            raise PrepareError("%s: the %s and the %s '%s' are the same file (refused: one would overwrite the other)"
                               % (path, what, other[1], other[0]))
        names[key] = (path, what)
        if lid is not None:
            names[lid] = (path, what)


def _write_fault(stage):
    """FP8RUN_TEST_WRITE_FAULT, as the C library reads it (tests only)."""
    f = os.environ.get("FP8RUN_TEST_WRITE_FAULT", "")
    if stage == "write":
        return {"ENOSPC": errno.ENOSPC, "EIO": errno.EIO}.get(f)
    return errno.EIO if f == stage else None


class _Pending:
    """A file being written: a temporary beside `path`, renamed over it by commit()."""

    def __init__(self, path, what):
        self.path, self.what, self.tmp, self.fd = path, what, None, None
        folder, base = os.path.dirname(path) or ".", os.path.basename(path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        for attempt in range(100):
            tmp = os.path.join(folder, ".%s.tmp.%d.%d" % (base, os.getpid(), attempt))
            try:
                self.fd = os.open(tmp, flags, 0o644)
                self.tmp = tmp
                return
            except FileExistsError:
                continue
            except OSError as e:
                raise PrepareError("%s: cannot create a temporary file beside the %s: %s" % (path, what, e.strerror))
        raise PrepareError("%s: cannot create a temporary file beside the %s" % (path, what))

    def _fail(self, e):
        self.abort()
        raise PrepareError("%s: writing the %s failed: %s (the previous file, if any, is kept)" %
                           (self.path, self.what, os.strerror(e) if isinstance(e, int) else e.strerror or e))

    def write(self, data):
        view = memoryview(data).cast("B")
        fault = _write_fault("write")
        if fault:
            os.write(self.fd, view[:len(view) // 2])
            self._fail(fault)
        try:
            while len(view):
                view = view[os.write(self.fd, view):]
        except OSError as e:
            self._fail(e)

    def finish(self):
        try:
            if _write_fault("fsync"):
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            os.fsync(self.fd)
        except OSError as e:
            self._fail(e)
        finally:
            if self.fd is not None:
                os.close(self.fd)
                self.fd = None

    def commit(self):
        try:
            if _write_fault("rename"):
                raise OSError(errno.EIO, os.strerror(errno.EIO))
            os.replace(self.tmp, self.path)  # replaces a link at path; never writes through it
        except OSError as e:
            self._fail(e)
        self.tmp = None
        try:
            dfd = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass  # best effort: the rename has happened

    def abort(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.tmp:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass
            self.tmp = None


def _no_constant(name):
    """NaN and Infinity are not JSON (the C reader refuses them too)."""
    raise ValueError("%s is not JSON" % name)


def _documents(path):
    if path.endswith(".jsonl"):
        with open_regular(path, ".jsonl file") as f:
            i = 0
            while True:
                line = f.readline(MAX_JSONL_LINE + 1)
                if not line:
                    break
                i += 1
                if len(line) > MAX_JSONL_LINE:
                    raise PrepareError("%s:%d: a record longer than %d bytes (refused)" % (path, i, MAX_JSONL_LINE))
                try:
                    text = line.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise PrepareError("%s:%d: not UTF-8 (byte %d: %s)" % (path, i, e.start + 1, e.reason))
                if not text.strip():
                    continue
                try:
                    rec = json.loads(text, parse_constant=_no_constant)
                except RecursionError:
                    raise PrepareError("%s:%d: JSON nested too deeply" % (path, i))
                except ValueError as e:
                    raise PrepareError("%s:%d: not a JSON record with a \"text\" field (%s)" % (path, i, e))
                if not isinstance(rec, dict) or "text" not in rec:
                    raise PrepareError("%s:%d: not a JSON record with a \"text\" field (%s)" %
                                       (path, i, "no \"text\" field" if isinstance(rec, dict) else
                                        "a JSON %s, not an object" % type(rec).__name__))
                if not isinstance(rec["text"], str):
                    raise PrepareError("%s:%d: the \"text\" field is a JSON %s, not a string" %
                                       (path, i, "null" if rec["text"] is None else type(rec["text"]).__name__))
                yield i, rec["text"]
    else:
        with open_regular(path, "text file", MAX_TEXT_BYTES) as f:
            yield None, f.read().decode("utf-8", errors="replace")


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
        self.path = path
        with open_regular(path, "tokenizer.json (--tokenizer takes a Hugging Face tokenizer.json, or 'bytes')",
                          MAX_TOKENIZER_BYTES) as f:
            data = f.read()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise PrepareError("%s: not a tokenizer.json: not UTF-8 (byte %d)" % (path, e.start + 1))
        if not text.strip():
            raise PrepareError("%s: not a tokenizer.json: the file is empty" % path)
        try:
            self.tok = tokenizers.Tokenizer.from_str(text)
            self.vocab_size = self.tok.get_vocab_size(with_added_tokens=True)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as e:  # tokenizers' Rust panics are BaseExceptions
            raise PrepareError("%s: not a tokenizer.json that `tokenizers` can load: %s" % (path, _first_line(e)))

    def encode(self, text):
        return self.tok.encode(text, add_special_tokens=False).ids

    def eos(self):
        for name in _EOS_NAMES:
            i = self.tok.token_to_id(name)
            if i is not None:
                return i
        raise PrepareError("the tokenizer has none of the usual end-of-text tokens (%s): give eos= (--eos ID)" %
                           ", ".join(_EOS_NAMES))


def _first_line(e):
    m = str(e).strip().split("\n")[0] or type(e).__name__
    return m if len(m) <= 300 else m[:300] + "..."


def _width(vocab, fmt):
    if vocab <= 65536:
        return 2
    if fmt == "nanogpt":
        raise PrepareError("nanoGPT files hold uint16 tokens; this vocabulary has %d: use format fp8run or llmc" % vocab)
    return 4


def _token_bytes(tokens, width, fmt):
    a = array.array("H" if width == 2 else "I", tokens)
    if sys.byteorder != "little":
        a.byteswap()
    parts = []
    if fmt == "llmc":
        magic, version = LLMC[width]
        header = array.array("i", [0] * 256)
        header[0], header[1], header[2] = magic, version, len(a)
        if sys.byteorder != "little":
            header.byteswap()
        parts.append(header.tobytes())
    parts.append(a.tobytes())
    return parts


def write_tokens(path, tokens, width, fmt):
    """Write a token list (ints) as a token file of format fmt with width-byte tokens, under the
    write rule (a temporary file renamed into place)."""
    w = _Pending(os.fspath(path), "token file")
    for part in _token_bytes(tokens, width, fmt):
        w.write(part)
    w.finish()
    w.commit()


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
    out = os.fspath(out)
    val_out = os.fspath(val_out) if val_out else val_path(out)
    inputs = [(f, "input file") for f in files]
    if tokenizer != "bytes":
        inputs.append((os.fspath(tokenizer), "tokenizer file"))
    # the validation file is checked even when no tokens go to it: its name is fixed by now
    outputs = [(out, "training token file")] + ([(val_out, "validation token file")] if val_fraction > 0 else [])
    check_outputs(inputs, outputs)
    tok = _Bytes() if tokenizer == "bytes" else _HF(os.fspath(tokenizer))
    eos_id = tok.eos() if eos is None else int(eos)
    if eos_id < 0 or eos_id > 0xffffffff:
        raise PrepareError("eos %d is not a token id" % eos_id)
    vocab = max(tok.vocab_size, eos_id + 1)
    width = _width(vocab, format)
    tokens, docs = array.array("I"), 0
    for path in files:
        for line, text in _documents(path):
            try:
                tokens.extend(tok.encode(text))
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as e:
                raise PrepareError("%s%s: the tokenizer failed on this document: %s" %
                                   (path, ":%d" % line if line else "", _first_line(e)))
            tokens.append(eos_id)
            docs += 1
    # half away from zero, as the C side (fp8run prepare) rounds: Python's round() goes to even
    n_val = int(math.floor(len(tokens) * val_fraction + 0.5))
    if val_fraction > 0 and (n_val == 0 or n_val == len(tokens)):
        raise PrepareError("%d tokens are too few to split %g of them off for validation" % (len(tokens), val_fraction))
    # both files are written in full before either replaces its previous version
    written = [out] + ([val_out] if n_val else [])
    pending = []
    try:
        for k, path in enumerate(written):
            part = tokens[:len(tokens) - n_val] if k == 0 else tokens[len(tokens) - n_val:]
            pending.append(_Pending(path, outputs[k][1]))
            for data in _token_bytes(part, width, format):
                pending[-1].write(data)
            pending[-1].finish()
        for w in pending:
            w.commit()
    finally:
        for w in pending:
            w.abort()
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
    out = os.fspath(out)
    val_out = os.fspath(val_out) if val_out else val_path(out)
    inputs = [(f, "input file") for f in files] + ([(os.fspath(chat_template), "chat template")] if chat_template else [])
    if tokenizer != "bytes":
        inputs.append((os.fspath(tokenizer), "tokenizer file"))
    outputs = [(out, "SFT token file")] + ([(val_out, "validation SFT token file")] if val_fraction > 0 else [])
    check_outputs(inputs, outputs)
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
            for ids, tgt in sft.read_examples(path, enc, train_on_prompt, skip_bad_lines, stats,
                                              lambda p: open_regular(p, ".jsonl file")):
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
    # both files are written in full before either replaces its previous version (the write rule)
    written = [out] + ([val_out] if n_val else [])
    pending = []
    try:
        for k, path in enumerate(written):
            part = examples[:len(examples) - n_val] if k == 0 else examples[len(examples) - n_val:]
            pending.append(_Pending(path, outputs[k][1]))
            for data in sft.sft_bytes(part, width, vocab, enc.eos):
                pending[-1].write(data)
            pending[-1].finish()
        for w in pending:
            w.commit()
    finally:
        for w in pending:
            w.abort()
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
    def given(conv):  # every option refuses an empty value, as the C options do
        def parse(text):
            if not text:
                raise argparse.ArgumentTypeError("an empty value")
            return conv(text)
        parse.__name__ = conv.__name__
        return parse

    p.add_argument("files", nargs="+", type=given(str))
    p.add_argument("--tokenizer", required=True, type=given(str), help="a Hugging Face tokenizer.json, or 'bytes'")
    p.add_argument("-o", "--out", required=True, type=given(str))
    p.add_argument("--val-out", type=given(str))
    p.add_argument("--val-fraction", type=given(float), default=0.0)
    p.add_argument("--format", default="fp8run", choices=FORMATS)
    p.add_argument("--eos", type=given(int))
    p.add_argument("--sft", action="store_true")
    p.add_argument("--seq", type=given(int))
    p.add_argument("--long", default="truncate", choices=("truncate", "drop"))
    p.add_argument("--train-on-prompt", action="store_true")
    p.add_argument("--skip-bad-lines", action="store_true")
    p.add_argument("--chat-template", type=given(str))
    a = p.parse_args(argv)
    if a.sft and a.format != "fp8run":
        p.error("--sft writes an SFT token file; --format does not apply")
    try:
        r = prepare(a.files, a.out, a.tokenizer, a.val_fraction, a.format, a.eos, a.val_out, a.sft, a.seq, a.long,
                    a.train_on_prompt, a.skip_bad_lines, a.chat_template)
    except PrepareError as e:
        print("fp8run: error: %s" % e, file=sys.stderr)
        return 1
    except OSError as e:
        print("fp8run: error: %s: %s" % (e.filename or "prepare", e.strerror or e), file=sys.stderr)
        return 1
    except MemoryError:
        print("fp8run: error: out of memory", file=sys.stderr)
        return 1
    except Exception as e:  # a message, never a traceback, for the command line
        print("fp8run: error: %s (an unexpected %s in prepare.py: please report it)" % (_first_line(e),
              type(e).__name__), file=sys.stderr)
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
