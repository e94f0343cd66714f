/* Q/K/V outputs of a wider Split grouped apart (see qkv_split_regroup.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/grad.h"
#include "ops/op.h"
#include "passes/pattern.h"
#include "passes/qkv_split_regroup.h"

/* Follow v forward through sole readers that are layout, Rotary or RMSNormalization nodes
 * (reading v as their first input) to a fused Attention: its node id and the input slot v's
 * chain arrives at; -1 when the chain ends elsewhere. */
static int reaches_attention(const fr_readers *c, int v, int *slot)
{
    const fr_graph *g = c->g;
    for (int steps = 0; steps < 8; steps++) {
        const fr_node *r = c->count[v] == 1 ? fr_sole_reader(c, v) : NULL;
        if (!r) return -1;
        if (strcmp(r->op_type, "Attention") == 0 && strcmp(r->domain, FR_DOMAIN_FP8RUN) == 0) {
            for (int k = 0; k < 3; k++)
                if (r->inputs[k] == v) {
                    *slot = k;
                    return (int)(r - g->nodes);
                }
            return -1;
        }
        const int pass = fr_is_onnx_op(r, "Reshape") || fr_is_onnx_op(r, "Transpose") ||
                         strcmp(r->op_type, "Rotary") == 0 || strcmp(r->op_type, "RMSNormalization") == 0;
        if (!pass || r->inputs[0] != v || r->n_outputs < 1) return -1;
        v = r->outputs[0];
    }
    return -1;
}

/* The sizes of Split n's outputs along its axis (the 'split' input, else the attribute), into
 * sizes[n_outputs]; 0 when they are not constants. */
static int split_sizes(const fr_graph *g, const fr_node *n, int64_t *sizes)
{
    const fr_tensor *t = n->n_inputs > 1 && n->inputs[1] >= 0 ? g->values[n->inputs[1]].constant : NULL;
    if (t && fr_tensor_numel(t) == n->n_outputs) {
        for (int i = 0; i < n->n_outputs; i++) sizes[i] = fr_tensor_get_i64(t, i);
        return 1;
    }
    const fr_attr *a = fr_node_attr(n, "split");
    if (n->n_inputs > 1 && n->inputs[1] >= 0) return 0;
    if (!a || a->type != FR_ATTR_INTS || a->n != n->n_outputs) return 0;
    memcpy(sizes, a->ints, (size_t)a->n * sizeof *sizes);
    return 1;
}

/* Split s (n outputs, sizes) as an outer Split with outputs i..i+2 joined into one value and an
 * inner Split of that value into them. */
static fr_status regroup(fr_graph *g, int s, int i, const int64_t *sizes)
{
    const fr_node *sp = &g->nodes[s];
    const int n = sp->n_outputs, x = sp->inputs[0];
    int64_t axis;
    FR_TRY(fr_node_attr_int(sp, "axis", 0, &axis));
    char nm[600], base[520];
    snprintf(base, sizeof base, "%s", sp->name);
    int *outer = malloc((size_t)n * sizeof *outer), inner[3], qkv, so, si, nid;
    int64_t *osz = malloc((size_t)n * sizeof *osz);
    if (!outer || !osz) {
        free(outer);
        free(osz);
        return FR_ERR_OOM;
    }
    int m = 0;
    for (int k = 0; k < n; k++) {
        if (k > i && k <= i + 2) continue;
        outer[m] = sp->outputs[k];
        osz[m++] = k == i ? sizes[i] + sizes[i + 1] + sizes[i + 2] : sizes[k];
    }
    for (int k = 0; k < 3; k++) inner[k] = sp->outputs[i + k];
    snprintf(nm, sizeof nm, "%s/qkv", base);
    fr_status st = fr_graph_add_unique_value(g, nm, &qkv);
    outer[i] = qkv;
    snprintf(nm, sizeof nm, "%s/outer_sizes", base);
    if (st == FR_OK) st = fr_pattern_const_i64(g, nm, m, osz, &so);
    snprintf(nm, sizeof nm, "%s/qkv_sizes", base);
    if (st == FR_OK) st = fr_pattern_const_i64(g, nm, 3, sizes + i, &si);
    g->nodes[s].dead = 1;
    snprintf(nm, sizeof nm, "%s/outer", base);
    if (st == FR_OK) st = fr_graph_add_node(g, "Split", FR_DOMAIN_ONNX, nm, 2, (const int[]){x, so}, m, outer, &nid);
    if (st == FR_OK) st = fr_node_set_attr_int(&g->nodes[nid], "axis", axis);
    if (st == FR_OK) st = fr_node_infer(g, nid);
    snprintf(nm, sizeof nm, "%s/qkv_split", base);
    if (st == FR_OK) st = fr_graph_add_node(g, "Split", FR_DOMAIN_ONNX, nm, 2, (const int[]){qkv, si}, 3, inner, &nid);
    if (st == FR_OK) st = fr_node_set_attr_int(&g->nodes[nid], "axis", axis);
    if (st == FR_OK) st = fr_node_infer(g, nid);
    free(outer);
    free(osz);
    return st;
}

fr_status fr_regroup_qkv_splits(fr_graph *g, int *count)
{
    *count = 0;
    if (fr_graph_opset(g, "") < 13) return FR_OK; /* 'split' as an input */
    fr_readers rd = {g, NULL};
    fr_status st = fr_readers_refresh(&rd, "Q/K/V Split regrouping");
    const int n0 = g->n_nodes;
    for (int s = 0; s < n0 && st == FR_OK; s++) {
        const fr_node *sp = &g->nodes[s];
        if (sp->dead || !fr_is_onnx_op(sp, "Split") || sp->n_outputs < 4 || sp->n_outputs > 64) continue;
        int64_t sizes[64];
        if (!split_sizes(g, sp, sizes)) continue;
        for (int i = 0; i + 2 < sp->n_outputs; i++) {
            int slot[3], att[3];
            for (int k = 0; k < 3; k++) att[k] = sp->outputs[i + k] >= 0 ? reaches_attention(&rd, sp->outputs[i + k], &slot[k]) : -1;
            if (att[0] < 0 || att[0] != att[1] || att[1] != att[2] || slot[0] != 0 || slot[1] != 1 || slot[2] != 2)
                continue;
            st = regroup(g, s, i, sizes);
            if (st == FR_OK) (*count)++;
            if (st == FR_OK) st = fr_readers_refresh(&rd, "Q/K/V Split regrouping");
            break;
        }
    }
    fr_readers_free(&rd);
    if (st != FR_OK || !*count) return st;
    FR_TRY(fr_graph_compact(g));
    return fr_graph_toposort(g);
}
