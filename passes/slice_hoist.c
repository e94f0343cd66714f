/* Slices above the Transposes they read (see slice_hoist.h). */
#include <stdio.h>
#include <string.h>

#include "ops/grad.h"
#include "ops/op.h"
#include "passes/pattern.h"
#include "passes/slice_hoist.h"

/* Slice n's axes (normalized to rank r) into ax[*n_ax]: 0 unless starts, ends (and axes, steps
 * when given) are constants. Without axes, the first len(starts) dims. */
static int slice_axes(const fr_graph *g, const fr_node *n, int r, int64_t *ax, int *n_ax)
{
    if (n->n_inputs < 3 || n->n_outputs != 1) return 0;
    for (int k = 1; k < n->n_inputs; k++)
        if (n->inputs[k] >= 0 && !g->values[n->inputs[k]].constant) return 0;
    const fr_tensor *st = g->values[n->inputs[1]].constant;
    const fr_tensor *at = n->n_inputs > 3 && n->inputs[3] >= 0 ? g->values[n->inputs[3]].constant : NULL;
    const int64_t m = fr_tensor_numel(st);
    if (m < 1 || m > FR_MAX_RANK || (at && fr_tensor_numel(at) != m)) return 0;
    for (int64_t i = 0; i < m; i++) {
        ax[i] = at ? fr_tensor_get_i64(at, i) : i;
        if (ax[i] < 0) ax[i] += r;
        if (ax[i] < 0 || ax[i] >= r) return 0;
    }
    *n_ax = (int)m;
    return 1;
}

static fr_status hoist_one(fr_graph *g, int t, int s, int *count)
{
    const fr_node *tr = &g->nodes[t];
    const fr_attr *pa = fr_node_attr(tr, "perm");
    const int x = tr->inputs[0], r = g->values[x].rank;
    int64_t perm[FR_MAX_RANK], ax[FR_MAX_RANK];
    memcpy(perm, pa->ints, (size_t)r * sizeof *perm);
    int n_ax = 0;
    if (!slice_axes(g, &g->nodes[s], r, ax, &n_ax)) return FR_OK;
    char nm[600];
    int axv, sl, nid;
    int64_t moved[FR_MAX_RANK];
    for (int i = 0; i < n_ax; i++) moved[i] = perm[ax[i]];
    snprintf(nm, sizeof nm, "%s/hoisted_axes", g->nodes[s].name);
    FR_TRY(fr_pattern_const_i64(g, nm, n_ax, moved, &axv));
    const fr_node *sn = &g->nodes[s];
    int in[5] = {x, sn->inputs[1], sn->inputs[2], axv, sn->n_inputs > 4 ? sn->inputs[4] : -1};
    const int y = sn->outputs[0];
    snprintf(nm, sizeof nm, "%s/before_transpose", g->nodes[s].name);
    FR_TRY(fr_graph_add_unique_value(g, nm, &sl));
    g->nodes[s].dead = 1;
    snprintf(nm, sizeof nm, "%s/hoisted", g->nodes[s].name);
    FR_TRY(fr_graph_add_node(g, "Slice", FR_DOMAIN_ONNX, nm, in[4] >= 0 ? 5 : 4, in, 1, &sl, &nid));
    FR_TRY(fr_node_infer(g, nid));
    snprintf(nm, sizeof nm, "%s/transpose_after", g->nodes[s].name);
    FR_TRY(fr_graph_add_node(g, "Transpose", FR_DOMAIN_ONNX, nm, 1, &sl, 1, &y, &nid));
    FR_TRY(fr_node_set_attr_ints(&g->nodes[nid], "perm", r, perm));
    FR_TRY(fr_node_infer(g, nid));
    (*count)++;
    return FR_OK;
}

fr_status fr_hoist_slices(fr_graph *g, int *count)
{
    *count = 0;
    fr_readers rd = {g, NULL};
    fr_status st = fr_readers_refresh(&rd, "slice hoisting");
    const int n0 = g->n_nodes;
    for (int t = 0; t < n0 && st == FR_OK; t++) {
        const fr_node *tr = &g->nodes[t];
        if (tr->dead || !fr_is_onnx_op(tr, "Transpose") || tr->n_inputs != 1 || tr->n_outputs != 1) continue;
        const fr_attr *pa = fr_node_attr(tr, "perm");
        const int v = tr->outputs[0], x = tr->inputs[0];
        if (!pa || pa->type != FR_ATTR_INTS || x < 0 || pa->n != g->values[x].rank || rd.count[v] < 1 ||
            (g->values[v].flags & FR_VAL_OUTPUT))
            continue;
        /* every reader a Slice of constant bounds reading it as its data */
        int readers[16], n_r = 0, ok = 1;
        for (int i = 0; i < g->n_nodes && ok; i++) {
            const fr_node *n = &g->nodes[i];
            if (n->dead) continue;
            for (int k = 0; k < n->n_inputs && ok; k++) {
                if (n->inputs[k] != v) continue;
                int64_t ax[FR_MAX_RANK];
                int n_ax;
                ok = k == 0 && fr_is_onnx_op(n, "Slice") && n_r < 16 && slice_axes(g, n, pa->n, ax, &n_ax);
                /* only along axes the Transpose moves: a Slice of an axis it keeps in place (a
                   partial rotary's halves of the head dim) is what the RoPE fusion reads */
                for (int a = 0; ok && a < n_ax; a++) ok = pa->ints[ax[a]] != ax[a];
                if (ok) readers[n_r++] = i;
            }
        }
        if (!ok || n_r == 0 || n_r != rd.count[v]) continue;
        for (int i = 0; i < n_r && st == FR_OK; i++) st = hoist_one(g, t, readers[i], count);
        if (st == FR_OK) g->nodes[t].dead = 1;
        if (st == FR_OK) st = fr_readers_refresh(&rd, "slice hoisting");
    }
    fr_readers_free(&rd);
    if (st != FR_OK || !*count) return st;
    FR_TRY(fr_graph_compact(g));
    return fr_graph_toposort(g);
}
