/* fr_trainer_config_json (trainer.h): the trainer's options as the checkpoint's "config" JSON. */
#include <string.h>

#include "graph/strbuf.h"
#include "runtime/train/train_internal.h"

/* ---- the options as JSON (checkpoint "config" entry) ---- */

static void jb_quoted(fr_strbuf *b, const char *v)
{
    fr_strbuf_printf(b, "\"");
    for (const unsigned char *p = (const unsigned char *)v; *p; p++) {
        if (*p == '"' || *p == '\\')
            fr_strbuf_printf(b, "\\%c", *p);
        else if (*p < 0x20)
            fr_strbuf_printf(b, "\\u%04x", *p);
        else
            fr_strbuf_printf(b, "%c", *p);
    }
    fr_strbuf_printf(b, "\"");
}

static void jb_str(fr_strbuf *b, const char *key, const char *v)
{
    fr_strbuf_printf(b, "\"%s\": ", key);
    if (v)
        jb_quoted(b, v);
    else
        fr_strbuf_printf(b, "null");
}

fr_status fr_trainer_config_json(const fr_trainer *t, char **json)
{
    const fr_train_options *o = &t->opt;
    fr_strbuf b = FR_STRBUF_INIT;
    fr_strbuf_printf(&b, "{");
    jb_str(&b, "model", t->model_path);
    fr_strbuf_printf(&b, ", \"batch\": %lld, \"seq_len\": %lld, ", (long long)o->batch, (long long)o->seq_len);
    jb_str(&b, "tokens_input", fr_trainer_tokens_input(t));
    fr_strbuf_printf(&b, ", ");
    jb_str(&b, "logits_output", t->logits_name);
    fr_strbuf_printf(&b, ", ");
    jb_str(&b, "loss_output", o->loss_output);
    fr_strbuf_printf(&b, ", \"ignore_index\": %lld, ", (long long)o->ignore_index);
    jb_str(&b, "train", o->train_regex);
    fr_strbuf_printf(&b, ", ");
    jb_str(&b, "freeze", o->freeze_regex);
    fr_strbuf_printf(&b, ", \"dims\": {");
    for (int i = 0; i < o->n_dims; i++) {
        if (i) fr_strbuf_printf(&b, ", ");
        jb_quoted(&b, o->dims[i].name);
        fr_strbuf_printf(&b, ": %lld", (long long)o->dims[i].value);
    }
    fr_strbuf_printf(&b, "}, ");
    jb_str(&b, "precision", o->precision);
    if (strcmp(o->precision, "fp32") != 0) {
        fr_strbuf_printf(&b, ", \"fp8\": {");
        jb_str(&b, "recipe", o->fp8.recipe);
        fr_strbuf_printf(&b, ", ");
        jb_str(&b, "format", o->fp8.fp8_format);
        fr_strbuf_printf(&b, ", \"bf16_boundary\": %d, ", o->fp8.bf16_boundary);
        jb_str(&b, "exclude", o->fp8.fp8_exclude);
        fr_strbuf_printf(&b, ", \"fuse\": %d, \"pad_multiple\": %d, \"margin\": %d, \"amax_history\": %d, "
                      "\"amax_algo\": \"%s\", \"interval\": %d}",
                  o->fp8.fuse, o->fp8.pad_multiple, o->fp8.margin, o->fp8.amax_history_len,
                  fr_amax_algo_name(o->fp8.amax_algo), o->fp8.interval);
    }
    const fr_opt_config *c = &o->opt;
    fr_strbuf_printf(&b, ", \"optimizer\": {\"kind\": \"%s\", \"weight_decay\": %.17g, \"beta1\": %.17g, "
                  "\"beta2\": %.17g, \"eps\": %.17g, \"momentum\": %.17g, \"dampening\": %.17g, "
                  "\"nesterov\": %d, \"decay_1d\": %d, \"state_dtype\": \"%s\", \"master_weights\": \"%s\"}",
              c->kind == FR_OPT_SGD ? "sgd" : "adamw", c->weight_decay, c->beta1, c->beta2, c->eps,
              c->momentum, c->dampening, c->nesterov, c->decay_1d, fr_lowp_state_name(c->state_dtype),
              c->master_bf16 ? "bf16" : "fp32");
    fr_strbuf_printf(&b, ", \"lr\": {\"schedule\": \"%s\", \"max_lr\": %.17g, \"min_lr\": %.17g, "
                  "\"warmup\": %lld, \"total\": %lld}",
              fr_lr_kind_name(o->lr.kind), o->lr.max_lr, o->lr.min_lr, (long long)o->lr.warmup_steps,
              (long long)o->lr.total_steps);
    if (o->lora.rank > 0) { /* read back by tr_lora_merge_ckpt (export of a checkpoint) */
        fr_strbuf_printf(&b, ", \"lora\": {\"rank\": %d, \"alpha\": %.17g, ", o->lora.rank, o->lora.alpha);
        jb_str(&b, "targets", o->lora.targets);
        fr_strbuf_printf(&b, "}");
    }
    fr_strbuf_printf(&b, ", \"grad_clip\": %.17g, \"grad_accum\": %d, \"seed\": %llu, \"max_bad_steps\": %d}",
              o->grad_clip, o->grad_accum, (unsigned long long)o->seed, o->max_bad_steps);
    if (b.oom) {
        fr_strbuf_free(&b);
        return fr_error(FR_ERR_OOM, "out of memory writing the trainer's configuration");
    }
    *json = b.s; /* never NULL: "{" was appended */
    return FR_OK;
}
