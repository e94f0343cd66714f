/* A static export's position embedding: the rows of the table it reads (see params_unfold.h). */
#include <stdio.h>
#include <string.h>

#include "graph/params_unfold.h"

/* Named after the aten.embedding it replaced ("embedding_1"). */
static int is_lookup(const char *name)
{
    if (strncmp(name, "embedding", 9) != 0) return 0;
    if (!name[9]) return 1;
    if (name[9] != '_' || !name[10]) return 0;
    return strspn(name + 10, "0123456789") == strlen(name + 10);
}

/* The positions read are 0..T-1: the fold took them from an arange (GPT-2's cache_position
 * with no past) or a slice of a position_ids buffer (BERT's arange buffer). */
static int from_first_rows(const char *folded)
{
    return strstr(folded, "'arange'") || strstr(folded, "position_ids'");
}

fr_status fr_params_unfold_rows(fr_graph *g, int fid, const char *table, int *done)
{
    fr_value *f = &g->values[fid];
    *done = 0;
    if (!is_lookup(f->name) || fr_graph_find_value(g, table) >= 0) return FR_OK;
    *done = 1;
    /* [1, T, D] or [T, D]: rows 0..T-1 of the [positions, D] table; else trained as stored */
    int r = f->rank;
    if (!from_first_rows(f->folded_from) || !(r == 2 || (r == 3 && f->dims[0] == 1))) {
        f->torch_kind = fr_strdup("PARAMETER", "parameter record");
        if (!f->torch_kind) return FR_ERR_OOM;
        return fr_params_note(f, "trained in place of the rows of parameter '%s' it holds (the exporter folded "
                              "the lookup at fixed positions)", table);
    }
    int64_t t = f->dims[r - 2], d[2] = {t, f->dims[r - 1]}, dims[3] = {0};
    memcpy(dims, f->dims, (size_t)r * sizeof *dims);
    char name[400];
    snprintf(name, sizeof name, "%s[0:%lld]", table, (long long)t);
    fr_tensor *rows, *shape;
    int pid, sid, nid;
    FR_TRY(fr_tensor_clone(f->constant, name, &rows));
    rows->rank = 2;
    memcpy(rows->dims, d, sizeof d);
    FR_TRY(fr_params_add(g, name, rows, &pid));
    FR_TRY(fr_params_note(&g->values[pid], "rows 0..%lld of parameter '%s' (the exporter folded the lookup at "
                          "positions 0..%lld; the file holds no other row of the table)",
                          (long long)t - 1, table, (long long)t - 1));
    snprintf(name, sizeof name, "%s_shape", g->values[fid].name);
    FR_TRY(fr_graph_add_unique_value(g, name, &sid));
    FR_TRY(fr_tensor_new(FR_I64, 1, (const int64_t[]){r}, name, &shape));
    memcpy(shape->data, dims, (size_t)r * sizeof *dims);
    FR_TRY(fr_graph_set_initializer(g, sid, shape));
    fr_params_uninit(&g->values[fid]);
    snprintf(name, sizeof name, "unfold_%s", g->values[fid].name);
    int in[2] = {pid, sid};
    return fr_graph_add_node(g, "Reshape", "", name, 2, in, 1, &fid, &nid);
}
