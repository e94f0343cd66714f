"""fp8run.train: the training loop of `fp8run train` from Python, on a Model (or an ONNX path,
or fp8run.from_torch's result), writing the same JSONL log (fp8run.plot draws it)."""
import json
import math
import os
import time

from .progress import Progress


def _num(v):
    return v if isinstance(v, (int, float)) and math.isfinite(v) else None


def train(model, data, *, steps, batch, seq, lr, val=None, val_every=0, val_batches=20, log=None, log_fp8=0,
          progress=True, backend="auto", token_dtype="uint16", seed=0, export=None, save=None, packing=True,
          **config):
    """Train `model` (a Model or an ONNX path) on the token file `data` (fp8run prepare's output)
    for `steps` steps of batch x seq tokens, as `fp8run train` does. Options mirror the CLI:
    val (a validation token file) every val_every steps (and at the end) over val_batches
    batches; log (JSONL: step, loss, lr, grad_norm, tokens_per_s, skipped; val_loss; every
    log_fp8 steps the FP8 statistics); progress (a Progress line); export (ONNX) and save (a
    checkpoint) at the end. An SFT token file (prepare(..., sft=True)) trains on its target
    tokens only (the Session is made with sft=1; packing=False puts one example per window) and
    logs target_tokens per step. Other keywords are Session options (precision="fp8", warmup_steps,
    lr_schedule, min_lr, grad_clip, optimizer, weight_decay, ...). Returns the Session (its
    .history: the logged records)."""
    from . import DataLoader, Model, Session, is_sft_file
    if not isinstance(model, Model):
        model = Model(model)
    config.setdefault("total_steps", steps)
    sft = is_sft_file(data)
    if sft:
        config["sft"] = 1
        config["packing"] = "on" if packing else "off"  # the attention's promise (seg_form)
        if packing and "sft_max_examples" not in config:  # the GPU attention's slots, sized to the data
            most = 0
            for f in [data] + ([val] if val else []):
                d = DataLoader(f, 1, seq, order="sequential", packing=True)
                most = max(most, d.sft_info["max_examples"])
                d.close()
            config["sft_max_examples"] = most
    sess = Session(model, batch, seq, backend=backend, lr=lr, seed=seed, **config)
    if sft and packing and not sess.sft_positions:
        import warnings
        warnings.warn("packing: this model computes absolute positions inside its graph (no position_ids input, no "
                      "rotary embedding), so a packed example sees positions offset by the examples before it; "
                      "packing=False gives each example its own", stacklevel=2)
    k = sess.grad_accum
    dl = DataLoader(data, batch, seq, seed=seed, token_dtype=token_dtype, vocab_size=sess.vocab, packing=packing)
    vl = DataLoader(val, batch, seq, token_dtype=token_dtype, vocab_size=sess.vocab,
                    validation_batches=val_batches, packing=packing) if val else None
    sess.history = []
    out = open(log, "w") if log else None
    bar = Progress(steps, "train", mode="auto" if progress else "off")

    def record(r):
        sess.history.append(r)
        if out:
            out.write(json.dumps(r) + "\n")
            out.flush()

    def validate(step):
        vl.reset()
        if sft:  # the mean over every target token, not over batches
            parts = [sess.eval_sft(*vl.next_sft()[:3]) for _ in range(vl.batches_per_epoch)]
            v = sum(l * n for l, n in parts) / max(1, sum(n for _, n in parts))
        else:
            losses = [sess.eval(vl.next()) for _ in range(vl.batches_per_epoch)]
            v = sum(losses) / len(losses)
        bar.write("step %d: val loss %.4f (perplexity %.2f)" % (step, v, math.exp(min(v, 700))))
        record({"step": step, "val_loss": _num(v)})

    try:
        train_s = 0.0
        for i in range(1, steps + 1):
            extra = {}
            if sft:
                w, segs, tgts, n_targets = dl.next_sft(k)
                extra = {"target_tokens": n_targets}
            else:
                w = dl.next(k if k > 1 else None)
            t = time.perf_counter()
            loss = sess.train_step_sft(w, segs, tgts) if sft else sess.train_step(w)
            train_s += time.perf_counter() - t
            st = sess.last_stats
            tps = i * k * batch * seq / train_s if train_s > 0 else None
            record(dict({"step": i, "loss": _num(loss), "lr": _num(st.lr), "grad_norm": _num(st.grad_norm),
                         "tokens_per_s": _num(tps), "skipped": st.skipped}, **extra))
            bar.update(1, loss=loss, lr=st.lr)
            if log_fp8 and i % log_fp8 == 0:
                stats = sess.fp8_stats()
                if stats:
                    record({"step": i, "fp8": stats})
            if vl and (val_every and i % val_every == 0 or i == steps):
                validate(i)
    finally:
        bar.close()
        if out:
            out.close()
        dl.close()
        if vl:
            vl.close()
    if export:
        sess.export(export)
    if save:
        sess.save(os.fspath(save))
    return sess
