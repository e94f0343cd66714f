"""fp8run.sample: text from a model (an ONNX model, optionally with a checkpoint's weights), as
`fp8run sample` prints it: greedy by default, or temperature / top-p sampling.

Every new token runs the whole sequence again (no key/value cache): one forward pass of
prompt + max_new_tokens positions per token, so a reply of N tokens costs N full forward
passes. Fine for checking that fine-tuning worked; not a serving path."""
import numpy as np


def pick(logits, temperature, top_p, rng):
    """The next token from one row of logits: argmax at temperature 0, else a draw from the
    softmax at that temperature restricted to the smallest set of tokens whose probability
    reaches top_p."""
    if temperature <= 0:
        return int(np.argmax(logits))
    z = logits.astype(np.float64) / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    keep = order[:int(np.searchsorted(np.cumsum(p[order]), top_p) + 1)]
    q = p[keep] / p[keep].sum()
    return int(keep[rng.choice(len(keep), p=q)])


def sample(model, prompt, *, tokenizer="bytes", max_new_tokens=64, temperature=0.0, top_p=1.0, seed=0, chat=False,
           chat_template=None, checkpoint=None, backend="auto", eos=None, **config):
    """Generate after `prompt` (text) and return the new text. model: a Model or an ONNX path
    (checkpoint: a training checkpoint whose weights it takes); tokenizer: "bytes" (each UTF-8
    byte a token, EOS 0) or a tokenizer.json; chat: render the prompt as a user message with the
    chat template (bytes: "user: PROMPT\\nassistant: "). Stops at EOS or after max_new_tokens."""
    from . import Model, Session
    from . import tokens as tok
    if not isinstance(model, Model):
        model = Model(model)
    if checkpoint:
        model.apply_checkpoint(checkpoint)
    if tokenizer == "bytes":
        text = "user: %s\nassistant: " % prompt if chat else prompt
        ids, stop = list(text.encode("utf-8")), 0
    else:
        ids, stop = tok.encode(tokenizer, prompt, chat, chat_template)
    if eos is not None:
        stop = eos
    seq = len(ids) + max_new_tokens
    sess = Session(model, 1, seq, backend=backend, eval_only=1, **config)
    window = np.zeros((1, seq + 1), dtype=np.int64)
    window[0, :len(ids)] = ids
    rng = np.random.RandomState(seed)
    new = []
    for i in range(len(ids), seq):
        sess.eval(window)  # causal: the positions after i do not change row i - 1
        nxt = pick(sess.output()[0, i - 1], temperature, top_p, rng)
        if nxt == stop:
            break
        new.append(nxt)
        window[0, i] = nxt
    sess.close()
    if tokenizer == "bytes":
        return bytes(new).decode("utf-8", errors="replace")
    return tok.decode(tokenizer, new)
