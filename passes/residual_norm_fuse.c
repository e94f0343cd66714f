/* Residual + norm fusion (see residual_norm_fuse.h): from each RMSNormalization or
 * LayerNormalization, the Add producing its input; both become one ai.fp8run::AddRMSNorm or
 * AddLayerNorm. */
#include <stdio.h>
#include <string.h>

#include "ops/add_norm.h"
#include "ops/grad.h"
#include "ops/norm.h"
#include "ops/op.h"
#include "passes/pattern.h"
#include "passes/residual_norm_fuse.h"

typedef struct match {
    int norm, add, layer, swap; /* layer: LayerNorm (else RMSNorm); swap: the Add's B is its input 0 */
    int norm2;                  /* a second LayerNorm of the sum (a parallel block), or -1 */
    int reshape;                /* the Reshape between the Add and the LayerNorm, or -1 */
    int64_t axis;
    float eps;
} match;

static int is_rmsnorm(const fr_node *n)
{
    if (n->dead || strcmp(n->op_type, "RMSNormalization") != 0) return 0;
    return !n->domain[0] || strcmp(n->domain, FR_DOMAIN_FP8RUN) == 0;
}

/* w holds exactly the normalized dims of x (what AddRMSNorm and AddLayerNorm accept) */
static int scale_ok(const fr_value *w, const fr_value *x, int axis, int64_t len)
{
    if (w->dtype != FR_F32 || w->rank > x->rank) return 0;
    int64_t numel = 1;
    for (int k = 0; k < w->rank; k++) {
        const int xk = x->rank - w->rank + k;
        numel *= w->dims[k];
        if (xk < axis ? w->dims[k] != 1 : w->dims[k] != x->dims[xk]) return 0;
    }
    return numel == len;
}

#define WHY(...) (why ? (void)snprintf(why, why_n, __VA_ARGS__) : (void)0, 0)

/* Norm node nn's own part (its outputs, Scale and Bias against the sum H, its attributes): 1 with
 * *cfg, else 0 with the reason in why. */
static int norm_ok(const fr_graph *g, const fr_node *nn, int layer, const fr_value *H, fr_norm_cfg *cfg, char *why,
                   size_t why_n)
{
    const int n_w = layer && nn->n_inputs > 2 && nn->inputs[2] >= 0 ? 3 : 2;
    if (nn->n_inputs < 2 || nn->n_inputs > n_w || nn->inputs[0] < 0 || nn->inputs[1] < 0 || nn->n_outputs < 1 ||
        nn->outputs[0] < 0)
        return WHY("an unusual norm node (inputs or outputs missing)");
    for (int o = 1; o < nn->n_outputs; o++)
        if (nn->outputs[o] >= 0) return WHY("its Mean / InvStdDev outputs are used");
    if (g->values[nn->outputs[0]].dtype != FR_F32) return WHY("not float32");
    if (fr_norm_config(nn, H->rank, H->dims, cfg) != FR_OK) return WHY("its attributes are not supported");
    const fr_value *w = &g->values[nn->inputs[1]];
    if (!scale_ok(w, H, cfg->axis, cfg->len))
        return WHY("its Scale is not float32 of exactly the normalized dims (leading 1s allowed)");
    if (n_w == 3) {
        const fr_value *b = &g->values[nn->inputs[2]];
        if (!scale_ok(b, H, cfg->axis, cfg->len) || !fr_same_dims(b, w))
            return WHY("its bias is not float32 of the Scale's shape");
    }
    return 1;
}

/* Another LayerNormalization of the sum h than node ni that AddLayerNorm takes as its second norm
 * (same axis and epsilon as cfg), or -1: the first in node order. */
static int second_norm(const fr_graph *g, int ni, int h, const fr_norm_cfg *cfg)
{
    for (int j = 0; j < g->n_nodes; j++) {
        const fr_node *nj = &g->nodes[j];
        if (j == ni || nj->dead || !fr_is_onnx_op(nj, "LayerNormalization") || nj->n_inputs < 1 || nj->inputs[0] != h)
            continue;
        fr_norm_cfg c2;
        if (norm_ok(g, nj, 1, &g->values[h], &c2, NULL, 0) && c2.axis == cfg->axis && c2.eps == cfg->eps) return j;
    }
    return -1;
}

/* Reshape node p (OPT flattens the residual stream to [N T, D] before each norm): its index when
 * it reads an Add's sum that nothing else reads (the Add then goes with it), else -1 */
static int reshape_of_sum(const fr_graph *g, const fr_node *p)
{
    const int s = p->n_inputs >= 1 ? p->inputs[0] : -1;
    if (s < 0 || (g->values[s].flags & FR_VAL_OUTPUT) || p->n_outputs != 1) return -1;
    const fr_node *add = fr_live_producer(g, s);
    if (!add || !fr_is_onnx_op(add, "Add")) return -1;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        for (int k = 0; !n->dead && n != p && k < n->n_inputs; k++)
            if (n->inputs[k] == s) return -1;
    }
    return (int)(p - g->nodes);
}

/* Whether norm node ni and the Add before it fuse (m filled); else 0 with the reason in why. */
static int check(const fr_graph *g, int ni, match *m, char *why, size_t why_n)
{
    const fr_node *nn = &g->nodes[ni];
    const int layer = !nn->dead && fr_is_onnx_op(nn, "LayerNormalization");
    if (!layer && !is_rmsnorm(nn)) return WHY("not a norm");
    if (nn->n_inputs < 1 || nn->inputs[0] < 0) return WHY("an unusual norm node (inputs or outputs missing)");
    const int h = nn->inputs[0];
    const fr_node *add = fr_live_producer(g, h);
    const int reshape = layer && add && fr_is_onnx_op(add, "Reshape") ? reshape_of_sum(g, add) : -1;
    if (reshape >= 0) add = fr_live_producer(g, add->inputs[0]);
    if (!add || !fr_is_onnx_op(add, "Add"))
        return WHY("its input is not an Add (nor a Reshape of one that only the Reshape reads)");
    if (add->n_inputs != 2 || add->n_outputs != 1 || add->inputs[0] < 0 || add->inputs[1] < 0)
        return WHY("an unusual Add");
    const fr_value *H = &g->values[h], *A = &g->values[add->inputs[0]], *B = &g->values[add->inputs[1]];
    if (H->dtype != FR_F32 || A->dtype != FR_F32 || B->dtype != FR_F32) return WHY("not float32");
    fr_norm_cfg cfg;
    if (!norm_ok(g, nn, layer, H, &cfg, why, why_n)) return 0;
    int swap = 0;
    if (reshape >= 0) {
        /* the fused node reads A and B reshaped as the sum was (their Reshapes are views) */
        const fr_value *S = &g->values[add->outputs[0]];
        if (!fr_same_dims(A, S) || !fr_same_dims(B, S))
            return WHY("the Add before the Reshape broadcasts (a reshaped sum is fused from two addends of one shape)");
    } else if (!fr_same_dims(A, H) || !fr_same_dims(B, H)) {
        /* LayerNorm: one addend may repeat over the leading dims (a position embedding) */
        swap = fr_same_dims(B, H);
        if (!layer || !fr_same_dims(swap ? B : A, H) || fr_add_layer_norm_b_rows(H, swap ? A : B, cfg.axis, cfg.len) <= 0)
            return WHY(layer ? "the Add broadcasts otherwise than over the leading dims of the sum"
                             : "the Add broadcasts (AddRMSNorm takes two addends of one shape)");
    }
    m->norm = ni;
    m->norm2 = layer ? second_norm(g, ni, h, &cfg) : -1;
    m->reshape = reshape;
    m->add = (int)(add - g->nodes);
    m->layer = layer;
    m->swap = swap;
    m->axis = cfg.axis;
    m->eps = cfg.eps;
    return 1;
}

static int match_at(void *ctx, int ni, void *mv)
{
    const fr_readers *c = ctx;
    return check(c->g, ni, mv, NULL, 0);
}

int fr_residual_norm_why(const fr_graph *g, int node, char *why, size_t n)
{
    match m;
    return check(g, node, &m, why, n);
}

static fr_status fuse_one(void *ctx, const void *mv)
{
    const match *m = mv;
    fr_graph *g = ((fr_readers *)ctx)->g;
    const fr_node *add = &g->nodes[m->add], *nn = &g->nodes[m->norm];
    const fr_node *n2 = m->norm2 >= 0 ? &g->nodes[m->norm2] : NULL;
    const char *op = m->layer ? "AddLayerNorm" : "AddRMSNorm";
    /* A, B, Scale[, Bias[, Scale2[, Bias2]]] -> H, Y[, Y2] */
    int in[6] = {add->inputs[m->swap], add->inputs[!m->swap], nn->inputs[1], nn->n_inputs > 2 ? nn->inputs[2] : -1,
                 n2 ? n2->inputs[1] : -1, n2 && n2->n_inputs > 2 ? n2->inputs[2] : -1};
    int n_in = 6;
    while (n_in > 3 && in[n_in - 1] < 0) n_in--;
    /* H: the sum, or (through a Reshape) the reshaped sum, which the norm read */
    int out[3] = {m->reshape >= 0 ? nn->inputs[0] : add->outputs[0], nn->outputs[0], n2 ? n2->outputs[0] : -1}, nid;
    const int n_dead = 2 + (n2 != NULL) + (m->reshape >= 0);
    const int dead[4] = {m->add, m->norm, n2 ? m->norm2 : m->reshape, m->reshape};
    char base[600];
    fr_fuse_kill(g, dead, n_dead, op, base, sizeof base);
    for (int k = 0; m->reshape >= 0 && k < 2; k++) { /* A and B as the sum was reshaped */
        const fr_value *h = &g->values[out[0]];
        int64_t dims[FR_MAX_RANK];
        const int rank = h->rank;
        memcpy(dims, h->dims, sizeof(int64_t) * (size_t)rank);
        int r = -1;
        FR_TRY(fr_pattern_reshape(g, in[k], rank, dims, base, &r));
        in[k] = r;
    }
    FR_TRY(fr_graph_add_node(g, op, FR_DOMAIN_FP8RUN, base, n_in, in, n2 ? 3 : 2, out, &nid));
    FR_TRY(fr_node_set_attr_int(&g->nodes[nid], "axis", m->axis));
    FR_TRY(fr_node_set_attr_float(&g->nodes[nid], "epsilon", m->eps));
    return fr_node_infer(g, nid);
}

fr_status fr_fuse_residual_norm(fr_graph *g, int *count)
{
    match m;
    memset(&m, 0, sizeof m);
    return fr_fuse_on_readers(g, "residual norm fusion", match_at, fuse_one, &m, count);
}
