/* Many trained parameters written in one host round trip (see train_params.h). */
#include "runtime/train/train_params.h"

#include <stdlib.h>
#include <string.h>

#include "runtime/train/train_internal.h"

static const tr_orig *find_orig(const fr_trainer *t, const char *name)
{
    for (int i = 0; name && i < t->n_orig; i++)
        if (strcmp(t->orig[i].name, name) == 0) return &t->orig[i];
    return NULL;
}

fr_status fr_trainer_fill_params(fr_trainer *t, int n, const char *const *names,
                                 fr_status (*fill)(void *ctx, int i, float *dst), void *ctx)
{
    int64_t tmp_numel = 0;
    for (int i = 0; i < n; i++) {
        const tr_orig *o = find_orig(t, names[i]);
        if (!o) return fr_error(FR_ERR_INVALID_ARG, "'%s' is not a parameter this trainer trains", names[i]);
        if (o->fused && o->numel > tmp_numel) tmp_numel = o->numel;
    }
    float *tmp = tmp_numel ? fr_malloc((size_t)tmp_numel * sizeof *tmp, "parameter buffer") : NULL;
    if (tmp_numel && !tmp) return FR_ERR_OOM;
    fr_status st = tr_sync_host(t);
    if (st != FR_OK) { /* nothing written: the device keeps what it has */
        free(tmp);
        return st;
    }
    int fused = 0;
    for (int i = 0; i < n && st == FR_OK; i++) {
        const tr_orig *o = find_orig(t, names[i]);
        float *dst = t->g->values[t->params[o->param].value].constant->data;
        if (!o->fused) {
            st = fill(ctx, i, dst); /* straight into the parameter */
            continue;
        }
        st = fill(ctx, i, tmp);
        if (st == FR_OK) tr_slice_copy(o->fused, o->slice, dst, tmp, 0); /* its slice of the fused one */
        fused = 1;
    }
    free(tmp);
    /* the original initializers of fused parameters follow (export) */
    fr_status s2 = fused ? fr_fp8_sync_params(t->g, &t->report, 1) : FR_OK;
    if (st == FR_OK) st = s2;
    s2 = tr_sync_device(t);
    return st != FR_OK ? st : s2;
}
