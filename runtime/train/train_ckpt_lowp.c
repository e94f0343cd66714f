/* Trainer checkpoints of low-precision AdamW state and bf16 master weights (format
 * "fp8run-trainer-2"; runtime/train/train_ckpt.c writes the rest). The state is stored exactly as the
 * optimizer holds it (runtime/train/optim_lowp.h), per optimizer parameter in the optimizer's layout
 * (a fused parameter under its fused name), since fp8 blocks of a fused parameter do not split
 * into its members:
 *   tensors (optimizer parameter name, <slot>)         BF16, or U8 E4M3 codes, parameter's dims
 *           (optimizer parameter name, <slot>.scale)   fp8: F32 [ceil(numel / 128)] block scales
 *   entries "optim.state_dtype" = fp32|bf16|fp8, "optim.master_weights" = fp32|bf16.
 * Resuming with another state dtype is refused, naming the flag that matches the file. */
#include <stdio.h>
#include <string.h>

#include "runtime/io/checkpoint.h"
#include "runtime/train/train_internal.h"

static const char *master_name(int bf16) { return bf16 ? "bf16" : "fp32"; }

int tr_ckpt_lowp_used(const fr_trainer *t)
{
    if (!t->optim) return 0;
    const fr_opt_config *c = fr_optimizer_config(t->optim);
    return c->state_dtype != FR_OPT_STATE_F32 || c->master_bf16;
}

fr_status tr_ckpt_write_lowp(fr_trainer *t, fr_ckpt_writer *w)
{
    if (!tr_ckpt_lowp_used(t)) return FR_OK;
    const fr_opt_config *c = fr_optimizer_config(t->optim);
    const char *sd = fr_lowp_state_name(c->state_dtype), *mw = master_name(c->master_bf16);
    FR_TRY(fr_ckpt_write_entry(w, "optim.state_dtype", sd, strlen(sd)));
    FR_TRY(fr_ckpt_write_entry(w, "optim.master_weights", mw, strlen(mw)));
    if (c->state_dtype == FR_OPT_STATE_F32) return FR_OK; /* train_ckpt.c wrote it */
    fr_dtype dt = c->state_dtype == FR_OPT_STATE_BF16 ? FR_BF16 : FR_U8;
    for (int s = 0; s < fr_optimizer_state_count(t->optim); s++)
        for (int i = 0; i < fr_optimizer_param_count(t->optim); i++) {
            const fr_opt_param *p = fr_optimizer_param(t->optim, i);
            const char *slot = fr_optimizer_state_name(t->optim, s);
            float *scales;
            const void *raw = fr_optimizer_state_raw(t->optim, i, s, &scales);
            FR_TRY(fr_ckpt_write_tensor(w, p->name, slot, dt, p->rank, p->dims, raw));
            if (!scales) continue;
            char kind[64];
            snprintf(kind, sizeof kind, "%s.scale", slot);
            int64_t nb = (fr_optimizer_param_numel(t->optim, i) + FR_LOWP_BLOCK - 1) / FR_LOWP_BLOCK;
            FR_TRY(fr_ckpt_write_tensor(w, p->name, kind, FR_F32, 1, &nb, scales));
        }
    return FR_OK;
}

/* The text of entry key, or `dflt` when the file has none (a format-1 file). */
static fr_status entry_text(const fr_ckpt *c, const char *key, const char *dflt, char *buf, size_t cap)
{
    const void *v;
    size_t len;
    if (fr_ckpt_entry(c, key, &v, &len) != FR_OK) {
        fr_clear_error();
        snprintf(buf, cap, "%s", dflt);
        return FR_OK;
    }
    if (len >= cap) return fr_error(FR_ERR_PARSE, "checkpoint '%s': entry '%s' is too long", fr_ckpt_path(c), key);
    memcpy(buf, v, len);
    buf[len] = '\0';
    return FR_OK;
}

/* One stored slot: dtype and dims must be exactly the optimizer's. */
static fr_status find_exact(const fr_ckpt *c, const char *name, const char *kind, fr_dtype dt, int rank,
                            const int64_t *dims, size_t nbytes, const fr_ckpt_tensor **out)
{
    const fr_ckpt_tensor *ct = fr_ckpt_find(c, name, kind);
    if (!ct)
        return fr_error(FR_ERR_INVALID_ARG,
                        "checkpoint '%s' has no %s tensor for optimizer parameter '%s' (low-precision optimizer "
                        "state is stored per parameter as this run fuses them: resume with the same --precision "
                        "and fusion options)",
                        fr_ckpt_path(c), kind, name);
    int same = ct->dtype == dt && ct->rank == rank && ct->nbytes == nbytes;
    for (int d = 0; same && d < rank; d++) same = ct->dims[d] == dims[d];
    if (!same)
        return fr_error(FR_ERR_SHAPE, "checkpoint '%s': %s of '%s' is %s with %zu bytes, the optimizer's is %s",
                        fr_ckpt_path(c), kind, name, fr_dtype_name(ct->dtype), ct->nbytes, fr_dtype_name(dt));
    *out = ct;
    return FR_OK;
}

fr_status tr_ckpt_check_lowp(fr_trainer *t, const fr_ckpt *c)
{
    if (!t->optim) return FR_OK;
    const fr_opt_config *oc = fr_optimizer_config(t->optim);
    char sd[16], mw[16];
    FR_TRY(entry_text(c, "optim.state_dtype", "fp32", sd, sizeof sd));
    FR_TRY(entry_text(c, "optim.master_weights", "fp32", mw, sizeof mw));
    const char *want = fr_lowp_state_name(oc->state_dtype);
    if (strcmp(sd, want) != 0)
        return fr_error(FR_ERR_INVALID_ARG,
                        "checkpoint '%s' holds %s optimizer state and this run keeps %s: resume with "
                        "--optimizer-state %s (the state is not converted)",
                        fr_ckpt_path(c), sd, want, sd);
    if (strcmp(mw, master_name(oc->master_bf16)) != 0)
        return fr_error(FR_ERR_INVALID_ARG,
                        "checkpoint '%s' was trained with %s master weights and this run keeps %s: resume with "
                        "--master-weights %s",
                        fr_ckpt_path(c), mw, master_name(oc->master_bf16), mw);
    return FR_OK;
}

fr_status tr_ckpt_load_lowp(fr_trainer *t, const fr_ckpt *c)
{
    if (!t->optim || fr_optimizer_state_dtype(t->optim) == FR_OPT_STATE_F32) return FR_OK;
    const int fp8 = fr_optimizer_state_dtype(t->optim) == FR_OPT_STATE_FP8;
    for (int s = 0; s < fr_optimizer_state_count(t->optim); s++)
        for (int i = 0; i < fr_optimizer_param_count(t->optim); i++) {
            const fr_opt_param *p = fr_optimizer_param(t->optim, i);
            const char *slot = fr_optimizer_state_name(t->optim, s);
            int64_t n = fr_optimizer_param_numel(t->optim, i), nb = (n + FR_LOWP_BLOCK - 1) / FR_LOWP_BLOCK;
            float *scales;
            void *raw = fr_optimizer_state_raw(t->optim, i, s, &scales);
            const fr_ckpt_tensor *ct;
            FR_TRY(find_exact(c, p->name, slot, fp8 ? FR_U8 : FR_BF16, p->rank, p->dims,
                              (size_t)n * (fp8 ? 1u : 2u), &ct));
            memcpy(raw, ct->data, ct->nbytes);
            if (!fp8) continue;
            char kind[64];
            snprintf(kind, sizeof kind, "%s.scale", slot);
            FR_TRY(find_exact(c, p->name, kind, FR_F32, 1, &nb, (size_t)nb * sizeof(float), &ct));
            memcpy(scales, ct->data, ct->nbytes);
        }
    return FR_OK;
}
