/* Residual + RMSNorm fusion (see residual_norm_fuse.h): from each RMSNormalization, the Add
 * producing its input; both become one ai.fp8run::AddRMSNorm. */
#include <string.h>

#include "ops/grad.h"
#include "ops/norm.h"
#include "ops/op.h"
#include "passes/pattern.h"
#include "passes/residual_norm_fuse.h"

typedef struct match {
    int norm, add;
    int64_t axis;
    float eps;
} match;

static int is_rmsnorm(const fr_node *n)
{
    if (n->dead || strcmp(n->op_type, "RMSNormalization") != 0) return 0;
    return !n->domain[0] || strcmp(n->domain, FR_DOMAIN_FP8RUN) == 0;
}

/* w holds exactly the normalized dims of x (what AddRMSNorm accepts) */
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

static int match_at(void *ctx, int ni, void *mv)
{
    const fr_readers *c = ctx;
    match *m = mv;
    const fr_graph *g = c->g;
    const fr_node *nn = &g->nodes[ni];
    if (!is_rmsnorm(nn) || nn->n_inputs != 2 || nn->n_outputs != 1 || nn->inputs[0] < 0 || nn->inputs[1] < 0 ||
        nn->outputs[0] < 0)
        return 0;
    const int h = nn->inputs[0];
    const fr_node *add = fr_live_producer(g, h);
    if (!add || !fr_is_onnx_op(add, "Add") || add->n_inputs != 2 || add->n_outputs != 1 || add->inputs[0] < 0 ||
        add->inputs[1] < 0)
        return 0;
    const fr_value *H = &g->values[h], *A = &g->values[add->inputs[0]], *B = &g->values[add->inputs[1]];
    if (H->dtype != FR_F32 || A->dtype != FR_F32 || B->dtype != FR_F32 || !fr_same_dims(A, H) || !fr_same_dims(B, H) ||
        g->values[nn->outputs[0]].dtype != FR_F32)
        return 0;
    fr_norm_cfg cfg;
    if (fr_norm_config(nn, H->rank, H->dims, &cfg) != FR_OK) return 0;
    if (!scale_ok(&g->values[nn->inputs[1]], H, cfg.axis, cfg.len)) return 0;
    m->norm = ni;
    m->add = (int)(add - g->nodes);
    m->axis = cfg.axis;
    m->eps = cfg.eps;
    return 1;
}

static fr_status fuse_one(void *ctx, const void *mv)
{
    const match *m = mv;
    fr_graph *g = ((fr_readers *)ctx)->g;
    const fr_node *add = &g->nodes[m->add], *nn = &g->nodes[m->norm];
    int in[3] = {add->inputs[0], add->inputs[1], nn->inputs[1]}, out[2] = {add->outputs[0], nn->outputs[0]}, nid;
    const int dead[2] = {m->add, m->norm};
    char base[600];
    fr_fuse_kill(g, dead, 2, "AddRMSNorm", base, sizeof base);
    FR_TRY(fr_graph_add_node(g, "AddRMSNorm", FR_DOMAIN_FP8RUN, base, 3, in, 2, out, &nid));
    FR_TRY(fr_node_set_attr_int(&g->nodes[nid], "axis", m->axis));
    FR_TRY(fr_node_set_attr_float(&g->nodes[nid], "epsilon", m->eps));
    return fr_node_infer(g, nid);
}

fr_status fr_fuse_residual_norm(fr_graph *g, int *count)
{
    match m;
    memset(&m, 0, sizeof m);
    return fr_fuse_on_readers(g, "residual RMSNorm fusion", match_at, fuse_one, &m, count);
}
