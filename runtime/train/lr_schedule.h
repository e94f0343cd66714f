/* Learning-rate schedules: pure functions of the step number (counted from 0, the step about
 * to be taken), computed in double.
 *
 *  FR_LR_CONSTANT:         lr(s) = max_lr
 *  FR_LR_WARMUP_CONSTANT:  lr(s) = max_lr * (s + 1) / W          for s < W
 *                          lr(s) = max_lr                         otherwise
 *  FR_LR_COSINE:           lr(s) = max_lr * (s + 1) / W          for s < W
 *                          r     = (s - W) / (S - W), clamped to [0, 1]
 *                          lr(s) = min_lr + 0.5 * (1 + cos(pi * r)) * (max_lr - min_lr)
 *     where W = warmup_steps and S = total_steps: the first step after warmup uses max_lr and
 *     every step from S on uses min_lr. This is llm.c's schedule (train_gpt2.cu
 *     get_learning_rate: warmup (step+1)/warmup, then cosine to min_lr over the remaining
 *     steps) in double instead of float; nanoGPT's get_lr has the same cosine part.
 * W = 0 means no warmup. */
#ifndef FR_LR_SCHEDULE_H
#define FR_LR_SCHEDULE_H

#include <stdint.h>

#include "graph/status.h"

typedef enum fr_lr_kind {
    FR_LR_CONSTANT = 0,
    FR_LR_WARMUP_CONSTANT = 1,
    FR_LR_COSINE = 2
} fr_lr_kind;

typedef struct fr_lr_schedule {
    fr_lr_kind kind;
    double max_lr;
    double min_lr;        /* FR_LR_COSINE only */
    int64_t warmup_steps; /* W */
    int64_t total_steps;  /* S: FR_LR_COSINE only */
} fr_lr_schedule;

/* FR_ERR_INVALID_ARG unless: max_lr finite and >= 0; W >= 0; for cosine, 0 <= min_lr <= max_lr
 * and S > W. */
FR_NODISCARD fr_status fr_lr_schedule_check(const fr_lr_schedule *s);
/* The learning rate of step `step` (>= 0; a negative step is treated as 0). Defined for every
 * schedule fr_lr_schedule_check accepts. */
double fr_lr_at(const fr_lr_schedule *s, int64_t step);
/* Parse "constant", "warmup_constant" or "cosine" (FR_ERR_INVALID_ARG naming the text). */
FR_NODISCARD fr_status fr_lr_kind_parse(const char *text, fr_lr_kind *out);
const char *fr_lr_kind_name(fr_lr_kind k);

#endif
