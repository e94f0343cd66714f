/* Which initializers are trained (see params.h). */
#include "graph/params.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/name_map.h"
#include "graph/params_edit.h"
#include "graph/params_unfold.h"

static char *dupn(const char *p, size_t n)
{
    char *d = fr_malloc(n + 1, "parameter record");
    if (!d) return NULL;
    memcpy(d, p, n);
    d[n] = '\0';
    return d;
}


static int is_float_init(const fr_value *v)
{
    return (v->flags & FR_VAL_INITIALIZER) && v->constant && fr_dtype_is_float(v->dtype);
}

static int all_equal(const fr_tensor *t)
{
    size_t es = fr_dtype_size(t->dtype);
    return t->nbytes <= es || memcmp(t->data, (const char *)t->data + es, t->nbytes - es) == 0;
}

/* ---- the exported program's signature: placeholder -> kind, target, in module order ---- */

typedef struct sig_entry {
    char *ph, *kind, *target;
    int present; /* the target named a value of the graph as imported */
} sig_entry;

typedef struct sig {
    sig_entry *e;
    int n;
    fr_name_map *by_ph, *by_target;
} sig;

static void sig_free(sig *s)
{
    for (int i = 0; i < s->n; i++) {
        free(s->e[i].ph);
        free(s->e[i].kind);
        free(s->e[i].target);
    }
    free(s->e);
    fr_name_map_free(s->by_ph);
    fr_name_map_free(s->by_target);
}

static const char *find_in(const char *b, const char *e, const char *needle)
{
    size_t n = strlen(needle);
    for (; (size_t)(e - b) >= n; b++)
        if (memcmp(b, needle, n) == 0) return b;
    return NULL;
}

/* Lines like "p_model_norm_weight: PARAMETER target='model.norm.weight'". */
static fr_status sig_parse(const fr_graph *g, sig *s)
{
    memset(s, 0, sizeof *s);
    const char *t = g->torch_signature;
    FR_TRY(fr_name_map_new(&s->by_ph));
    FR_TRY(fr_name_map_new(&s->by_target));
    if (!t) return FR_OK;
    size_t lines = 1;
    for (const char *p = t; *p; p++) lines += *p == '\n';
    s->e = fr_calloc(lines, sizeof *s->e, "exporter signature");
    if (!s->e) return FR_ERR_OOM;
    for (const char *l = t; *l;) {
        const char *end = strchr(l, '\n');
        if (!end) end = l + strlen(l);
        const char *colon = memchr(l, ':', (size_t)(end - l));
        const char *tg = find_in(l, end, " target='");
        const char *q = tg ? tg + 9 : NULL;
        const char *qe = q ? memchr(q, '\'', (size_t)(end - q)) : NULL;
        if (colon && qe && colon + 2 < tg) {
            sig_entry *e = &s->e[s->n];
            e->ph = dupn(l, (size_t)(colon - l));
            e->kind = dupn(colon + 2, (size_t)(tg - colon - 2));
            e->target = dupn(q, (size_t)(qe - q));
            s->n++;
            if (!e->ph || !e->kind || !e->target) return FR_ERR_OOM;
            e->present = fr_graph_find_value(g, e->target) >= 0;
            FR_TRY(fr_name_map_put(s->by_ph, e->ph, s->n - 1));
            if (fr_name_map_get(s->by_target, e->target) < 0)
                FR_TRY(fr_name_map_put(s->by_target, e->target, s->n - 1));
        }
        l = *end ? end + 1 : end;
    }
    return FR_OK;
}

static int sig_is_param(const sig *s, int i)
{
    return i >= 0 && strcmp(s->e[i].kind, "PARAMETER") == 0;
}

static int sig_has_param(const void *ctx, const char *target)
{
    const sig *s = ctx;
    return sig_is_param(s, fr_name_map_get(s->by_target, target));
}

static const char *leaf(const char *name)
{
    const char *d = strrchr(name, '.');
    return d ? d + 1 : name;
}

/* The next "%name" token of fx text *p into tok; 0 at the end. */
static int next_token(const char **p, char *tok, size_t n)
{
    while (*p && (*p = strchr(*p, '%')) != NULL) {
        const char *b = ++*p, *e = b;
        while ((*e >= 'a' && *e <= 'z') || (*e >= 'A' && *e <= 'Z') || (*e >= '0' && *e <= '9') || *e == '_') e++;
        *p = e;
        if (e == b || (size_t)(e - b) >= n) continue;
        memcpy(tok, b, (size_t)(e - b));
        tok[e - b] = '\0';
        return 1;
    }
    return 0;
}

/* The parameter a node meant when it read initializer `own`, from the fx node text: among the
 * PARAMETER placeholders it names, `own` itself, else the only one the export left out (merged
 * into another), else the only such one with own's leaf name ("weight", "bias"). -1: unknown. */
static int use_target(const sig *s, const fr_node *nd, const char *own)
{
    int cand = -1, n_cand = 0, leaf_cand = -1, n_leaf = 0;
    char tok[256];
    for (const char *p = nd->torch_fx; next_token(&p, tok, sizeof tok);) {
        int i = fr_name_map_get(s->by_ph, tok);
        if (!sig_is_param(s, i)) continue;
        if (strcmp(s->e[i].target, own) == 0) return i;
        if (s->e[i].present || i == cand || i == leaf_cand) continue;
        n_cand++;
        cand = i;
        if (strcmp(leaf(s->e[i].target), leaf(own)) == 0) {
            n_leaf++;
            leaf_cand = i;
        }
    }
    return n_cand == 1 ? cand : n_leaf == 1 ? leaf_cand : -1;
}

/* ---- who reads what: for each value, its (node, input slot) uses ---- */

typedef struct uses {
    int *start; /* n_values + 1 offsets into node/slot */
    int *node, *slot;
} uses;

static void uses_free(uses *u)
{
    free(u->start);
    free(u->node);
    free(u->slot);
}

static fr_status uses_build(const fr_graph *g, uses *u)
{
    int total = 0;
    memset(u, 0, sizeof *u);
    u->start = fr_calloc((size_t)g->n_values + 1, sizeof(int), "value uses");
    if (!u->start) return FR_ERR_OOM;
    for (int n = 0; n < g->n_nodes; n++)
        for (int k = 0; k < g->nodes[n].n_inputs; k++)
            if (g->nodes[n].inputs[k] >= 0) {
                u->start[g->nodes[n].inputs[k] + 1]++;
                total++;
            }
    for (int i = 0; i < g->n_values; i++) u->start[i + 1] += u->start[i];
    u->node = fr_malloc((size_t)(total ? total : 1) * sizeof(int), "value uses");
    u->slot = fr_malloc((size_t)(total ? total : 1) * sizeof(int), "value uses");
    int *fill = fr_malloc((size_t)(g->n_values ? g->n_values : 1) * sizeof(int), "value uses");
    if (!u->node || !u->slot || !fill) {
        free(fill);
        return FR_ERR_OOM;
    }
    memcpy(fill, u->start, (size_t)g->n_values * sizeof(int));
    for (int n = 0; n < g->n_nodes; n++)
        for (int k = 0; k < g->nodes[n].n_inputs; k++) {
            int v = g->nodes[n].inputs[k];
            if (v < 0) continue;
            u->node[fill[v]] = n;
            u->slot[fill[v]++] = k;
        }
    free(fill);
    return FR_OK;
}

/* ---- un-merging parameters the export stored once ---- */

static fr_status rename_value(fr_graph *g, int vid, const char *name)
{
    char *nn = fr_strdup(name, "parameter name");
    if (!nn) return FR_ERR_OOM;
    fr_name_map_clear(g->names);
    free(g->values[vid].name);
    g->values[vid].name = nn;
    for (int i = 0; i < g->n_values; i++) FR_TRY(fr_name_map_put(g->names, g->values[i].name, i));
    return FR_OK;
}

/* Copies of an all-equal initializer for each parameter its readers name (they were merged by
 * value); for one with varied values, the other names are ties, recorded in alias. */
static fr_status unmerge(fr_graph *g, const sig *s, const uses *u, int vid, int *alias)
{
    int split = all_equal(g->values[vid].constant);
    for (int k = u->start[vid]; k < u->start[vid + 1]; k++) {
        int t = use_target(s, &g->nodes[u->node[k]], g->values[vid].name);
        if (t < 0 || strcmp(s->e[t].target, g->values[vid].name) == 0) continue;
        if (!split) {
            if (alias[t] < 0 && fr_graph_find_value(g, s->e[t].target) < 0) alias[t] = vid;
            continue;
        }
        int nv = fr_graph_find_value(g, s->e[t].target);
        if (nv < 0) {
            fr_tensor *c;
            FR_TRY(fr_tensor_clone(g->values[vid].constant, s->e[t].target, &c));
            FR_TRY(fr_params_add(g, s->e[t].target, c, &nv));
            FR_TRY(fr_params_note(&g->values[nv], "parameter (stored merged into '%s', equal values)",
                            g->values[vid].name));
        }
        if (is_float_init(&g->values[nv])) g->nodes[u->node[k]].inputs[u->slot[k]] = nv;
    }
    return FR_OK;
}

/* torch.export reads a tied parameter through one placeholder (the last name); the signature
 * still lists the others, which no node names and the file does not hold. Such a name is paired
 * with the parameter a node reads inside a module that owns it: `model.embed_tokens` +
 * ".weight" for an embedding read as `lm_head.weight`, `cls.predictions` + ".bias" for a bias
 * read as `cls.predictions.decoder.bias` (innermost module first). */
static fr_status tie_by_scope(const fr_graph *g, const sig *s, int *alias)
{
    char *named = fr_calloc((size_t)(s->n ? s->n : 1), 1, "exporter signature");
    if (!named) return FR_ERR_OOM;
    char tok[256], buf[600];
    for (int n = 0; n < g->n_nodes; n++)
        for (const char *p = g->nodes[n].torch_fx; next_token(&p, tok, sizeof tok);) {
            int i = fr_name_map_get(s->by_ph, tok);
            if (i >= 0) named[i] = 1;
        }
    for (int n = 0; n < g->n_nodes; n++) {
        const fr_node *nd = &g->nodes[n];
        const char *sc[64];
        int ns = 0;
        for (const char *p = nd->torch_scopes; p && ns < 64 && (p = strchr(p, '\'')) != NULL; ns++) {
            sc[ns] = ++p;
            p = strchr(p, '\'');
            if (!p) break;
            p++;
        }
        for (int k = 0; k < nd->n_inputs; k++) {
            int vid = nd->inputs[k];
            if (vid < 0 || !is_float_init(&g->values[vid]) || !g->values[vid].torch_kind ||
                strcmp(g->values[vid].torch_kind, "PARAMETER") != 0)
                continue;
            /* the innermost module (the last element names the op); its parent when the
             * innermost owns the parameter read */
            for (int e = ns - 2; e >= 0 && e >= ns - 3; e--) {
                const char *end = strchr(sc[e], '\'');
                if (!end || end == sc[e]) break;
                snprintf(buf, sizeof buf, "%.*s.%s", (int)(end - sc[e]), sc[e], leaf(g->values[vid].name));
                if (strcmp(buf, g->values[vid].name) == 0) continue;
                int i = fr_name_map_get(s->by_target, buf);
                if (sig_is_param(s, i) && !named[i] && alias[i] < 0 && fr_graph_find_value(g, buf) < 0) alias[i] = vid;
                break;
            }
        }
    }
    free(named);
    return FR_OK;
}

/* A tied tensor takes the name of its group that comes first in the signature (the one
 * named_parameters() keeps). */
static fr_status name_ties(fr_graph *g, const sig *s, const int *alias)
{
    for (int i = 0; i < s->n; i++) {
        int vid = alias[i];
        if (vid < 0) continue;
        int own = fr_name_map_get(s->by_target, g->values[vid].name);
        if ((own >= 0 && own < i) || fr_graph_find_value(g, s->e[i].target) >= 0) continue;
        char *old = fr_strdup(g->values[vid].name, "parameter name");
        if (!old) return FR_ERR_OOM;
        fr_status st = rename_value(g, vid, s->e[i].target);
        if (st == FR_OK) st = fr_params_note(&g->values[vid], "parameter (tied; the file names it '%s')", old);
        free(old);
        FR_TRY(st);
    }
    return FR_OK;
}

/* addmm(b, x, W) (GPT-2's Conv1D) or linear(x, W, b) (nn.Linear, e.g. OPT's fc1) with b all
 * zeros: the exporter's optimizer drops C from the Gemm, and the parameter b with it. It trains
 * away from zero all the same: C is restored. */
static fr_status restore_gemm_bias(fr_graph *g, const sig *s, int nid)
{
    fr_node *nd = &g->nodes[nid];
    if (strcmp(nd->op_type, "Gemm") != 0 || nd->domain[0] || nd->n_inputs != 2 || !nd->torch_fx) return FR_OK;
    const char *a = strstr(nd->torch_fx, "aten.addmm");
    const int linear = !a;
    if (linear) a = strstr(nd->torch_fx, "aten.linear");
    char tok[256];
    if (!a || !(a = strstr(a, "args = (")) || !next_token(&a, tok, sizeof tok)) return FR_OK;
    if (linear && (!next_token(&a, tok, sizeof tok) || !next_token(&a, tok, sizeof tok))) return FR_OK;
    int i = fr_name_map_get(s->by_ph, tok), b = nd->inputs[1], vid;
    float beta;
    int64_t tb;
    FR_TRY(fr_node_attr_float(nd, "beta", 1.f, &beta));
    FR_TRY(fr_node_attr_int(nd, "transB", 0, &tb));
    if (!sig_is_param(s, i) || fr_graph_find_value(g, s->e[i].target) >= 0 || beta != 1.f || b < 0 ||
        g->values[b].rank != 2 || g->values[b].dims[tb ? 0 : 1] <= 0 || !fr_dtype_is_float(g->values[b].dtype))
        return FR_OK;
    fr_tensor *t;
    FR_TRY(fr_tensor_new(g->values[b].dtype, 1, &g->values[b].dims[tb ? 0 : 1], s->e[i].target, &t));
    FR_TRY(fr_params_add(g, s->e[i].target, t, &vid));
    nd = &g->nodes[nid];
    int *in = fr_realloc_array(nd->inputs, 3, sizeof(int), "node inputs");
    if (!in) return FR_ERR_OOM;
    in[2] = vid;
    nd->inputs = in;
    nd->n_inputs = 3;
    return fr_params_note(&g->values[vid], "parameter (zeros the exporter dropped from Gemm '%s')", nd->name);
}

/* ---- un-folding W^T back into Transpose(W) ---- */

/* "['x']" -> "x" (malloc'ed); NULL when the list is not exactly one name. */
static char *single_source(const char *list)
{
    size_t n = strlen(list);
    if (n < 5 || strncmp(list, "['", 2) != 0 || strcmp(list + n - 2, "']") != 0) return NULL;
    if (memchr(list + 2, '\'', n - 4)) return NULL;
    return dupn(list + 2, n - 4);
}

static fr_status transposed(const fr_tensor *f, const char *name, fr_tensor **out)
{
    int64_t d[2] = {f->dims[1], f->dims[0]};
    FR_TRY(fr_tensor_new(f->dtype, 2, d, name, out));
    size_t es = fr_dtype_size(f->dtype);
    const char *src = f->data;
    char *dst = (*out)->data;
    for (int64_t i = 0; i < d[1]; i++)
        for (int64_t j = 0; j < d[0]; j++) memcpy(dst + (size_t)(j * d[1] + i) * es, src + (size_t)(i * d[0] + j) * es, es);
    return FR_OK;
}

/* F (an initializer) becomes the output of Transpose(P). */
static fr_status make_transpose(fr_graph *g, int pid, int fid)
{
    fr_params_uninit(&g->values[fid]);
    char name[300];
    snprintf(name, sizeof name, "unfold_%s", g->values[fid].name);
    int nid;
    FR_TRY(fr_graph_add_node(g, "Transpose", "", name, 1, &pid, 1, &fid, &nid));
    return fr_node_set_attr_ints(&g->nodes[nid], "perm", 2, (const int64_t[]){1, 0});
}

/* A constant the exporter computed from a parameter and other values: rows of a table, a
 * parameter with a scalar (params_unfold.h), or anything else: that parameter is lost. */
static fr_status folded_mix(fr_graph *g, const sig *s, int fid, int *lost)
{
    char name[300];
    for (const char *p = g->values[fid].folded_from; (p = strchr(p, '\'')) != NULL;) {
        const char *e = strchr(++p, '\'');
        if (!e) break;
        if ((size_t)(e - p) < sizeof name) {
            memcpy(name, p, (size_t)(e - p));
            name[e - p] = '\0';
            if (sig_is_param(s, fr_name_map_get(s->by_target, name))) {
                int done;
                FR_TRY(fr_params_unfold_rows(g, fid, name, &done));
                if (done) return FR_OK;
                FR_TRY(fr_params_unfold_scalar(g, fid, sig_has_param, s, &done));
                if (done) return FR_OK;
                (*lost)++;
                return fr_params_note(&g->values[fid], "folded by the exporter from parameter '%s' with other values: "
                                "that parameter is not trained", name);
            }
        }
        p = e + 1;
    }
    return FR_OK;
}

static fr_status unfold(fr_graph *g, const sig *s, int fid, int *lost)
{
    char *p = single_source(g->values[fid].folded_from);
    if (!p) return folded_mix(g, s, fid, lost);
    fr_status st = FR_OK;
    if (!sig_is_param(s, fr_name_map_get(s->by_target, p))) goto done;
    if (g->values[fid].rank != 2) {
        (*lost)++;
        st = fr_params_note(&g->values[fid], "folded by the exporter from parameter '%s' through ops fp8run "
                      "cannot undo: that parameter is not trained", p);
        goto done;
    }
    fr_tensor *t;
    st = transposed(g->values[fid].constant, p, &t);
    if (st != FR_OK) goto done;
    int pid = fr_graph_find_value(g, p);
    if (pid >= 0) { /* the parameter is there too (a tie): F must be exactly its transpose */
        const fr_value *pv = &g->values[pid];
        int same = is_float_init(pv) && pv->dtype == t->dtype && pv->rank == 2 && pv->dims[0] == t->dims[0] &&
                   pv->dims[1] == t->dims[1] && memcmp(pv->constant->data, t->data, t->nbytes) == 0;
        fr_tensor_free(t);
        if (!same) {
            (*lost)++;
            st = fr_params_note(&g->values[fid], "folded by the exporter from parameter '%s' but not equal to "
                          "its transpose: a constant", p);
            goto done;
        }
    } else {
        st = fr_params_add(g, p, t, &pid);
        if (st == FR_OK) st = fr_params_note(&g->values[pid], "parameter, un-folded from '%s' (Transpose)",
                                       g->values[fid].name);
    }
    if (st == FR_OK) st = make_transpose(g, pid, fid);
done:
    free(p);
    return st;
}

/* ---- the rule for files without the record ---- */

/* Inputs (bit i = input i) that carry no gradient. */
static unsigned nondiff_inputs(const char *op)
{
    static const struct { const char *op; unsigned mask; } tab[] = {
        {"Pow", 2}, {"Where", 1}, {"Reshape", 2}, {"Expand", 2}, {"Tile", 2}, {"Unsqueeze", 2},
        {"Squeeze", 2}, {"Gather", 2}, {"GatherElements", 2}, {"GatherND", 2}, {"Slice", ~1u},
        {"Pad", ~1u}, {"ReduceSum", 2}, {"ReduceMean", 2}, {"ReduceMax", 2}, {"ReduceMin", 2},
        {"ReduceProd", 2}, {"ReduceL2", 2}, {"CumSum", 2}, {"Split", 2}, {"Trilu", 2},
        {"Resize", ~1u}, {"Dropout", ~1u}, {"TopK", 2}, {"OneHot", ~0u}, {"Range", ~0u},
        {"ConstantOfShape", ~0u}, {"Shape", ~0u}, {"Size", ~0u}, {"Equal", ~0u}, {"Less", ~0u},
        {"LessOrEqual", ~0u}, {"Greater", ~0u}, {"GreaterOrEqual", ~0u}, {"IsNaN", ~0u},
        {"IsInf", ~0u}, {"ArgMax", ~0u}, {"ArgMin", ~0u}, {"NonZero", ~0u},
    };
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strcmp(tab[i].op, op) == 0) return tab[i].mask;
    return 0;
}

static int is_additive_mask(const fr_tensor *t)
{
    int64_t n = fr_tensor_numel(t), big = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = t->dtype == FR_F32 ? ((const float *)t->data)[i] : t->dtype == FR_F64 ? ((const double *)t->data)[i] : 1;
        if (x <= -1e30)
            big++;
        else if (x != 0)
            return 0;
    }
    return big > 0;
}

/* Why the rule does not train initializer vid, or fr_status FR_OK with note left NULL. */
static fr_status rule_note(fr_graph *g, const uses *u, int vid, int *excluded)
{
    fr_value *v = &g->values[vid];
    *excluded = 1;
    if (fr_tensor_numel(v->constant) <= 1) return fr_params_note(v, "scalar");
    const char *op = NULL;
    int diff = 0;
    for (int k = u->start[vid]; k < u->start[vid + 1] && !diff; k++) {
        const fr_node *nd = &g->nodes[u->node[k]];
        if (nd->domain[0] || u->slot[k] >= 32 || !(nondiff_inputs(nd->op_type) >> u->slot[k] & 1)) diff = 1;
        op = nd->op_type;
    }
    if (op && !diff) return fr_params_note(v, "feeds only non-differentiable inputs of %s", op);
    if (is_additive_mask(v->constant)) return fr_params_note(v, "additive mask");
    *excluded = 0;
    return FR_OK;
}

/* ---- marking ---- */

static fr_status mark(fr_graph *g, const uses *u, int record)
{
    for (int i = 0; i < g->n_initializers; i++) {
        int vid = g->initializers[i], excluded;
        fr_value *v = &g->values[vid];
        if (!is_float_init(v)) continue;
        const char *kind = v->torch_kind;
        if (record && kind && strcmp(kind, "PARAMETER") == 0) {
            v->flags |= FR_VAL_PARAM;
            if (!v->param_note) FR_TRY(fr_params_note(v, "parameter"));
            continue;
        }
        v->flags &= ~FR_VAL_PARAM;
        if (record && kind) {
            FR_TRY(fr_params_note(v, "%s", strcmp(kind, "BUFFER") == 0             ? "buffer"
                                     : strcmp(kind, "CONSTANT_TENSOR") == 0 ? "constant tensor"
                                                                            : kind));
            continue;
        }
        if (record && v->folded_from) {
            if (!v->param_note) FR_TRY(fr_params_note(v, "constant folded by the exporter"));
            continue;
        }
        FR_TRY(rule_note(g, u, vid, &excluded));
        v = &g->values[vid];
        if (excluded) continue;
        if (record) {
            FR_TRY(fr_params_note(v, "not a parameter in the exporter's record"));
        } else {
            v->flags |= FR_VAL_PARAM;
            FR_TRY(fr_params_note(v, "float initializer"));
        }
    }
    return FR_OK;
}

static fr_status rewrite(fr_graph *g, const sig *s, int *lost)
{
    int n0 = g->n_values;
    /* un-fold first: a folded copy of a tied parameter is looked up by its recorded name */
    for (int vid = 0; vid < n0; vid++)
        if (is_float_init(&g->values[vid]) && g->values[vid].folded_from) FR_TRY(unfold(g, s, vid, lost));
    for (int n = 0, nn = g->n_nodes; n < nn; n++) FR_TRY(restore_gemm_bias(g, s, n));
    int w = 0;
    for (int i = 0; i < g->n_initializers; i++)
        if (g->values[g->initializers[i]].flags & FR_VAL_INITIALIZER) g->initializers[w++] = g->initializers[i];
    g->n_initializers = w;
    uses u;
    int *alias = fr_malloc((size_t)(s->n ? s->n : 1) * sizeof(int), "exporter signature");
    if (!alias) return FR_ERR_OOM;
    for (int i = 0; i < s->n; i++) alias[i] = -1;
    fr_status st = uses_build(g, &u);
    n0 = g->n_values;
    for (int vid = 0; vid < n0 && st == FR_OK; vid++) {
        const fr_value *v = &g->values[vid];
        if (is_float_init(v) && v->torch_kind && strcmp(v->torch_kind, "PARAMETER") == 0)
            st = unmerge(g, s, &u, vid, alias);
    }
    uses_free(&u);
    if (st == FR_OK) st = tie_by_scope(g, s, alias);
    if (st == FR_OK) st = name_ties(g, s, alias);
    free(alias);
    FR_TRY(st);
    return fr_graph_toposort(g);
}

fr_status fr_params_select(fr_graph *g, int *n_lost)
{
    int lost = 0, record = g->torch_signature != NULL;
    for (int i = 0; i < g->n_values && !record; i++) record = g->values[i].torch_kind != NULL;
    sig s;
    uses u = {0};
    fr_status st = sig_parse(g, &s);
    if (st == FR_OK && record) st = rewrite(g, &s, &lost);
    sig_free(&s);
    if (st == FR_OK) st = uses_build(g, &u);
    if (st == FR_OK) st = mark(g, &u, record);
    uses_free(&u);
    if (n_lost) *n_lost = lost;
    return st;
}
