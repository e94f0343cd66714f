/* Learning-rate schedules (formulas in lr_schedule.h). */
#include "runtime/train/lr_schedule.h"

#include <math.h>
#include <string.h>

#include "graph/option_choices.h"

static const double pi = 3.14159265358979323846;

fr_status fr_lr_schedule_check(const fr_lr_schedule *s)
{
    if (!s) return fr_error(FR_ERR_INVALID_ARG, "learning-rate schedule: NULL");
    if (s->kind != FR_LR_CONSTANT && s->kind != FR_LR_WARMUP_CONSTANT && s->kind != FR_LR_COSINE)
        return fr_error(FR_ERR_INVALID_ARG, "learning-rate schedule: unknown kind %d", (int)s->kind);
    if (!isfinite(s->max_lr) || s->max_lr < 0)
        return fr_error(FR_ERR_INVALID_ARG, "learning-rate schedule: max lr %g must be finite and >= 0",
                        s->max_lr);
    if (s->warmup_steps < 0)
        return fr_error(FR_ERR_INVALID_ARG, "learning-rate schedule: %lld warmup steps (must be >= 0)",
                        (long long)s->warmup_steps);
    if (s->kind == FR_LR_COSINE) {
        if (!isfinite(s->min_lr) || s->min_lr < 0 || s->min_lr > s->max_lr)
            return fr_error(FR_ERR_INVALID_ARG,
                            "cosine schedule: min lr %g must be in [0, max lr %g]", s->min_lr, s->max_lr);
        if (s->total_steps <= s->warmup_steps)
            return fr_error(FR_ERR_INVALID_ARG,
                            "cosine schedule: total steps %lld must exceed the %lld warmup steps",
                            (long long)s->total_steps, (long long)s->warmup_steps);
    }
    return FR_OK;
}

double fr_lr_at(const fr_lr_schedule *s, int64_t step)
{
    if (step < 0) step = 0;
    if (s->kind == FR_LR_CONSTANT) return s->max_lr;
    if (step < s->warmup_steps) return s->max_lr * (double)(step + 1) / (double)s->warmup_steps;
    if (s->kind == FR_LR_WARMUP_CONSTANT) return s->max_lr;
    double span = (double)(s->total_steps - s->warmup_steps);
    double r = span > 0 ? (double)(step - s->warmup_steps) / span : 1.0;
    if (r > 1.0) r = 1.0;
    return s->min_lr + 0.5 * (1.0 + cos(pi * r)) * (s->max_lr - s->min_lr);
}

static const char *const names[] = {FR_CHOICES_LR_SCHEDULE NULL};
_Static_assert(FR_CHOICE_COUNT(names) == FR_LR_COSINE + 1, "FR_CHOICES_LR_SCHEDULE follows fr_lr_kind");

fr_status fr_lr_kind_parse(const char *text, fr_lr_kind *out)
{
    int k = fr_choice_find(names, text);
    if (k >= 0) {
        *out = (fr_lr_kind)k;
        return FR_OK;
    }
    return fr_error(FR_ERR_INVALID_ARG,
                    "unknown learning-rate schedule '%s' (expected constant, warmup_constant or cosine)",
                    text ? text : "(null)");
}

const char *fr_lr_kind_name(fr_lr_kind k)
{
    return (k >= FR_LR_CONSTANT && k <= FR_LR_COSINE) ? names[k] : "unknown";
}
