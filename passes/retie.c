/* Re-tying weights that an exporter untied (see retie.h). Candidates are compared at a few
 * sampled elements first, then in full, so untied weights cost no pass over them (hashing an
 * 8B model's embedding table column by column took seconds of every session's build). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "passes/retie.h"

static int is_candidate(const fr_value *v)
{
    return (v->flags & FR_VAL_PARAM) && v->constant && v->dtype == FR_F32 && v->rank == 2 &&
           !(v->flags & FR_VAL_OUTPUT) && fr_tensor_numel(v->constant) > 1;
}

/* A tensor whose elements are all equal carries no identity (zeros, ones). */
static int all_equal(const fr_tensor *t)
{
    const uint32_t *u = t->data;
    int64_t n = fr_tensor_numel(t);
    for (int64_t i = 1; i < n; i++)
        if (u[i] != u[0]) return 0;
    return 1;
}

/* 64 elements of copy against src at spread-out places (through the transpose when transposed):
 * 0 rules a tie out; 1 leaves it to equal_words. */
static int probe_equal(const fr_tensor *copy, const fr_tensor *src, int transposed)
{
    const uint32_t *c = copy->data, *s = src->data;
    const int64_t R = src->dims[0], C = src->dims[1], n = R * C;
    for (int64_t p = 0; p < 64; p++) {
        const int64_t x = n * p / 64, i = x / C, j = x % C;
        if ((transposed ? c[j * R + i] : c[x]) != s[x]) return 0;
    }
    return 1;
}

static int equal_words(const fr_tensor *copy, const fr_tensor *src, int transposed)
{
    const uint32_t *c = copy->data, *s = src->data;
    int64_t R = src->dims[0], C = src->dims[1];
    if (!transposed) return memcmp(c, s, (size_t)(R * C) * sizeof(uint32_t)) == 0;
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++)
            if (c[j * R + i] != s[i * C + j]) return 0;
    return 1;
}

/* Is value v read as the table of a Gather? (the embedding side of a tie) */
static int is_gather_table(const fr_graph *g, int v)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        if (!n->dead && n->n_inputs >= 1 && n->inputs[0] == v && n->domain[0] == '\0' &&
            strcmp(n->op_type, "Gather") == 0)
            return 1;
    }
    return 0;
}

/* Readers of `copy` read `with` instead. */
static void replace_uses(fr_graph *g, int copy, int with)
{
    for (int i = 0; i < g->n_nodes; i++) {
        fr_node *n = &g->nodes[i];
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] == copy) n->inputs[k] = with;
    }
}

static fr_status add_transpose(fr_graph *g, int src, int copy, int *out)
{
    char name[600];
    snprintf(name, sizeof name, "%s__retied", g->values[copy].name);
    FR_TRY(fr_graph_add_unique_value(g, name, out));
    const fr_value *sv = &g->values[src];
    int64_t dims[2] = {sv->dims[1], sv->dims[0]};
    fr_value_set_shape(&g->values[*out], FR_F32, 2, dims);
    int nid, in[1] = {src};
    snprintf(name, sizeof name, "retie/%s", g->values[copy].name);
    FR_TRY(fr_graph_add_node(g, "Transpose", FR_DOMAIN_ONNX, name, 1, in, 1, out, &nid));
    int64_t perm[2] = {1, 0};
    FR_TRY(fr_node_set_attr_ints(&g->nodes[nid], "perm", 2, perm));
    g->nodes[nid].op = fr_op_find(FR_DOMAIN_ONNX, "Transpose");
    if (!g->nodes[nid].op) return fr_error(FR_ERR_INTERNAL, "retie: Transpose is not registered");
    return FR_OK;
}

fr_status fr_retie_params(fr_graph *g, fr_tie **ties, int *n_ties)
{
    *ties = NULL;
    *n_ties = 0;
    int n_src = 0, n_vals = g->n_values;
    int *src = fr_malloc((size_t)(n_vals ? n_vals : 1) * sizeof(int), "retie");
    fr_status st = !src ? FR_ERR_OOM : FR_OK;
    for (int v = 0; st == FR_OK && v < n_vals; v++) {
        const fr_value *sv = &g->values[v];
        if (!is_candidate(sv) || all_equal(sv->constant) || !is_gather_table(g, v)) continue;
        src[n_src++] = v;
    }
    for (int c = 0; st == FR_OK && n_src > 0 && c < n_vals; c++) {
        const fr_value *cv = &g->values[c];
        if (!is_candidate(cv)) continue;
        int checked = 0;
        for (int k = 0; k < n_src; k++) {
            const fr_value *sv = &g->values[src[k]];
            if (src[k] == c) continue;
            int same = cv->dims[0] == sv->dims[0] && cv->dims[1] == sv->dims[1];
            int tr = cv->dims[0] == sv->dims[1] && cv->dims[1] == sv->dims[0];
            if (!same && !tr) continue;
            if (!checked) {
                if (all_equal(cv->constant)) break;
                checked = 1;
            }
            int transposed = -1;
            if (tr && probe_equal(cv->constant, sv->constant, 1) && equal_words(cv->constant, sv->constant, 1))
                transposed = 1;
            else if (same && probe_equal(cv->constant, sv->constant, 0) && equal_words(cv->constant, sv->constant, 0))
                transposed = 0;
            if (transposed < 0) continue;
            fr_tie *nt = fr_realloc_array(*ties, (size_t)*n_ties + 1, sizeof *nt, "retie");
            if (!nt) {
                st = FR_ERR_OOM;
                break;
            }
            *ties = nt;
            int with = src[k];
            if (transposed) st = add_transpose(g, src[k], c, &with);
            if (st != FR_OK) break;
            replace_uses(g, c, with);
            if (transposed) { /* the new Transpose reads the source, not the copy */
                fr_node *tn = &g->nodes[g->n_nodes - 1];
                tn->inputs[0] = src[k];
            }
            g->values[c].flags &= ~FR_VAL_PARAM;
            nt[(*n_ties)++] = (fr_tie){c, src[k], transposed};
            break;
        }
    }
    free(src);
    if (st == FR_OK && *n_ties) st = fr_graph_toposort(g);
    if (st != FR_OK) {
        free(*ties);
        *ties = NULL;
        *n_ties = 0;
    }
    return st;
}

void fr_retie_sync(const fr_graph *from, const fr_tie *ties, int n_ties, fr_graph *to)
{
    for (int i = 0; i < n_ties; i++) {
        int s = fr_graph_find_value(to, from->values[ties[i].source].name);
        int c = fr_graph_find_value(to, from->values[ties[i].copy].name);
        if (s < 0 || c < 0 || !to->values[s].constant || !to->values[c].constant) continue;
        const fr_tensor *st = to->values[s].constant;
        fr_tensor *ct = to->values[c].constant;
        const float *sd = st->data;
        float *cd = ct->data;
        int64_t R = st->dims[0], C = st->dims[1];
        if (!ties[i].transposed) {
            memcpy(cd, sd, (size_t)(R * C) * sizeof(float));
            continue;
        }
        for (int64_t r = 0; r < R; r++)
            for (int64_t k = 0; k < C; k++) cd[k * R + r] = sd[r * C + k];
    }
}
