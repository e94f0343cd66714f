#!/usr/bin/env python3
"""Write tests/fixtures/sft/: a tiny real tokenizer and chat data with the token ids and
assistant masks that transformers' apply_chat_template gives, for python/tests/test_sft.py.

Needs `tokenizers` and `transformers` (pip install; no hub download: the tokenizer is trained
here on a few sentences):

    python3 tools/gen_sft_fixture.py

Files:
  tokenizer.json          a byte-level BPE (vocab 200, so that the ids fit the HF Llama fixture's
                          211) trained on the chats' own text, with the special tokens
                          <|begin|>, <|im_start|>, <|im_end|>, <|endoftext|>
  tokenizer_config.json   bos/eos tokens and a ChatML chat template whose assistant turns are
                          {% generation %} blocks (transformers' return_assistant_tokens_mask)
  plain_template.jinja    the same template without the generation blocks (fp8run finds the
                          assistant spans by rendering prefixes); it renders the same text
  chat.jsonl              conversations (system, multi-turn, non-ASCII, an assistant turn first,
                          and short question/answer pairs)
  expected.json           per line: input_ids and assistant_masks from
                          apply_chat_template(messages, tokenize=True, return_dict=True,
                          return_assistant_tokens_mask=True)
"""
import json
import os

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "sft")
SPECIAL = ["<|endoftext|>", "<|begin|>", "<|im_start|>", "<|im_end|>"]
QA = [("What is the capital of France?", "Paris."), ("Count to three.", "one, two, three"),
      ("What scales an fp8 tensor?", "Its amax."), ("Say hello.", "Hello!"), ("What flows backward?", "Gradients."),
      ("Name a color.", "Blue."), ("Two plus two?", "Four."), ("Is fp8 small?", "Yes, one byte."),
      ("What comes after Monday?", "Tuesday."), ("Spell cat.", "c, a, t"), ("Ça va?", "Très bien, merci."),
      ("Largest planet?", "Jupiter.")]
TAGGED = ("{{ bos_token }}{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' }}"
          "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] + '<|im_end|>\\n' }}{% endgeneration %}"
          "{% else %}{{ m['content'] + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
PLAIN = TAGGED.replace("{% generation %}", "").replace("{% endgeneration %}", "")

SHORT = [[{"role": "user", "content": q}, {"role": "assistant", "content": a}] for q, a in QA]
CHATS = [
    [{"role": "user", "content": "What is the capital of France?"},
     {"role": "assistant", "content": "The capital of France is Paris."}],
    [{"role": "system", "content": "You are a helpful assistant. Answer briefly."},
     {"role": "user", "content": "Count to five."},
     {"role": "assistant", "content": "one, two, three, four, five"},
     {"role": "user", "content": "Héllo wörld?"},
     {"role": "assistant", "content": "Très bien, merci."}],
    [{"role": "assistant", "content": "Gradients flow backward."},
     {"role": "user", "content": "Through what?"},
     {"role": "assistant", "content": "The attention and the MLP of every layer."}],
] + SHORT
CORPUS = [m["content"] for c in CHATS for m in c] * 3 + ["<|im_start|>user\n", "<|im_end|>\n", "assistant\n",
                                                         "system\n"] * 3


def main():
    os.makedirs(OUT, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # the alphabet is the corpus's own characters (the 256 bytes alone would not fit 200 ids)
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=200, special_tokens=SPECIAL))
    tok.save(os.path.join(OUT, "tokenizer.json"))
    cfg = {"bos_token": "<|begin|>", "eos_token": "<|endoftext|>", "chat_template": TAGGED,
           "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 256}
    with open(os.path.join(OUT, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    with open(os.path.join(OUT, "plain_template.jinja"), "w") as f:
        f.write(PLAIN)
    hf = PreTrainedTokenizerFast(tokenizer_file=os.path.join(OUT, "tokenizer.json"), bos_token="<|begin|>",
                                 eos_token="<|endoftext|>")
    hf.chat_template = TAGGED
    expected = []
    with open(os.path.join(OUT, "chat.jsonl"), "w", encoding="utf-8") as f:
        for msgs in CHATS:
            f.write(json.dumps({"messages": msgs}, ensure_ascii=False) + "\n")
            out = hf.apply_chat_template(msgs, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
            plain = hf.apply_chat_template(msgs, tokenize=True, chat_template=PLAIN, return_dict=True)
            assert list(plain["input_ids"]) == list(out["input_ids"])
            expected.append({"input_ids": list(out["input_ids"]), "assistant_masks": list(out["assistant_masks"])})
            assert sum(expected[-1]["assistant_masks"]) > 0
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump({"transformers": __import__("transformers").__version__,
                   "tokenizers": __import__("tokenizers").__version__, "examples": expected}, f)


if __name__ == "__main__":
    main()
