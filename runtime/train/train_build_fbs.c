/* A compiled graph (.fbs) as the trainer takes it: the options the compile fixed are adopted
 * from its spec (a conflicting option is an error naming it), and --train/--freeze narrow its
 * recorded parameters (a fused parameter is trained only whole). Used by train_build.c. */
#include <stdlib.h>
#include <string.h>

#include "passes/select_params.h"
#include "runtime/io/fbs.h"
#include "runtime/train/train_internal.h"

/* Replace a trainer-owned option string. */
static fr_status set_str(char **owned, const char **field, const char *v)
{
    char *d = NULL;
    if (v && !(d = fr_strdup(v, "trainer options"))) return FR_ERR_OOM;
    free(*owned);
    *owned = d;
    *field = d;
    return FR_OK;
}

/* The options a compiled graph fixes must agree with the trainer's; the rest come from it. */
fr_status tr_adopt_spec(fr_trainer *t, const fr_fbs_spec *s, const char *path)
{
    fr_train_options *o = &t->opt;
    if (o->lora.rank > 0)
        return fr_error(FR_ERR_UNSUPPORTED, "'%s' is a compiled graph: LoRA (--lora-rank) trains an ONNX model", path);
    if (o->batch != s->batch || o->seq_len != s->seq)
        return fr_error(FR_ERR_INVALID_ARG,
                        "'%s' is compiled for batch %lld x seq %lld (a compiled graph is specialized to "
                        "its shapes), but batch %lld x seq %lld was asked for: recompile it with "
                        "`fp8run compile MODEL -o %s --batch %lld --seq %lld`, or train the ONNX model",
                        path, (long long)s->batch, (long long)s->seq, (long long)o->batch, (long long)o->seq_len,
                        path, (long long)o->batch, (long long)o->seq_len);
    if (strcmp(o->precision, "fp32") != 0 && strcmp(o->precision, s->fp8.precision) != 0)
        return fr_error(FR_ERR_INVALID_ARG, "'%s' is compiled for precision %s, but %s was asked for: recompile "
                        "it with --precision %s", path, s->fp8.precision, o->precision, o->precision);
    if (o->tokens_input && strcmp(o->tokens_input, s->tokens_input) != 0)
        return fr_error(FR_ERR_INVALID_ARG, "'%s' was compiled with tokens input '%s', not '%s'", path,
                        s->tokens_input, o->tokens_input);
    for (int i = 0; i < o->n_dims; i++) {
        int same = 0;
        for (int j = 0; j < s->n_dims && !same; j++)
            same = strcmp(s->dims[j].name, o->dims[i].name) == 0 && s->dims[j].value == o->dims[i].value;
        if (!same)
            return fr_error(FR_ERR_INVALID_ARG, "'%s' is compiled with its dims fixed; --dim %s=%lld was not one "
                            "of them: recompile with it", path, o->dims[i].name, (long long)o->dims[i].value);
    }
    /* precision and recipe options are the file's (fp8 options given to the trainer are
       ignored: the graph was built with these) */
    FR_TRY(set_str(&t->s_precision, &o->precision, s->fp8.precision));
    fr_fp8_options fo = s->fp8;
    FR_TRY(set_str(&t->s_recipe, &fo.recipe, s->fp8.recipe));
    FR_TRY(set_str(&t->s_format, &fo.fp8_format, s->fp8.fp8_format));
    FR_TRY(set_str(&t->s_exclude, &fo.fp8_exclude, s->fp8.fp8_exclude));
    fo.precision = o->precision;
    o->fp8 = fo;
    FR_TRY(set_str(&t->s_tokens, &o->tokens_input, s->tokens_input));
    if (!o->loss_output && s->loss_output) FR_TRY(set_str(&t->s_loss, &o->loss_output, s->loss_output));
    if (!o->logits_output && s->logits_output) FR_TRY(set_str(&t->s_logits, &o->logits_output, s->logits_output));
    if (!o->train_regex && s->train_regex) FR_TRY(set_str(&t->s_train, &o->train_regex, s->train_regex));
    if (!o->freeze_regex && s->freeze_regex) FR_TRY(set_str(&t->s_freeze, &o->freeze_regex, s->freeze_regex));
    return FR_OK;
}

/* --train / --freeze on a compiled graph narrow its recorded parameters, by original names: a
 * fused parameter is trained when all its members are, frozen when none is. */
fr_status tr_narrow_params(fr_trainer *t, fr_graph *g)
{
    fr_param_filter re;
    FR_TRY(fr_param_filter_open(t->opt.train_regex, t->opt.freeze_regex, &re));
    fr_status st = FR_OK;
    int n = 0;
    for (int i = 0; i < g->n_values && st == FR_OK; i++) {
        fr_value *v = &g->values[i];
        if (!(v->flags & FR_VAL_PARAM)) continue;
        const fr_fp8_fused *f = NULL;
        for (int k = 0; k < t->report.n_fused && !f; k++)
            if (t->report.fused[k].value == i) f = &t->report.fused[k];
        int keep = f ? 0 : fr_param_filter_keep(&re, v->name);
        for (int j = 0; f && j < f->n_slices; j++) keep += fr_param_filter_keep(&re, f->slices[j].name);
        if (f && keep != 0 && keep != f->n_slices)
            st = fr_error(FR_ERR_INVALID_ARG, "--train/--freeze select some but not all of the Linears fused into "
                          "'%s' in the compiled graph: recompile with the same --train/--freeze, or with --no-fuse",
                          f->name);
        if (keep)
            n++;
        else
            v->flags &= ~FR_VAL_PARAM;
    }
    if (st == FR_OK && n == 0) st = fr_error(FR_ERR_INVALID_ARG, "no parameter to train is left by --train/--freeze");
    fr_param_filter_close(&re);
    return st;
}
