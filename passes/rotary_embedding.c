/* RotaryEmbedding (opset 23) lowered onto ai.fp8run::Rotary (see rotary_embedding.h). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ops/op.h"
#include "passes/rotary_embedding.h"

typedef struct builder {
    fr_graph *g;
    char base[512];
    int k;
} builder;

/* A node op(in...) named after the lowered node, with one output: `out` when >= 0, else a
 * fresh value; its node id in *nid (may be NULL) for attributes. */
static fr_status emit(builder *b, const char *op, const char *domain, int n_in, const int *in, int out, int *y, int *nid)
{
    char name[600];
    snprintf(name, sizeof name, "%s/%s_%d", b->base, op, b->k++);
    if (out < 0) FR_TRY(fr_graph_add_unique_value(b->g, name, &out));
    int id;
    FR_TRY(fr_graph_add_node(b->g, op, domain, name, n_in, in, 1, &out, &id));
    if (nid) *nid = id;
    *y = out;
    return FR_OK;
}

/* An int64 vector constant. */
static fr_status ints(builder *b, int n, const int64_t *v, int *out)
{
    char name[600];
    snprintf(name, sizeof name, "%s/const_%d", b->base, b->k++);
    FR_TRY(fr_graph_add_unique_value(b->g, name, out));
    fr_tensor *t;
    const int64_t dim = n;
    FR_TRY(fr_tensor_new(FR_I64, 1, &dim, name, &t));
    memcpy(t->data, v, sizeof(int64_t) * (size_t)n);
    return fr_graph_set_initializer(b->g, *out, t);
}

static fr_status reshape(builder *b, int x, int n, const int64_t *shape, int out, int *y)
{
    int s;
    FR_TRY(ints(b, n, shape, &s));
    return emit(b, "Reshape", "", 2, (int[]){x, s}, out, y, NULL);
}

static fr_status with_axis(builder *b, const char *op, int n_in, const int *in, int64_t axis, int out, int *y)
{
    int nid;
    FR_TRY(emit(b, op, "", n_in, in, out, y, &nid));
    return fr_node_set_attr_int(&b->g->nodes[nid], "axis", axis);
}

/* cos or sin [B, S, R/2] (gathered first by position_ids) as Rotary reads it: R wide, each
 * frequency twice (Concat(t, t), or [c0, c0, c1, c1, ..] when interleaved), unsqueezed over
 * the head axis. */
static fr_status table(builder *b, int cache, int pos, int interleaved, int64_t head_axis, int *y)
{
    static const int64_t last = -1, flat3[3] = {0, 0, -1};
    int t = cache, ax;
    if (pos >= 0) FR_TRY(with_axis(b, "Gather", 2, (int[]){cache, pos}, 0, -1, &t));
    if (interleaved) {
        FR_TRY(ints(b, 1, &last, &ax));
        FR_TRY(emit(b, "Unsqueeze", "", 2, (int[]){t, ax}, -1, &t, NULL));
    }
    FR_TRY(with_axis(b, "Concat", 2, (int[]){t, t}, -1, -1, &t));
    if (interleaved) FR_TRY(reshape(b, t, 3, flat3, -1, &t));
    FR_TRY(ints(b, 1, &head_axis, &ax));
    return emit(b, "Unsqueeze", "", 2, (int[]){t, ax}, -1, y, NULL);
}

typedef struct rope {
    int x, cos, sin, pos, y, rank;
    int64_t interleaved, rdim, heads, hd; /* hd: X's last dim (-1 unknown; 3D: hidden / heads) */
} rope;

static fr_status read_node(const fr_graph *g, const fr_node *n, rope *r)
{
    if (n->n_inputs < 3 || n->inputs[0] < 0 || n->inputs[1] < 0 || n->inputs[2] < 0 || n->n_outputs != 1)
        return fr_node_error(n, FR_ERR_GRAPH, "RotaryEmbedding needs X, cos_cache, sin_cache and one output");
    r->x = n->inputs[0];
    r->cos = n->inputs[1];
    r->sin = n->inputs[2];
    r->pos = n->n_inputs > 3 ? n->inputs[3] : -1;
    r->y = n->outputs[0];
    FR_TRY(fr_node_attr_int(n, "interleaved", 0, &r->interleaved));
    FR_TRY(fr_node_attr_int(n, "rotary_embedding_dim", 0, &r->rdim));
    FR_TRY(fr_node_attr_int(n, "num_heads", 0, &r->heads));
    if (r->interleaved != 0 && r->interleaved != 1)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "attribute interleaved=%lld (0 or 1)", (long long)r->interleaved);
    if (r->rdim < 0 || r->rdim % 2)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "attribute rotary_embedding_dim=%lld (an even number >= 0)",
                             (long long)r->rdim);
    if (r->heads < 0) return fr_node_error(n, FR_ERR_UNSUPPORTED, "attribute num_heads=%lld", (long long)r->heads);
    const fr_value *X = &g->values[r->x];
    r->rank = X->rank;
    if (r->rank != 3 && r->rank != 4)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "input X '%s' has %s rank %d: the model must declare it 3 or 4",
                             X->name, r->rank < 0 ? "unknown" : "", r->rank);
    if (r->rank == 3 && r->heads == 0)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "attribute num_heads is required for a 3D input X '%s'", X->name);
    const int64_t last = X->dims[r->rank - 1];
    r->hd = last < 0 ? -1 : r->rank == 4 ? last : last % r->heads ? -2 : last / r->heads;
    if (r->hd == -2)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "X '%s' hidden size %lld is not a multiple of num_heads=%lld",
                             X->name, (long long)last, (long long)r->heads);
    if (r->hd >= 0 && r->rdim > r->hd)
        return fr_node_error(n, FR_ERR_UNSUPPORTED, "attribute rotary_embedding_dim=%lld exceeds the head size %lld",
                             (long long)r->rdim, (long long)r->hd);
    if (r->rdim == r->hd) r->rdim = 0; /* the whole head */
    return FR_OK;
}

static fr_status lower_one(fr_graph *g, int ni)
{
    rope r;
    FR_TRY(read_node(g, &g->nodes[ni], &r));
    builder b = {g, "", 0};
    snprintf(b.base, sizeof b.base, "%s", g->nodes[ni].name);
    g->nodes[ni].dead = 1;
    static const int64_t flat3[3] = {0, 0, -1};
    const int64_t split[4] = {0, 0, r.heads, -1};
    int x4 = r.x, c, s, xr, xp = -1, y;
    if (r.rank == 3) FR_TRY(reshape(&b, r.x, 4, split, -1, &x4));
    const int64_t head_axis = r.rank == 4 ? 1 : 2; /* [B, N, S, H] or [B, S, N, H] */
    FR_TRY(table(&b, r.cos, r.pos, (int)r.interleaved, head_axis, &c));
    FR_TRY(table(&b, r.sin, r.pos, (int)r.interleaved, head_axis, &s));
    xr = x4;
    if (r.rdim) {
        const int64_t zero = 0, end = INT64_MAX, axis = -1;
        int z, rd, e, ax;
        FR_TRY(ints(&b, 1, &zero, &z));
        FR_TRY(ints(&b, 1, &r.rdim, &rd));
        FR_TRY(ints(&b, 1, &end, &e));
        FR_TRY(ints(&b, 1, &axis, &ax));
        FR_TRY(emit(&b, "Slice", "", 4, (int[]){x4, z, rd, ax}, -1, &xr, NULL));
        FR_TRY(emit(&b, "Slice", "", 4, (int[]){x4, rd, e, ax}, -1, &xp, NULL));
    }
    /* the last step writes y itself (its value id stays, so its readers are unchanged) */
    const int last_rotary = !r.rdim && r.rank == 4;
    int nid;
    FR_TRY(fr_graph_import_opset(g, FR_DOMAIN_FP8RUN, 1));
    FR_TRY(emit(&b, "Rotary", FR_DOMAIN_FP8RUN, 3, (int[]){xr, c, s}, last_rotary ? r.y : -1, &y, &nid));
    if (r.interleaved) FR_TRY(fr_node_set_attr_int(&g->nodes[nid], "interleaved", 1));
    if (r.rdim) FR_TRY(with_axis(&b, "Concat", 2, (int[]){y, xp}, -1, r.rank == 4 ? r.y : -1, &y));
    if (r.rank == 3) FR_TRY(reshape(&b, y, 3, flat3, r.y, &y));
    return FR_OK;
}

fr_status fr_lower_rotary_embedding(fr_graph *g, int *count)
{
    int n = 0;
    const int n_nodes = g->n_nodes;
    for (int i = 0; i < n_nodes; i++) {
        const fr_node *nd = &g->nodes[i];
        if (nd->dead || nd->domain[0] || strcmp(nd->op_type, "RotaryEmbedding") != 0) continue;
        FR_TRY(lower_one(g, i));
        n++;
    }
    if (count) *count = n;
    if (!n) return FR_OK;
    FR_TRY(fr_graph_compact(g));
    return fr_graph_toposort(g);
}
