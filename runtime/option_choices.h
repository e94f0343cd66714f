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
/* an option that is not a choice */
#define FR_CHOICES_NONE

#endif
