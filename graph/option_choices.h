/* The choices of every enumerated option, written once. Each list is in the order of the enum
 * it names where there is one (fr_lin_precision, fr_lin_recipe, fr_amax_algo, fr_lr_kind, ...),
 * so a choice's index is its enum value. Each macro expands to the strings followed by a comma:
 * `{FR_CHOICES_RECIPE NULL}` is a NULL-terminated list. */
#ifndef FR_OPTION_CHOICES_H
#define FR_OPTION_CHOICES_H

#define FR_CHOICES_PRECISION "fp32", "bf16", "fp8",
#define FR_CHOICES_RECIPE "delayed", "current", "block",
#define FR_CHOICES_FP8_FORMAT "hybrid", "e4m3",
#define FR_CHOICES_AMAX_ALGO "max", "most_recent",
#define FR_CHOICES_OPTIMIZER "adamw", "sgd",
#define FR_CHOICES_LR_SCHEDULE "constant", "warmup_constant", "cosine",
#define FR_CHOICES_DEVICE "auto", "cuda", "cpu",
#define FR_CHOICES_RECOMPUTE "none", "attention", "mlp", "full",
#define FR_CHOICES_OPT_STATE "fp32", "bf16", "fp8", /* fr_opt_state_dtype */
#define FR_CHOICES_MASTER "fp32", "bf16",
#define FR_CHOICES_ATTENTION "fp8run", "cudnn", "auto", /* FR_CUDA_ATTN_* (ops/cuda/cuda_kernel.h) */
#define FR_CHOICES_PACKING "on", "off",
#define FR_CHOICES_AUTO_ON_OFF "auto", "on", "off",
/* an option that is not a choice */
#define FR_CHOICES_NONE

#include <string.h>

/* The index of v in a NULL-terminated list, -1 when it is not there (or v is NULL). */
static inline int fr_choice_find(const char *const *list, const char *v)
{
    for (int i = 0; v && list[i]; i++)
        if (strcmp(list[i], v) == 0) return i;
    return -1;
}
/* Choices in a list, not counting its NULL. */
#define FR_CHOICE_COUNT(list) ((int)(sizeof(list) / sizeof((list)[0])) - 1)

#endif
