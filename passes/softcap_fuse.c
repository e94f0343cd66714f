/* Softcap fusion (see softcap_fuse.h): from each Tanh, back to the Div and forward to the Mul
 * by the same constant; the three become one ai.fp8run::Softcap. */
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

/* From the Tanh to the Mul reading it, then the chain as fr_match_softcap reads it. */
static int match_at(void *ctx, int ti, void *mv)
{
    const fr_readers *c = ctx;
    const fr_graph *g = c->g;
    const fr_node *t = &g->nodes[ti];
    if (!fr_is_onnx_op(t, "Tanh") || t->n_inputs != 1 || t->n_outputs != 1) return 0;
    const fr_node *mul = c->count[t->outputs[0]] == 1 ? fr_sole_reader(c, t->outputs[0]) : NULL;
    if (!mul || !fr_is_onnx_op(mul, "Mul") || mul->n_outputs != 1) return 0;
    match *m = mv;
    memset(m, 0, sizeof *m);
    m->y = mul->outputs[0];
    m->x = fr_match_softcap(c, m->y, &m->cap, m->dead);
    return m->x >= 0 && is_f32(g, m->x) && is_f32(g, m->y) && fr_same_dims(&g->values[m->x], &g->values[m->y]);
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
