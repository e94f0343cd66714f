/* The edits parameter selection and un-folding share (see params_edit.h). */
#include "graph/params_edit.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

fr_status fr_params_note(fr_value *v, const char *fmt, ...)
{
    char buf[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    free(v->param_note);
    v->param_note = fr_strdup(buf, "parameter note");
    return v->param_note ? FR_OK : FR_ERR_OOM;
}

fr_status fr_params_add(fr_graph *g, const char *name, fr_tensor *t, int *vid)
{
    fr_status st = fr_graph_add_value(g, name, vid);
    if (st != FR_OK) {
        fr_tensor_free(t);
        return st;
    }
    FR_TRY(fr_graph_set_initializer(g, *vid, t));
    g->values[*vid].torch_kind = fr_strdup("PARAMETER", "parameter record");
    return g->values[*vid].torch_kind ? FR_OK : FR_ERR_OOM;
}

void fr_params_uninit(fr_value *f)
{
    fr_tensor_free(f->constant);
    f->constant = NULL;
    free(f->external_location);
    f->external_location = NULL;
    f->flags &= ~(FR_VAL_INITIALIZER | FR_VAL_PARAM);
}
