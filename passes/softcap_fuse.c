/* Softcap fusion (see softcap_fuse.h): from each Tanh, back to the Div and forward to the Mul
 * by the same constant; the three become one ai.fp8run::Softcap. */
#include <math.h>
#include <string.h>

#include "ops/grad.h"
#include "ops/op.h"
#include "passes/pattern.h"
#include "passes/softcap_fuse.h"

typedef struct match {
    int x, y, dead[3];
    double cap;
} match;

static int is_f32(const fr_graph *g, int v) { return v >= 0 && g->values[v].dtype == FR_F32; }

/* v is read by one node only and is no graph output */
static int private_value(const fr_readers *c, int v) { return c->count[v] == 1 && fr_sole_reader(c, v) != NULL; }

static int match_at(void *ctx, int ti, void *mv)
{
    const fr_readers *c = ctx;
    const fr_graph *g = c->g;
    const fr_node *t = &g->nodes[ti];
    if (!fr_is_onnx_op(t, "Tanh") || t->n_inputs != 1 || t->n_outputs != 1) return 0;
    match *m = mv;
    memset(m, 0, sizeof *m);
    const int d = t->inputs[0], tv = t->outputs[0];
    const fr_node *dv = fr_live_producer(g, d);
    double inner, cap;
    if (!dv || dv->n_inputs != 2 || dv->n_outputs != 1 || !private_value(c, d) ||
        !fr_const_scalar(g, dv->inputs[1], &inner))
        return 0;
    const int div = fr_is_onnx_op(dv, "Div");
    if (!div && !fr_is_onnx_op(dv, "Mul")) return 0;
    const fr_node *mul = private_value(c, tv) ? fr_sole_reader(c, tv) : NULL;
    const int k = fr_binary_other(mul, "Mul", tv);
    if (k < 0 || !fr_const_scalar(g, k, &cap) || !(cap > 0) || !isfinite(cap)) return 0;
    if (div ? (float)inner != (float)cap : fabs(inner * cap - 1.0) > 1e-6) return 0;
    m->x = dv->inputs[0];
    m->y = mul->outputs[0];
    m->cap = cap;
    m->dead[0] = (int)(dv - g->nodes);
    m->dead[1] = ti;
    m->dead[2] = (int)(mul - g->nodes);
    return is_f32(g, m->x) && is_f32(g, d) && is_f32(g, tv) && is_f32(g, m->y) &&
           fr_same_dims(&g->values[m->x], &g->values[m->y]);
}

static fr_status fuse_one(void *ctx, const void *mv)
{
    const match *m = mv;
    fr_graph *g = ((fr_readers *)ctx)->g;
    char base[600];
    fr_fuse_kill(g, m->dead, 3, "fused_softcap", base, sizeof base);
    int y = m->y, nid;
    FR_TRY(fr_graph_add_node(g, "Softcap", FR_DOMAIN_FP8RUN, base, 1, &m->x, 1, &y, &nid));
    FR_TRY(fr_node_set_attr_float(&g->nodes[nid], "alpha", (float)m->cap));
    return fr_node_infer(g, nid);
}

fr_status fr_fuse_softcap(fr_graph *g, int *count)
{
    match m;
    return fr_fuse_on_readers(g, "softcap fusion", match_at, fuse_one, &m, count);
}
