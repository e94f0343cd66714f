/* FP8 scaling recipes: scale from amax, block quantization, delayed-scaling state
 * (see fp8_scaling.h for the exact rules). */
#include "graph/fp8_scaling.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/option_choices.h"

#include "graph/fp8_format.h"

#define FR_MAX_MARGIN 64

static fr_status check_fmt(fr_dtype fmt, const char *what)
{
    if (fmt == FR_F8E4M3 || fmt == FR_F8E5M2) return FR_OK;
    return fr_error(FR_ERR_UNSUPPORTED, "%s: %s is not an fp8 format fp8run scales "
                    "(float8e4m3fn or float8e5m2)", what, fr_dtype_name(fmt));
}

fr_status fr_fp8_scale_from_amax(float amax, fr_dtype fmt, int margin, float if_zero,
                                 const char *what, float *scale)
{
    FR_TRY(check_fmt(fmt, what));
    if (margin < -FR_MAX_MARGIN || margin > FR_MAX_MARGIN)
        return fr_error(FR_ERR_INVALID_ARG, "%s: margin %d is outside [-%d, %d]", what, margin,
                        FR_MAX_MARGIN, FR_MAX_MARGIN);
    if (!(amax >= 0.0f) || isinf(amax))
        return fr_error(FR_ERR_NUMERIC, "%s: amax is %g; a scale is never made from a NaN, "
                        "infinite or negative amax (skip this step)", what, (double)amax);
    if (amax == 0.0f) {
        *scale = if_zero;
        return FR_OK;
    }
    float s = ldexpf(fr_fp8_max(fmt) / amax, -margin);
    /* keep scale and 1/scale finite and nonzero: a tiny amax would overflow, a huge amax
     * with a large margin could underflow */
    if (!(s <= FLT_MAX)) s = FLT_MAX;
    if (s < FLT_MIN) s = FLT_MIN;
    *scale = s;
    return FR_OK;
}

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* amax that stays NaN once a NaN was seen, +Inf for an Inf */
static inline float amax_step(float m, float x)
{
    float a = fabsf(x);
    if (m == m && !(a <= m)) m = a;
    return m;
}

fr_status fr_fp8_quantize_blocks(const float *src, int64_t R, int64_t C, int64_t ld_src,
                                 int64_t br, int64_t bc, fr_dtype fmt, int margin,
                                 const float *given_scale, const char *what, uint8_t *q,
                                 float *scale_inv, float *deq, int64_t ld_deq)
{
    FR_TRY(check_fmt(fmt, what));
    if (R < 0 || C < 0 || br < 1 || bc < 1 || ld_src < C || (deq && ld_deq < C))
        return fr_error(FR_ERR_INVALID_ARG, "%s: bad block quantization geometry (%lld x %lld, "
                        "blocks %lld x %lld)", what, (long long)R, (long long)C, (long long)br,
                        (long long)bc);
    int64_t gr = ceil_div(R, br), gc = ceil_div(C, bc);
    size_t ngs;
    if (!fr_mul_size((size_t)gr, (size_t)gc, &ngs) || ngs > (size_t)INT64_MAX / 8)
        return fr_error(FR_ERR_OOM, "%s: scale grid size overflows", what);
    int64_t ng = (int64_t)ngs;
    if (R == 0 || C == 0) return FR_OK;
    float *sc = fr_malloc(2 * ngs * sizeof(float), "fp8 block scales");
    if (!sc) return FR_ERR_OOM;
    float *si = sc + ng; /* 1 / scale per block */
    fr_status st = FR_OK;
    if (given_scale) {
        float s = *given_scale;
        if (!(s > 0.0f) || isinf(s)) {
            free(sc);
            return fr_error(FR_ERR_NUMERIC, "%s: scale %g must be finite and > 0", what, (double)s);
        }
        for (int64_t i = 0; i < ng; i++) sc[i] = s;
    } else {
        for (int64_t i = 0; i < ng; i++) sc[i] = 0.0f; /* amax per block first */
        for (int64_t r = 0; r < R; r++) {
            const float *row = src + r * ld_src;
            float *grow = sc + (r / br) * gc;
            for (int64_t c = 0; c < C; c++) grow[c / bc] = amax_step(grow[c / bc], row[c]);
        }
        for (int64_t i = 0; i < ng && st == FR_OK; i++) {
            if (isnan(sc[i]) || isinf(sc[i])) {
                if (ng == 1)
                    st = fr_error(FR_ERR_NUMERIC, "%s: the tensor holds %s values; no FP8 scale "
                                  "is made from it (skip this step)", what,
                                  isnan(sc[i]) ? "NaN" : "infinite");
                else
                    st = fr_error(FR_ERR_NUMERIC, "%s: block (%lld, %lld) of %lldx%lld holds %s "
                                  "values; no FP8 scale is made from it (skip this step)", what,
                                  (long long)(i / gc), (long long)(i % gc), (long long)br,
                                  (long long)bc, isnan(sc[i]) ? "NaN" : "infinite");
                break;
            }
            st = fr_fp8_scale_from_amax(sc[i], fmt, margin, 1.0f, what, &sc[i]);
        }
    }
    if (st == FR_OK) {
        float table[256];
        for (int c = 0; c < 256; c++)
            table[c] = fmt == FR_F8E4M3 ? fr_e4m3_to_f32((uint8_t)c) : fr_e5m2_to_f32((uint8_t)c);
        for (int64_t i = 0; i < ng; i++) si[i] = 1.0f / sc[i];
        if (scale_inv) memcpy(scale_inv, si, ngs * sizeof(float));
        for (int64_t r = 0; r < R; r++) {
            const float *row = src + r * ld_src, *grow = sc + (r / br) * gc;
            const float *irow = si + (r / br) * gc;
            for (int64_t c = 0; c < C; c++) {
                float s = grow[c / bc];
                uint8_t code = fmt == FR_F8E4M3 ? fr_f32_to_e4m3(row[c] * s, 1)
                                                : fr_f32_to_e5m2(row[c] * s, 1);
                if (q) q[r * C + c] = code;
                if (deq) deq[r * ld_deq + c] = table[code] * irow[c / bc];
            }
        }
    }
    free(sc);
    return st;
}

/* ---- delayed scaling ---- */

void fr_fp8_scaling_params_default(fr_fp8_scaling_params *p)
{
    p->history_len = 1024;
    p->algo = FR_AMAX_MAX;
    p->margin = 0;
    p->interval = 1;
    p->fmt = FR_F8E4M3;
}

static const char *const k_algos[] = {FR_CHOICES_AMAX_ALGO NULL};
_Static_assert(FR_CHOICE_COUNT(k_algos) == FR_AMAX_MOST_RECENT + 1, "FR_CHOICES_AMAX_ALGO follows fr_amax_algo");

fr_status fr_amax_algo_parse(const char *s, fr_amax_algo *out)
{
    int k = fr_choice_find(k_algos, s);
    if (k >= 0) {
        *out = (fr_amax_algo)k;
        return FR_OK;
    }
    return fr_error(FR_ERR_INVALID_ARG, "amax algorithm '%s' is not one of: max, most_recent",
                    s ? s : "(null)");
}

const char *fr_amax_algo_name(fr_amax_algo a) { return k_algos[a == FR_AMAX_MAX ? 0 : 1]; }

fr_status fr_fp8_scaling_init(fr_fp8_scaling *s, const fr_fp8_scaling_params *p)
{
    memset(s, 0, sizeof *s);
    if (p->history_len < 1 || p->history_len > (1 << 20))
        return fr_error(FR_ERR_INVALID_ARG, "fp8 scaling: amax history length %d is outside "
                        "[1, 1048576]", p->history_len);
    if (p->interval < 1)
        return fr_error(FR_ERR_INVALID_ARG, "fp8 scaling: interval %d must be >= 1", p->interval);
    if (p->algo != FR_AMAX_MAX && p->algo != FR_AMAX_MOST_RECENT)
        return fr_error(FR_ERR_INVALID_ARG, "fp8 scaling: unknown amax algorithm %d", (int)p->algo);
    if (p->margin < -FR_MAX_MARGIN || p->margin > FR_MAX_MARGIN)
        return fr_error(FR_ERR_INVALID_ARG, "fp8 scaling: margin %d is outside [-%d, %d]",
                        p->margin, FR_MAX_MARGIN, FR_MAX_MARGIN);
    FR_TRY(check_fmt(p->fmt, "fp8 scaling"));
    s->history = fr_calloc((size_t)p->history_len, sizeof(float), "amax history");
    if (!s->history) return FR_ERR_OOM;
    s->p = *p;
    s->scale = 1.0f;
    s->scale_inv = 1.0f;
    return FR_OK;
}

void fr_fp8_scaling_free(fr_fp8_scaling *s)
{
    if (!s) return;
    free(s->history);
    s->history = NULL;
}

float fr_fp8_scaling_amax(const fr_fp8_scaling *s)
{
    if (s->updates == 0) return 0.0f;
    if (s->p.algo == FR_AMAX_MOST_RECENT)
        return s->history[(s->pos + s->p.history_len - 1) % s->p.history_len];
    float m = 0.0f;
    for (int i = 0; i < s->p.history_len; i++) m = s->history[i] > m ? s->history[i] : m;
    return m;
}

fr_status fr_fp8_scaling_update(fr_fp8_scaling *s, float amax, const char *what)
{
    if (!s->history) return fr_error(FR_ERR_INVALID_ARG, "%s: fp8 scaling state is not initialized", what);
    if (!(amax >= 0.0f) || isinf(amax))
        return fr_error(FR_ERR_NUMERIC, "%s: amax is %g; the scale is kept and this step must be "
                        "skipped", what, (double)amax);
    int64_t k = s->updates; /* this update's index, counted from 0 */
    s->history[s->pos] = amax;
    s->pos = (s->pos + 1) % s->p.history_len;
    s->updates++;
    if (k % s->p.interval != 0) return FR_OK;
    float a = fr_fp8_scaling_amax(s), sc;
    FR_TRY(fr_fp8_scale_from_amax(a, s->p.fmt, s->p.margin, s->scale, what, &sc));
    s->scale = sc;
    s->scale_inv = 1.0f / sc;
    return FR_OK;
}
