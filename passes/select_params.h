/* Choosing the trained parameters.
 *
 * Import marks the model's parameters FR_VAL_PARAM (graph/params.h says which). Training keeps
 * the mark on the float32 parameters whose names the train regex matches (all when it is NULL)
 * and the freeze regex does not (none when NULL); the others become constants, which
 * preparation may fold. A float initializer that is not a parameter (a mask, an exponent)
 * trains only when the train regex names it and the freeze regex does not. A kept
 * parameter that is float but not float32 is an error (fp8run trains float32 master weights),
 * and so is keeping none. The regexes are POSIX extended, as given to --train / --freeze. */
#ifndef FR_SELECT_PARAMS_H
#define FR_SELECT_PARAMS_H

#include <regex.h>

#include "graph/ir.h"

/* The --train / --freeze choice over parameter names. */
typedef struct fr_param_filter {
    regex_t tre, fre;
    int have_t, have_f;
} fr_param_filter;

/* Compile the regexes (either may be NULL); a bad one is FR_ERR_INVALID_ARG naming it. */
FR_NODISCARD fr_status fr_param_filter_open(const char *train, const char *freeze, fr_param_filter *f);
/* 1: a parameter named `name` is trained. */
int fr_param_filter_keep(const fr_param_filter *f, const char *name);
void fr_param_filter_close(fr_param_filter *f);

/* Clear FR_VAL_PARAM on every parameter of g not kept; *n_kept (may be NULL) counts the kept. */
FR_NODISCARD fr_status fr_select_params(fr_graph *g, const char *train, const char *freeze, int *n_kept);

#endif
