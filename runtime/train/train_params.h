/* Writing many trained parameters at once (a checkpoint loaded by name): one round trip to the
 * device for all of them, where fr_trainer_set_param makes one per parameter (on a GPU each
 * moves every parameter and optimizer moment both ways). */
#ifndef FR_TRAIN_PARAMS_H
#define FR_TRAIN_PARAMS_H

#include "runtime/train/trainer.h"

/* fill(ctx, i, dst) writes the values of trained parameter names[i] (original name and layout,
 * fr_trainer_param_numel floats) into dst, for i in [0, n). Every name is checked before any
 * write (FR_ERR_INVALID_ARG for one the trainer does not train). A failing fill stops there:
 * the parameters before it are written, that one may be partly written; the device gets what
 * the host holds either way. The optimizer state is left as it is. */
FR_NODISCARD fr_status fr_trainer_fill_params(fr_trainer *t, int n, const char *const *names,
                                 fr_status (*fill)(void *ctx, int i, float *dst), void *ctx);

#endif
