/* Choosing the trained parameters (see select_params.h). */
#include <string.h>

#include "passes/select_params.h"

static fr_status compile_regex(const char *re, const char *what, regex_t *out)
{
    int rc = regcomp(out, re, REG_EXTENDED | REG_NOSUB);
    if (rc != 0) {
        char msg[256];
        regerror(rc, out, msg, sizeof msg);
        return fr_error(FR_ERR_INVALID_ARG, "%s regex '%s': %s", what, re, msg);
    }
    return FR_OK;
}

fr_status fr_param_filter_open(const char *train, const char *freeze, fr_param_filter *f)
{
    memset(f, 0, sizeof *f);
    if (train) {
        FR_TRY(compile_regex(train, "--train", &f->tre));
        f->have_t = 1;
    }
    if (freeze) {
        fr_status st = compile_regex(freeze, "--freeze", &f->fre);
        if (st != FR_OK) {
            fr_param_filter_close(f);
            return st;
        }
        f->have_f = 1;
    }
    return FR_OK;
}

void fr_param_filter_close(fr_param_filter *f)
{
    if (f->have_t) regfree(&f->tre);
    if (f->have_f) regfree(&f->fre);
    f->have_t = f->have_f = 0;
}

int fr_param_filter_keep(const fr_param_filter *f, const char *name)
{
    if (f->have_t && regexec(&f->tre, name, 0, NULL, 0) != 0) return 0;
    if (f->have_f && regexec(&f->fre, name, 0, NULL, 0) == 0) return 0;
    return 1;
}

fr_status fr_select_params(fr_graph *g, const char *train, const char *freeze, int *n_kept)
{
    fr_param_filter re;
    int n = 0;
    fr_status st = FR_OK;
    if (n_kept) *n_kept = 0;
    FR_TRY(fr_param_filter_open(train, freeze, &re));
    for (int i = 0; i < g->n_values; i++) {
        fr_value *v = &g->values[i];
        int keep = v->constant && (v->flags & FR_VAL_INITIALIZER) && fr_dtype_is_float(v->dtype);
        /* a constant (graph/params.h) trains only when --train names it */
        if (!(v->flags & FR_VAL_PARAM) && !(keep && re.have_t)) continue;
        if (keep) keep = fr_param_filter_keep(&re, v->name);
        if (keep && v->dtype != FR_F32) {
            st = fr_error(FR_ERR_UNSUPPORTED,
                          "parameter '%s' is %s: fp8run trains float32 master weights (convert the "
                          "model to float32, or freeze it with --freeze)",
                          v->name, fr_dtype_name(v->dtype));
            goto done;
        }
        if (keep) {
            v->flags |= FR_VAL_PARAM;
            n++;
        } else {
            v->flags &= ~FR_VAL_PARAM;
        }
    }
    if (n == 0)
        st = fr_error(FR_ERR_INVALID_ARG, "no parameter to train: the model has no float32 parameter%s "
                      "(`fp8run info` lists its float initializers and why each is not trained)",
                      re.have_t || re.have_f ? " left by --train/--freeze" : "");
    if (n_kept) *n_kept = n;
done:
    fr_param_filter_close(&re);
    return st;
}
