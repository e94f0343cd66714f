"""Supervised fine-tuning data: JSONL examples into an SFT token file (`fp8run prepare --sft`).

Input lines (one JSON object each; blank lines are skipped):
  {"prompt": "...", "completion": "..."}
      ids = encode(prompt, with the tokenizer's special tokens, e.g. a BOS) + encode(completion)
      + [eos]; the targets are the completion's tokens and the EOS (TRL's prompt-completion form).
  {"messages": [{"role": "...", "content": "..."}, ...]}
      rendered with the model's chat template (tokenizer_config.json beside tokenizer.json, or
      chat_template=FILE) exactly as transformers' apply_chat_template(messages, tokenize=True)
      renders and tokenizes it; the targets are the assistant turns. A template with
      {% generation %} ... {% endgeneration %} blocks marks them itself (what
      apply_chat_template(..., return_assistant_tokens_mask=True) returns, and what TRL's
      assistant_only_loss trains on); without such blocks an assistant turn is the text that
      rendering messages[:i+1] adds to rendering messages[:i] with add_generation_prompt=True.
  With train_on_prompt every token is a target.

The byte-level tokenizer ("bytes": each UTF-8 byte a token, EOS 0) has no template; a message is
"ROLE: CONTENT\\n", the assistant's "CONTENT\\n" being its target, and the example ends with EOS
(a target when the last message is the assistant's). `fp8run prepare --sft` does the same in C
(runtime/io/sft_data.c) and the tests check that both write the same bytes.

The SFT token file (little-endian; runtime/io/sft_data.h reads it):
   0  8 bytes  magic "FP8RSFT1"
   8  uint32   version 1
  12  uint32   token width in bytes (2: uint16, 4: uint32)
  16  uint64   examples E
  24  uint64   tokens N
  32  uint64   vocabulary size
  40  uint64   EOS id
  48  uint64   target tokens
  56  uint64   0 (reserved)
  64  uint64   offsets[E + 1]: example i is tokens[offsets[i] .. offsets[i+1]), offsets[0] = 0,
               offsets[E] = N
      width    tokens[N]
      uint8    targets[N]: 1 where the token is a target (a label the loss counts), else 0
The file is exactly 64 + 8 (E + 1) + (width + 1) N bytes. An example's first token is never a
target (nothing before it predicts it).

Standard library only, plus `tokenizers` for a tokenizer.json and jinja2 for chat templates."""
import array
import json
import os
import struct
import sys

MAGIC = b"FP8RSFT1"
VERSION = 1
HEADER = 64
LONG_MODES = ("truncate", "drop")


class SFTError(Exception):
    pass


class BadLine(SFTError):
    """A line that is not a usable example (file:line in the message)."""


# ---- chat templates (transformers' apply_chat_template rendering) ----

def _special_token(v):
    if isinstance(v, dict):
        return v.get("content")
    return v


def _compile(source):
    """The template compiled the way transformers compiles chat templates: a sandboxed jinja2
    environment with trim_blocks and lstrip_blocks, loop controls, a `generation` block tag,
    raise_exception, strftime_now and a tojson that does not escape HTML."""
    try:
        import jinja2
        import jinja2.ext
        import jinja2.nodes
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError:
        raise SFTError("chat templates need the Python package jinja2 (pip install jinja2, or the Debian package "
                       "python3-jinja2) for %s" % sys.executable)
    import datetime

    class Generation(jinja2.ext.Extension):
        """{% generation %}..{% endgeneration %}: record where the block's text lands in the
        output (the renderer joins the chunks it has yielded so far to know)."""
        tags = {"generation"}
        spans = None  # (chunks, spans) while a tracked render runs

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_track"), [], [], body).set_lineno(lineno)

        def _track(self, caller):
            text = caller()
            if Generation.spans is not None:
                chunks, spans = Generation.spans
                start = sum(len(c) for c in chunks)
                spans.append((start, start + len(text)))
            return text

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    try:
        tmpl = env.from_string(source)
    except jinja2.exceptions.TemplateError as e:
        raise SFTError("the chat template does not compile: %s" % e)
    return tmpl, Generation, "generation" in source and "endgeneration" in source


class ChatTemplate:
    def __init__(self, source, special):
        self.source = source
        self.special = special  # bos_token, eos_token, ... as the template sees them
        self.tmpl, self._gen, self.has_generation = _compile(source)

    @staticmethod
    def load(tokenizer_path, override=None):
        """The template transformers would use for the folder of tokenizer_path: its
        chat_template.jinja, else tokenizer_config.json's "chat_template" (override: a file with
        the template text, or a tokenizer_config.json / chat_template.json)."""
        folder = os.path.dirname(os.path.abspath(tokenizer_path))
        cfg_path = os.path.join(folder, "tokenizer_config.json")
        cfg = {}
        if os.path.exists(cfg_path):
            with open(cfg_path, encoding="utf-8") as f:
                cfg = json.load(f)
        special = {}
        for k in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
            v = _special_token(cfg.get(k))
            if v is not None:
                special[k] = v
        source = cfg.get("chat_template")
        jinja = os.path.join(folder, "chat_template.jinja")  # what save_pretrained writes now; it wins
        if os.path.exists(jinja):
            with open(jinja, encoding="utf-8") as f:
                source = f.read()
        if override:
            with open(override, encoding="utf-8") as f:
                text = f.read()
            source = text
            if override.endswith(".json"):
                source = json.loads(text).get("chat_template")
        if isinstance(source, list):  # named templates: the "default" one
            named = {t.get("name"): t.get("template") for t in source}
            source = named.get("default")
        if not source:
            raise SFTError("no chat template: neither %s nor chat_template.jinja beside it has one; give "
                           "--chat-template FILE" % cfg_path)
        return ChatTemplate(source, special)

    def render(self, messages, add_generation_prompt=False, track=False):
        """The text, and with track the (start, end) character spans of the generation blocks."""
        import jinja2
        kw = dict(self.special, messages=messages, tools=None, documents=None,
                  add_generation_prompt=add_generation_prompt)
        try:
            if not track:
                return self.tmpl.render(**kw), None
            chunks, spans = [], []
            self._gen.spans = (chunks, spans)
            try:
                for c in self.tmpl.generate(**kw):
                    chunks.append(c)
            finally:
                self._gen.spans = None
            return "".join(chunks), spans
        except jinja2.exceptions.TemplateError as e:
            raise BadLine("the chat template failed: %s" % e)

    def assistant_spans(self, messages):
        """The rendered conversation and its assistant character spans."""
        if self.has_generation:
            return self.render(messages, track=True)
        text, _ = self.render(messages)
        spans = []
        for i, m in enumerate(messages):
            if m["role"] != "assistant":
                continue
            before, _ = self.render(messages[:i], add_generation_prompt=True)
            upto, _ = self.render(messages[:i + 1])
            if not (text.startswith(upto) and upto.startswith(before)):
                raise BadLine("the chat template does not render message %d as an extension of the messages before "
                              "it, so its span is unknown; mark the assistant text with {%% generation %%} blocks" % i)
            spans.append((len(before), len(upto)))
        return text, spans


def spans_to_mask(offsets, spans):
    """1 for every token whose characters overlap a span (transformers' assistant_masks rule)."""
    mask = [0] * len(offsets)
    k = 0
    for i, (a, b) in enumerate(offsets):
        while k < len(spans) and a >= spans[k][1]:
            k += 1
        if k == len(spans):
            break
        if b > spans[k][0]:
            mask[i] = 1
    return mask


# ---- examples ----

def _check_record(rec):
    if not isinstance(rec, dict):
        raise BadLine("not a JSON object")
    if "messages" in rec:
        msgs = rec["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise BadLine("\"messages\" is not a non-empty list")
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise BadLine("message %d is not {\"role\": string, \"content\": string}" % i)
        return "messages"
    if isinstance(rec.get("prompt"), str) and isinstance(rec.get("completion"), str):
        return "prompt"
    raise BadLine("neither {\"prompt\": string, \"completion\": string} nor {\"messages\": [...]}")


class BytesEncoder:
    """Each UTF-8 byte a token, EOS 0 (prepare.py's bytes tokenizer)."""
    vocab_size = 256
    eos = 0

    def example(self, rec, train_on_prompt):
        kind = _check_record(rec)
        ids, tgt = [], []

        def add(text, is_target):
            b = text.encode("utf-8")
            ids.extend(b)
            tgt.extend([1 if is_target else 0] * len(b))

        if kind == "prompt":
            add(rec["prompt"], False)
            add(rec["completion"], True)
            last_target = True
        else:
            for m in rec["messages"]:
                a = m["role"] == "assistant"
                add(m["role"] + ": ", False)
                add(m["content"] + "\n", a)
            last_target = rec["messages"][-1]["role"] == "assistant"
        ids.append(self.eos)
        tgt.append(1 if last_target else 0)
        return ids, tgt


class HFEncoder:
    def __init__(self, tok, eos, template_path, tokenizer_path):
        self.tok = tok
        self.eos = eos
        self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
        self._path = tokenizer_path
        self._override = template_path
        self._template = None

    def template(self):
        if self._template is None:
            self._template = ChatTemplate.load(self._path, self._override)
        return self._template

    def example(self, rec, train_on_prompt):
        kind = _check_record(rec)
        if kind == "prompt":
            p = self.tok.encode(rec["prompt"], add_special_tokens=True).ids
            c = self.tok.encode(rec["completion"], add_special_tokens=False).ids
            return p + c + [self.eos], [0] * len(p) + [1] * (len(c) + 1)
        text, spans = self.template().assistant_spans(rec["messages"])
        enc = self.tok.encode(text, add_special_tokens=False)
        return list(enc.ids), spans_to_mask(enc.offsets, spans)


def read_examples(path, encoder, train_on_prompt=False, skip_bad_lines=False, stats=None, opener=None):
    """Yield (ids, targets) for each line; a bad line raises BadLine("file:line: ...") or, with
    skip_bad_lines, is counted in stats["bad_lines"]. opener(path): the binary file object to read
    (prepare.py's open_regular: regular files only), default open."""
    with (opener(path) if opener else open(path, "rb")) as f:
        for n, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                try:
                    rec = json.loads(raw.decode("utf-8"))
                except ValueError as e:  # UnicodeDecodeError is one
                    raise BadLine("not JSON (%s)" % e)
                ids, tgt = encoder.example(rec, train_on_prompt)
            except BadLine as e:
                if not skip_bad_lines:
                    raise BadLine("%s:%d: %s (--skip-bad-lines skips such lines)" % (path, n, e))
                if stats is not None:
                    stats["bad_lines"] = stats.get("bad_lines", 0) + 1
                continue
            if train_on_prompt:
                tgt = [1] * len(ids)
            if tgt:
                tgt[0] = 0  # nothing predicts an example's first token
            yield ids, tgt


OPEN_WINDOWS = 64  # runtime/io/sft_data.h FR_SFT_OPEN_WINDOWS
MAX_EXAMPLES = 63  # runtime/io/sft_data.h FR_SFT_MAX_EXAMPLES


def pack(lengths, cap):
    """The window of each example (lengths each <= cap) as the trainer packs them
    (runtime/io/sft_data.c fr_sft_pack): first fit over the last OPEN_WINDOWS windows opened,
    in file order; a new window when none has room, in tokens or in examples (MAX_EXAMPLES a
    window; the oldest open one then closes)."""
    out, open_ = [], []  # open_: [window, fill, examples], oldest first
    windows = 0
    for n in lengths:
        for w in open_:
            if w[1] + n <= cap and w[2] < MAX_EXAMPLES:
                break
        else:
            if len(open_) == OPEN_WINDOWS:
                open_.pop(0)
            w = [windows, 0, 0]
            windows += 1
            open_.append(w)
        w[1] += n
        w[2] += 1
        out.append(w[0])
    return out


def pack_count(lengths, seq):
    """Windows of seq + 1 tokens that lengths (each <= seq + 1) fill when packed (pack)."""
    return len(set(pack(lengths, seq + 1)))


def write_sft(path, examples, width, vocab, eos):
    """Write [(ids, targets)] as an SFT token file."""
    with open(path, "wb") as f:
        for data in sft_bytes(examples, width, vocab, eos):
            f.write(data)


def sft_bytes(examples, width, vocab, eos):
    """The SFT token file of [(ids, targets)], as a few bytes-like blocks in file order."""
    offs = array.array("Q", [0])
    toks = array.array("H" if width == 2 else "I")
    tgts = bytearray()
    for ids, tgt in examples:
        toks.extend(ids)
        tgts.extend(bytes(tgt))
        offs.append(len(toks))
    n_tgt = sum(tgts)
    if sys.byteorder != "little":
        offs.byteswap()
        toks.byteswap()
    yield MAGIC + struct.pack("<IIQQQQQQ", VERSION, width, len(examples), len(toks), vocab, eos, n_tgt, 0)
    yield offs.tobytes()
    yield toks.tobytes()
    yield bytes(tgts)


def read_sft(path):
    """An SFT token file as a dict: vocab_size, eos, width, examples [(ids, targets)]."""
    with open(path, "rb") as f:
        b = f.read()
    if len(b) < HEADER or b[:8] != MAGIC:
        raise SFTError("%s is not an SFT token file (no %r header)" % (path, MAGIC))
    version, width, E, N, vocab, eos, n_tgt, _ = struct.unpack("<IIQQQQQQ", b[8:HEADER])
    if version != VERSION or width not in (2, 4) or len(b) != HEADER + 8 * (E + 1) + (width + 1) * N:
        raise SFTError("%s: a damaged SFT token file (version %d, width %d, %d examples, %d tokens, %d bytes)"
                       % (path, version, width, E, N, len(b)))
    offs = struct.unpack("<%dQ" % (E + 1), b[HEADER:HEADER + 8 * (E + 1)])
    p = HEADER + 8 * (E + 1)
    toks = array.array("H" if width == 2 else "I", b[p:p + width * N])
    if sys.byteorder != "little":
        toks.byteswap()
    tg = b[p + width * N:]
    ex = [(list(toks[offs[i]:offs[i + 1]]), list(tg[offs[i]:offs[i + 1]])) for i in range(E)]
    return {"vocab_size": vocab, "eos": eos, "width": width, "examples": ex, "targets": n_tgt}
