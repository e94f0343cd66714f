/* AdamW / SGD on FP32 host buffers, gradient clipping and accumulation helpers.
 * The per-element formulas and their float32 rounding order are documented in optimizer.h. */
#include "runtime/train/optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct fr_optimizer {
    fr_opt_config cfg;
    int n;
    fr_opt_param *params; /* names owned (strdup) */
    int64_t *numel;
    unsigned char *decays; /* resolved weight-decay flag per parameter */
    int slots;
    void **state;         /* state[i * slots + s] points into `arena` (dtype cfg.state_dtype) */
    float **scales;       /* fp8: its block scales, into `scale_arena` */
    unsigned char *arena;
    float *scale_arena;
    int64_t steps;
    size_t state_bytes;   /* what the two arenas hold */
};

fr_opt_config fr_opt_config_adamw(void)
{
    fr_opt_config c;
    memset(&c, 0, sizeof c);
    c.kind = FR_OPT_ADAMW;
    c.weight_decay = 0.01;
    c.beta1 = 0.9;
    c.beta2 = 0.999;
    c.eps = 1e-8;
    return c;
}

fr_opt_config fr_opt_config_sgd(void)
{
    fr_opt_config c;
    memset(&c, 0, sizeof c);
    c.kind = FR_OPT_SGD;
    return c;
}

static fr_status check_config(const fr_opt_config *c)
{
    if (c->kind != FR_OPT_ADAMW && c->kind != FR_OPT_SGD)
        return fr_error(FR_ERR_INVALID_ARG, "optimizer: unknown kind %d (expected AdamW or SGD)",
                        (int)c->kind);
    if (!isfinite(c->weight_decay) || c->weight_decay < 0)
        return fr_error(FR_ERR_INVALID_ARG, "optimizer: weight_decay %g must be finite and >= 0",
                        c->weight_decay);
    if (c->kind == FR_OPT_ADAMW) {
        if (!(c->beta1 >= 0 && c->beta1 < 1))
            return fr_error(FR_ERR_INVALID_ARG, "AdamW: beta1 %g must be in [0, 1)", c->beta1);
        if (!(c->beta2 >= 0 && c->beta2 < 1))
            return fr_error(FR_ERR_INVALID_ARG, "AdamW: beta2 %g must be in [0, 1)", c->beta2);
        /* eps keeps the update's denominator away from 0 (in float32, as the kernels use it):
         * 0 divides a parameter whose gradient stayed 0 by 0 and trains NaN into it */
        if (!isfinite(c->eps) || !((float)c->eps > 0))
            return fr_error(FR_ERR_INVALID_ARG, "AdamW: eps %g must be finite and > 0 (also as a float32)", c->eps);
        if (!fr_lowp_state_name(c->state_dtype))
            return fr_error(FR_ERR_INVALID_ARG, "AdamW: unknown state dtype %d", (int)c->state_dtype);
    } else {
        if (c->state_dtype != FR_OPT_STATE_F32 || c->master_bf16)
            return fr_error(FR_ERR_INVALID_ARG, "SGD keeps FP32 state and master weights "
                            "(--optimizer-state and --master-weights bf16 are AdamW options)");
        if (!isfinite(c->momentum) || c->momentum < 0)
            return fr_error(FR_ERR_INVALID_ARG, "SGD: momentum %g must be finite and >= 0",
                            c->momentum);
        if (!isfinite(c->dampening))
            return fr_error(FR_ERR_INVALID_ARG, "SGD: dampening %g must be finite", c->dampening);
        if (c->nesterov && (c->momentum <= 0 || c->dampening != 0))
            return fr_error(FR_ERR_INVALID_ARG,
                            "SGD: nesterov momentum needs momentum > 0 and dampening 0 "
                            "(got momentum %g, dampening %g)", c->momentum, c->dampening);
    }
    return FR_OK;
}

static void free_params(fr_opt_param *p, int n)
{
    if (!p) return;
    for (int i = 0; i < n; i++) free((char *)p[i].name);
    free(p);
}

void fr_optimizer_free(fr_optimizer *o)
{
    if (!o) return;
    free_params(o->params, o->n);
    free(o->numel);
    free(o->decays);
    free(o->state);
    free(o->scales);
    free(o->arena);
    free(o->scale_arena);
    free(o);
}

/* Copy and validate parameter i into o. */
static fr_status add_param(fr_optimizer *o, int i, const fr_opt_param *src)
{
    if (!src->name || !src->name[0])
        return fr_error(FR_ERR_INVALID_ARG, "optimizer: parameter %d has no name", i);
    for (int j = 0; j < i; j++)
        if (strcmp(o->params[j].name, src->name) == 0)
            return fr_error(FR_ERR_INVALID_ARG, "optimizer: parameter '%s' is listed twice",
                            src->name);
    if (src->rank < 0 || src->rank > FR_MAX_RANK)
        return fr_error(FR_ERR_SHAPE, "optimizer: parameter '%s' has rank %d (0..%d allowed)",
                        src->name, src->rank, FR_MAX_RANK);
    int64_t numel;
    FR_TRY(fr_shape_numel(src->rank, src->dims, src->name, &numel));
    if (numel > 0 && (!src->data || !src->grad))
        return fr_error(FR_ERR_INVALID_ARG, "optimizer: parameter '%s' has a NULL %s buffer",
                        src->name, src->data ? "gradient" : "data");
    if (src->decay != FR_DECAY_AUTO && src->decay != FR_DECAY_ON && src->decay != FR_DECAY_OFF)
        return fr_error(FR_ERR_INVALID_ARG, "optimizer: parameter '%s' has decay flag %d",
                        src->name, (int)src->decay);
    o->params[i] = *src;
    o->params[i].name = fr_strdup(src->name, "optimizer parameter name");
    if (!o->params[i].name) return FR_ERR_OOM;
    o->numel[i] = numel;
    o->decays[i] = (unsigned char)(src->decay == FR_DECAY_ON ||
                                   (src->decay == FR_DECAY_AUTO && (src->rank >= 2 || o->cfg.decay_1d)));
    return FR_OK;
}

fr_status fr_optimizer_create(const fr_opt_config *cfg, const fr_opt_param *params, int n_params,
                              fr_optimizer **out)
{
    if (!cfg || !out || n_params < 0 || (n_params > 0 && !params))
        return fr_error(FR_ERR_INVALID_ARG, "fr_optimizer_create: bad arguments");
    *out = NULL;
    FR_TRY(check_config(cfg));
    fr_optimizer *o = fr_calloc(1, sizeof *o, "optimizer");
    if (!o) return FR_ERR_OOM;
    o->cfg = *cfg;
    o->n = n_params;
    o->slots = cfg->kind == FR_OPT_ADAMW ? 2 : (cfg->momentum != 0 ? 1 : 0);
    size_t np = n_params ? (size_t)n_params : 1;
    o->params = fr_calloc(np, sizeof *o->params, "optimizer parameters");
    o->numel = fr_calloc(np, sizeof *o->numel, "optimizer parameters");
    o->decays = fr_calloc(np, 1, "optimizer parameters");
    o->state = fr_calloc(np * (size_t)(o->slots ? o->slots : 1), sizeof *o->state, "optimizer state");
    fr_status st = (o->params && o->numel && o->decays && o->state) ? FR_OK : FR_ERR_OOM;
    int added = 0;
    for (int i = 0; st == FR_OK && i < n_params; i++) {
        st = add_param(o, i, &params[i]);
        if (st == FR_OK) added = i + 1;
    }
    /* `n` counts the names owned so far, for free_params on failure. */
    o->n = added;
    /* one byte arena for the slots' storage (each slot starts 4-byte aligned) and one float
     * arena for the fp8 block scales */
    const fr_opt_state_dtype dt = cfg->state_dtype;
    const size_t esize = dt == FR_OPT_STATE_F32 ? 4 : dt == FR_OPT_STATE_BF16 ? 2 : 1;
    size_t total = 0, nscales = 0;
    for (int i = 0; st == FR_OK && i < n_params; i++) {
        size_t bytes, nb = dt == FR_OPT_STATE_FP8 ? (size_t)((o->numel[i] + FR_LOWP_BLOCK - 1) / FR_LOWP_BLOCK) : 0;
        if (!fr_mul_size((size_t)o->numel[i], esize, &bytes) || bytes > SIZE_MAX / 8 ||
            !fr_mul_size((bytes + 3) & ~(size_t)3, (size_t)o->slots, &bytes) || total + bytes < total)
            st = fr_error(FR_ERR_OOM, "optimizer state size overflows");
        else {
            total += bytes;
            nscales += nb * (size_t)o->slots;
        }
    }
    o->scales = st == FR_OK ? fr_calloc(np * (size_t)(o->slots ? o->slots : 1), sizeof *o->scales, "optimizer state")
                            : NULL;
    if (st == FR_OK && !o->scales) st = FR_ERR_OOM;
    if (st == FR_OK && total > 0) {
        o->arena = fr_calloc(total, 1, "optimizer state");
        if (!o->arena) st = FR_ERR_OOM;
    }
    if (st == FR_OK && nscales > 0) {
        o->scale_arena = fr_calloc(nscales, sizeof(float), "optimizer state scales");
        if (!o->scale_arena) st = FR_ERR_OOM;
    }
    if (st != FR_OK) {
        fr_optimizer_free(o);
        return st;
    }
    o->state_bytes = total + nscales * sizeof(float);
    unsigned char *p = o->arena;
    float *sp = o->scale_arena;
    for (int i = 0; i < n_params; i++)
        for (int s = 0; s < o->slots; s++) {
            size_t k = (size_t)i * (size_t)o->slots + (size_t)s;
            o->state[k] = p;
            p += ((size_t)o->numel[i] * esize + 3) & ~(size_t)3;
            if (dt == FR_OPT_STATE_FP8) {
                o->scales[k] = sp;
                sp += (o->numel[i] + FR_LOWP_BLOCK - 1) / FR_LOWP_BLOCK;
            }
        }
    /* bf16 master weights: the starting values are bf16 too (nearest) */
    for (int i = 0; cfg->master_bf16 && i < n_params; i++)
        for (int64_t k = 0; k < o->numel[i]; k++)
            o->params[i].data[k] = fr_lowp_from_bf16(fr_lowp_to_bf16(o->params[i].data[k]));
    *out = o;
    return FR_OK;
}

static void adamw_update(const fr_optimizer *o, int i, double lr, int64_t t)
{
    const fr_opt_config *c = &o->cfg;
    float *restrict p = o->params[i].data;
    const float *restrict g = o->params[i].grad;
    float *restrict m = o->state[(size_t)i * 2];
    float *restrict v = o->state[(size_t)i * 2 + 1];
    int64_t n = o->numel[i];

    if (c->state_dtype != FR_OPT_STATE_F32 || c->master_bf16) {
        /* the same float32 arithmetic, element by element, with decoding and encoding */
        fr_lowp_adamw a = {.decay = o->decays[i] && c->weight_decay != 0,
                           .keep = (float)(1.0 - lr * c->weight_decay),
                           .b1 = (float)c->beta1, .one_b1 = (float)(1.0 - c->beta1),
                           .b2 = (float)c->beta2, .one_b2 = (float)(1.0 - c->beta2),
                           .neg_step = (float)(-(lr / (1.0 - pow(c->beta1, (double)t)))),
                           .bc2_sqrt = (float)sqrt(1.0 - pow(c->beta2, (double)t)), .eps = (float)c->eps};
        fr_lowp_adamw_step(&a, c->state_dtype, p, g, n, m, v, o->scales[(size_t)i * 2],
                           o->scales[(size_t)i * 2 + 1], c->master_bf16, fr_lowp_sr_key(c->sr_seed, t, i));
        return;
    }
    if (o->decays[i] && c->weight_decay != 0) {
        const float keep = (float)(1.0 - lr * c->weight_decay);
        for (int64_t k = 0; k < n; k++) p[k] = p[k] * keep;
    }
    const float b1 = (float)c->beta1, one_b1 = (float)(1.0 - c->beta1);
    const float b2 = (float)c->beta2, one_b2 = (float)(1.0 - c->beta2);
    const double bc1 = 1.0 - pow(c->beta1, (double)t);
    const double bc2 = 1.0 - pow(c->beta2, (double)t);
    const float neg_step = (float)(-(lr / bc1));
    const float bc2_sqrt = (float)sqrt(bc2);
    const float eps = (float)c->eps;
    for (int64_t k = 0; k < n; k++) {
        const float gk = g[k];
        m[k] = fmaf(gk, one_b1, m[k] * b1);
        v[k] = fmaf(gk * one_b2, gk, v[k] * b2);
        const float d = sqrtf(v[k]) / bc2_sqrt + eps;
        p[k] = p[k] + (neg_step * m[k]) / d;
    }
}

static void sgd_update(const fr_optimizer *o, int i, double lr, int64_t t)
{
    const fr_opt_config *c = &o->cfg;
    float *restrict p = o->params[i].data;
    const float *restrict g = o->params[i].grad;
    float *restrict buf = o->slots ? o->state[i] : NULL;
    int64_t n = o->numel[i];
    const int decay = o->decays[i] && c->weight_decay != 0;
    const float wd = (float)c->weight_decay;
    const float mom = (float)c->momentum;
    const float one_damp = (float)(1.0 - c->dampening);
    const float neg_lr = (float)(-lr);
    for (int64_t k = 0; k < n; k++) {
        float d = decay ? fmaf(p[k], wd, g[k]) : g[k];
        if (buf) {
            /* torch creates the buffer as a copy of d on the first step */
            buf[k] = t == 1 ? d : fmaf(d, one_damp, buf[k] * mom);
            d = c->nesterov ? fmaf(buf[k], mom, d) : buf[k];
        }
        p[k] = fmaf(d, neg_lr, p[k]);
    }
}

fr_status fr_optimizer_step(fr_optimizer *o, double lr)
{
    if (!o) return fr_error(FR_ERR_INVALID_ARG, "fr_optimizer_step: NULL optimizer");
    if (!isfinite(lr) || lr < 0)
        return fr_error(FR_ERR_INVALID_ARG, "optimizer step %lld: learning rate %g must be finite and >= 0",
                        (long long)(o->steps + 1), lr);
    int64_t t = ++o->steps;
    for (int i = 0; i < o->n; i++) {
        if (o->cfg.kind == FR_OPT_ADAMW)
            adamw_update(o, i, lr, t);
        else
            sgd_update(o, i, lr, t);
    }
    return FR_OK;
}

double fr_optimizer_grad_norm(const fr_optimizer *o)
{
    double ss = 0;
    for (int i = 0; i < o->n; i++) {
        const float *g = o->params[i].grad;
        for (int64_t k = 0; k < o->numel[i]; k++) ss += (double)g[k] * (double)g[k];
    }
    return sqrt(ss);
}

fr_status fr_optimizer_clip_grad_norm(fr_optimizer *o, double max_norm, double *norm_out)
{
    if (!o) return fr_error(FR_ERR_INVALID_ARG, "fr_optimizer_clip_grad_norm: NULL optimizer");
    if (!isfinite(max_norm) || max_norm <= 0)
        return fr_error(FR_ERR_INVALID_ARG, "gradient clipping: max_norm %g must be finite and > 0",
                        max_norm);
    double norm = fr_optimizer_grad_norm(o);
    if (norm_out) *norm_out = norm;
    if (!isfinite(norm)) {
        for (int i = 0; i < o->n; i++) {
            const float *g = o->params[i].grad;
            for (int64_t k = 0; k < o->numel[i]; k++)
                if (!isfinite(g[k]))
                    return fr_error(FR_ERR_NUMERIC,
                                    "gradient norm is %g: gradient of '%s' holds %g at element %lld "
                                    "(gradients left unchanged)",
                                    norm, o->params[i].name, (double)g[k], (long long)k);
        }
        /* Float squares cannot overflow a double sum, so this is unreachable in practice. */
        return fr_error(FR_ERR_NUMERIC, "gradient norm is %g (gradients left unchanged)", norm);
    }
    double coef = max_norm / (norm + 1e-6);
    if (coef < 1.0) fr_optimizer_scale_grads(o, coef);
    return FR_OK;
}

void fr_optimizer_zero_grads(fr_optimizer *o)
{
    for (int i = 0; i < o->n; i++)
        if (o->numel[i]) memset(o->params[i].grad, 0, (size_t)o->numel[i] * sizeof(float));
}

void fr_optimizer_scale_grads(fr_optimizer *o, double factor)
{
    const float f = (float)factor;
    for (int i = 0; i < o->n; i++) {
        float *g = o->params[i].grad;
        for (int64_t k = 0; k < o->numel[i]; k++) g[k] = g[k] * f;
    }
}

fr_status fr_optimizer_average_grads(fr_optimizer *o, int k)
{
    if (!o || k < 1)
        return fr_error(FR_ERR_INVALID_ARG, "gradient accumulation: %d micro-batches (need >= 1)", k);
    const float div = (float)k;
    for (int i = 0; i < o->n; i++) {
        float *g = o->params[i].grad;
        for (int64_t j = 0; j < o->numel[i]; j++) g[j] = g[j] / div;
    }
    return FR_OK;
}

const fr_opt_config *fr_optimizer_config(const fr_optimizer *o) { return &o->cfg; }
int fr_optimizer_param_count(const fr_optimizer *o) { return o->n; }

const fr_opt_param *fr_optimizer_param(const fr_optimizer *o, int i)
{
    return (i >= 0 && i < o->n) ? &o->params[i] : NULL;
}

int64_t fr_optimizer_param_numel(const fr_optimizer *o, int i)
{
    return (i >= 0 && i < o->n) ? o->numel[i] : 0;
}

int fr_optimizer_find_param(const fr_optimizer *o, const char *name)
{
    if (!name) return -1;
    for (int i = 0; i < o->n; i++)
        if (strcmp(o->params[i].name, name) == 0) return i;
    return -1;
}

int fr_optimizer_param_decays(const fr_optimizer *o, int i)
{
    return (i >= 0 && i < o->n) ? o->decays[i] : 0;
}

fr_status fr_optimizer_bind(fr_optimizer *o, int i, float *data, float *grad)
{
    if (!o || i < 0 || i >= o->n)
        return fr_error(FR_ERR_INVALID_ARG, "fr_optimizer_bind: no parameter %d", i);
    if (o->numel[i] > 0 && (!data || !grad))
        return fr_error(FR_ERR_INVALID_ARG, "optimizer: binding parameter '%s' to a NULL buffer",
                        o->params[i].name);
    o->params[i].data = data;
    o->params[i].grad = grad;
    return FR_OK;
}

int fr_optimizer_state_count(const fr_optimizer *o) { return o->slots; }

size_t fr_optimizer_state_bytes(const fr_optimizer *o) { return o->state_bytes; }

size_t fr_opt_state_bytes(const fr_opt_config *c, int64_t numel)
{
    const size_t slots = c->kind == FR_OPT_ADAMW ? 2 : (c->momentum != 0 ? 1 : 0);
    const fr_opt_state_dtype dt = c->state_dtype;
    const size_t es = dt == FR_OPT_STATE_F32 ? 4 : dt == FR_OPT_STATE_BF16 ? 2 : 1;
    size_t b = (((size_t)numel * es + 3) & ~(size_t)3) * slots;
    if (dt == FR_OPT_STATE_FP8) b += (size_t)((numel + FR_LOWP_BLOCK - 1) / FR_LOWP_BLOCK) * sizeof(float) * slots;
    return b;
}

const char *fr_optimizer_state_name(const fr_optimizer *o, int slot)
{
    if (slot < 0 || slot >= o->slots) return NULL;
    if (o->cfg.kind == FR_OPT_ADAMW) return slot == 0 ? "exp_avg" : "exp_avg_sq";
    return "momentum_buffer";
}

int fr_optimizer_find_state(const fr_optimizer *o, const char *slot_name)
{
    if (!slot_name) return -1;
    for (int s = 0; s < o->slots; s++)
        if (strcmp(fr_optimizer_state_name(o, s), slot_name) == 0) return s;
    return -1;
}

float *fr_optimizer_state(fr_optimizer *o, int i, int slot)
{
    if (o->cfg.state_dtype != FR_OPT_STATE_F32) return NULL;
    return fr_optimizer_state_raw(o, i, slot, NULL);
}

void *fr_optimizer_state_raw(fr_optimizer *o, int i, int slot, float **scales)
{
    if (scales) *scales = NULL;
    if (i < 0 || i >= o->n || slot < 0 || slot >= o->slots) return NULL;
    size_t k = (size_t)i * (size_t)o->slots + (size_t)slot;
    if (scales && o->cfg.state_dtype == FR_OPT_STATE_FP8) *scales = o->scales[k];
    return o->state[k];
}

fr_opt_state_dtype fr_optimizer_state_dtype(const fr_optimizer *o) { return o->cfg.state_dtype; }

int64_t fr_optimizer_step_count(const fr_optimizer *o) { return o->steps; }

fr_status fr_optimizer_set_step_count(fr_optimizer *o, int64_t steps)
{
    if (!o || steps < 0)
        return fr_error(FR_ERR_INVALID_ARG, "optimizer: step count %lld must be >= 0",
                        (long long)steps);
    o->steps = steps;
    return FR_OK;
}
