"""Text to token ids and back for `fp8run sample` with a tokenizer.json (the C CLI runs this
file as a script, as it runs prepare.py): the prompt as ids, optionally rendered with the chat
template first (a user message and the assistant's generation prompt, as
apply_chat_template(..., add_generation_prompt=True) gives it), and ids back to text.

    tokens.py encode --tokenizer tokenizer.json [--chat-template FILE] [--chat] TEXT
        prints the ids, space-separated, then a line "eos ID"
    tokens.py decode --tokenizer tokenizer.json < ids
        prints the text of the ids read (whitespace-separated)
"""
import argparse
import importlib.util
import os
import sys


def _sibling(name):
    here = os.path.dirname(os.path.abspath(__file__))
    spec = importlib.util.spec_from_file_location("_fp8run_" + name, os.path.join(here, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def encode(tokenizer, text, chat=False, chat_template=None):
    """(ids, eos) of text, rendered as a user turn with the chat template when chat."""
    prep = _sibling("prepare")
    hf = prep._HF(tokenizer)
    if chat:
        sft = _sibling("sft")
        tmpl = sft.ChatTemplate.load(tokenizer, chat_template)
        rendered, _ = tmpl.render([{"role": "user", "content": text}], add_generation_prompt=True)
        ids = hf.tok.encode(rendered, add_special_tokens=False).ids
    else:
        ids = hf.tok.encode(text, add_special_tokens=True).ids
    return list(ids), hf.eos()


def decode(tokenizer, ids):
    prep = _sibling("prepare")
    return prep._HF(tokenizer).tok.decode(ids, skip_special_tokens=False)


def main(argv=None):
    p = argparse.ArgumentParser(prog="fp8run sample (tokens)")
    p.add_argument("what", choices=("encode", "decode"))
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--chat", action="store_true")
    p.add_argument("--chat-template")
    p.add_argument("text", nargs="?")
    a = p.parse_intermixed_args(argv)
    try:
        if a.what == "encode":
            ids, eos = encode(a.tokenizer, a.text or "", a.chat, a.chat_template)
            sys.stdout.write(" ".join(map(str, ids)) + "\neos %d\n" % eos)
        else:
            ids = [int(x) for x in sys.stdin.read().split()]
            sys.stdout.write(decode(a.tokenizer, ids))
    except Exception as e:  # every failure is one line naming it, as the CLI's errors are
        print("fp8run: error: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
