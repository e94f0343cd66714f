/* The edits the parameter selection (params.c) and the un-folding (params_unfold.c) make
 * alike: a new initializer recorded as a PARAMETER, an initializer a node computes again, and
 * the note saying why a float initializer is or is not trained. */
#ifndef FR_PARAMS_EDIT_H
#define FR_PARAMS_EDIT_H

#include "graph/ir.h"

/* An initializer of parameter `name` holding t (taken), recorded as a PARAMETER. */
FR_NODISCARD fr_status fr_params_add(fr_graph *g, const char *name, fr_tensor *t, int *vid);
/* f no longer an initializer (a node computes it again). */
void fr_params_uninit(fr_value *f);
/* A note on v (printf-style; replaces the one it had). */
FR_NODISCARD fr_status fr_params_note(fr_value *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
