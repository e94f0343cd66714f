/* Cross-checks of a compiled graph's layer table once it is read (see fbs.h): the metadata
 * of a .fbs is input like any other, and these fields feed names, counts and buffers later
 * (the training build names the FP8 state values after state_prefix). */
#include <string.h>

#include "graph/name_map.h"
#include "runtime/io/fbs.h"

/* Longest state prefix: value names built from it ("<prefix>/amax_dy") fit the builders'
 * buffers. */
#define FBS_MAX_PREFIX 1000

static int count_names(const char *list)
{
    int n = list && list[0] ? 1 : 0;
    for (const char *p = list; p && *p; p++) n += *p == ',';
    return n;
}

static fr_status check_layer(const fr_graph *g, const fr_fp8_layer *L, int nid, const char *what, int i)
{
    if (count_names(L->sources) != L->n_fused || count_names(L->weights) != L->n_fused)
        return fr_error(FR_ERR_PARSE,
                        "compiled graph '%s': layer %d ('%s') fuses %d Linears but lists %d sources and %d weights",
                        what, i, L->name, L->n_fused, count_names(L->sources), count_names(L->weights));
    if (L->precision != FR_LIN_FP8) return FR_OK;
    if (!L->state_prefix || !L->state_prefix[0] || strlen(L->state_prefix) > FBS_MAX_PREFIX)
        return fr_error(FR_ERR_PARSE, "compiled graph '%s': layer %d ('%s') has an empty or over-long state prefix",
                        what, i, L->name);
    const char *attr;
    if (fr_node_attr_string(&g->nodes[nid], "state_prefix", L->state_prefix, &attr) != FR_OK ||
        strcmp(attr, L->state_prefix) != 0) {
        fr_clear_error();
        return fr_error(FR_ERR_PARSE, "compiled graph '%s': layer %d ('%s') records state prefix '%.200s', its node "
                        "another", what, i, L->name, L->state_prefix);
    }
    return FR_OK;
}

fr_status fr_fbs_check_layers(const fr_graph *g, const fr_fp8_report *r, const int *node_of, const char *what)
{
    fr_name_map *names, *prefixes;
    FR_TRY(fr_name_map_new(&names));
    fr_status st = fr_name_map_new(&prefixes);
    for (int i = 0; st == FR_OK && i < r->n_layers; i++) {
        const fr_fp8_layer *L = &r->layers[i];
        st = check_layer(g, L, node_of[i], what, i);
        /* two layers on one node, or two FP8 layers sharing state, are no compile's output */
        if (st == FR_OK && fr_name_map_get(names, L->name) >= 0)
            st = fr_error(FR_ERR_PARSE, "compiled graph '%s': layer '%s' is recorded twice", what, L->name);
        if (st == FR_OK && L->state_prefix && fr_name_map_get(prefixes, L->state_prefix) >= 0)
            st = fr_error(FR_ERR_PARSE, "compiled graph '%s': state prefix '%.200s' is recorded twice", what,
                          L->state_prefix);
        if (st == FR_OK) st = fr_name_map_put(names, L->name, i);
        if (st == FR_OK && L->state_prefix) st = fr_name_map_put(prefixes, L->state_prefix, i);
    }
    fr_name_map_free(names);
    fr_name_map_free(prefixes);
    return st;
}
