/* Un-folding op(w, scalar) back into the parameter w, and the rows of a position table a static
 * export folded (see params_unfold.h). */
#include "graph/params_unfold.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/params_edit.h"

enum { U_ADD, U_SUB, U_MUL };
static const char *const op_name[] = {"Add", "Sub", "Mul"};
static const char op_char[] = {'+', '-', '*'};

/* The fx op of a value named after its fx node: "add_4" -> U_ADD; -1 otherwise. */
static int fx_op(const char *name)
{
    static const char *const pre[] = {"add", "sub", "mul"};
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(pre[k]);
        if (strncmp(name, pre[k], n) != 0) continue;
        const char *r = name + n;
        if (!*r || (r[0] == '_' && r[1] && strspn(r + 1, "0123456789") == strlen(r + 1))) return k;
    }
    return -1;
}

static const char *leaf(const char *name)
{
    const char *d = strrchr(name, '.');
    return d ? d + 1 : name;
}

static int ident_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.';
}

/* Nothing binds tighter on that side: the expression starts at src+i (after spaces, the line's
 * start or one of "(=,") or ends at p (after spaces, the end or one of "),#"). */
static int opens_at(const char *src, const char *p)
{
    while (p > src && p[-1] == ' ') p--;
    return p == src || strchr("(=,", p[-1]) != NULL;
}

static int closes_at(const char *p)
{
    p += strspn(p, " ");
    return !*p || strchr("),#", *p) != NULL;
}

/* "<num> <op> self.<lf>" or "self.<lf>[.float()] <op> <num>" as a whole expression in a
 * source line ("output * (1.0 + self.weight.float())"): 1 and *c when exactly one is found. The
 * literal on the left is not taken for Sub (c - w is another op). */
static int literal_beside(const char *src, const char *lf, int op, double *c)
{
    char pat[320];
    snprintf(pat, sizeof pat, "self.%s", lf);
    size_t pn = strlen(pat);
    int found = 0;
    for (const char *p = src; (p = strstr(p, pat)) != NULL; p += pn) {
        if ((p > src && ident_char(p[-1])) || (p[pn] && ident_char(p[pn]) && p[pn] != '.')) continue;
        const char *r = p + pn;
        if (strncmp(r, ".float()", 8) == 0) r += 8;
        /* left */
        const char *e = p;
        while (e > src && e[-1] == ' ') e--;
        if (op != U_SUB && e > src && e[-1] == op_char[op] && closes_at(r)) {
            e--;
            while (e > src && e[-1] == ' ') e--;
            const char *b = e;
            while (b > src && ((b[-1] >= '0' && b[-1] <= '9') || b[-1] == '.')) b--;
            char *end;
            double v = b < e ? strtod(b, &end) : 0;
            if (b < e && end == e && opens_at(src, b)) {
                *c = v;
                found++;
            }
        }
        /* right */
        r += strspn(r, " ");
        if (*r == op_char[op] && opens_at(src, p)) {
            r++;
            r += strspn(r, " ");
            char *end;
            double v = strtod(r, &end);
            if (end > r && *r >= '0' && *r <= '9' && closes_at(end)) {
                *c = v;
                found++;
            }
        }
    }
    return found == 1;
}

/* The innermost module of a node's name_scopes ("['', 'model', 'model.norm', 'mul_22']" ->
 * "model.norm"), into buf; 0 when there is none. */
static int scope_of(const fr_node *nd, char *buf, size_t n)
{
    const char *sc[64];
    int ns = 0;
    for (const char *p = nd->torch_scopes; p && ns < 64 && (p = strchr(p, '\'')) != NULL; ns++) {
        sc[ns] = ++p;
        p = strchr(p, '\'');
        if (!p) return 0;
        p++;
    }
    if (ns < 2) return 0;
    size_t len = (size_t)(strchr(sc[ns - 2], '\'') - sc[ns - 2]);
    if (len == 0 || len >= n) return 0;
    memcpy(buf, sc[ns - 2], len);
    buf[len] = '\0';
    return 1;
}

/* The one parameter of fid's folded_from list into pname and the scalar c when the file
 * holds it (*have_c); 0 when the list has another parameter or a held non-scalar. */
static int fold_sources(const fr_graph *g, int fid, fr_param_pred is_param, const void *ctx, char *pname,
                        size_t pn, double *c, int *have_c)
{
    int n_param = 0;
    char name[300];
    *have_c = 0;
    for (const char *p = g->values[fid].folded_from; (p = strchr(p, '\'')) != NULL;) {
        const char *e = strchr(++p, '\'');
        if (!e || (size_t)(e - p) >= sizeof name) return 0;
        memcpy(name, p, (size_t)(e - p));
        name[e - p] = '\0';
        p = e + 1;
        if (is_param(ctx, name)) {
            if (n_param++ || strlen(name) >= pn) return 0;
            strcpy(pname, name);
            continue;
        }
        int v = fr_graph_find_value(g, name);
        if (v < 0) continue; /* folded away with the parameter */
        const fr_tensor *t = g->values[v].constant;
        if (!t || fr_tensor_numel(t) != 1 || t->dtype != FR_F32 || *have_c) return 0;
        *c = ((const float *)t->data)[0];
        *have_c = 1;
    }
    return n_param == 1;
}

/* w with op(w, c) == v bit for bit in every element; NULL (no error) when not exact. */
static fr_status invert(const fr_tensor *v, int op, float c, const char *name, fr_tensor **out)
{
    *out = NULL;
    if (v->dtype != FR_F32 || (op == U_MUL && c == 0.f)) return FR_OK;
    fr_tensor *w;
    FR_TRY(fr_tensor_new(v->dtype, v->rank, v->dims, name, &w));
    const float *x = v->data;
    float *y = w->data;
    for (int64_t i = 0, n = fr_tensor_numel(v); i < n; i++) {
        volatile float r = op == U_ADD ? x[i] - c : op == U_SUB ? x[i] + c : x[i] / c;
        volatile float back = op == U_ADD ? r + c : op == U_SUB ? r - c : r * c;
        float b = back;
        if (memcmp(&b, &x[i], sizeof b) != 0) {
            fr_tensor_free(w);
            return FR_OK;
        }
        y[i] = r;
    }
    *out = w;
    return FR_OK;
}

static int all_equal(const fr_tensor *t)
{
    size_t es = fr_dtype_size(t->dtype);
    return t->nbytes <= es || memcmp(t->data, (const char *)t->data + es, t->nbytes - es) == 0;
}

/* out = Op(p, cid): a new node. */
static fr_status add_op(fr_graph *g, int op, int pid, int cid, int out)
{
    char name[400];
    snprintf(name, sizeof name, "unfold_%s", g->values[out].name);
    int in[2] = {pid, cid}, nid;
    return fr_graph_add_node(g, op_name[op], "", name, 2, in, 1, &out, &nid);
}

/* Readers of fid inside another module that owns an unheld parameter `<module>.<leaf>` get
 * their own copy w_i and Op(w_i, c). */
static fr_status split(fr_graph *g, int fid, int op, const char *lit, int pid, int cid, fr_param_pred is_param,
                       const void *ctx)
{
    char scope[300], pname[400], vname[500];
    for (int n = 0; n < g->n_nodes; n++)
        for (int k = 0; k < g->nodes[n].n_inputs; k++) {
            if (g->nodes[n].inputs[k] != fid || !scope_of(&g->nodes[n], scope, sizeof scope)) continue;
            snprintf(pname, sizeof pname, "%s.%s", scope, leaf(g->values[pid].name));
            snprintf(vname, sizeof vname, "%s(%s)", op_name[op], pname);
            int out = fr_graph_find_value(g, vname);
            if (out < 0) {
                if (strcmp(pname, g->values[pid].name) == 0 || !is_param(ctx, pname) ||
                    fr_graph_find_value(g, pname) >= 0)
                    continue;
                fr_tensor *t;
                int np;
                FR_TRY(fr_tensor_clone(g->values[pid].constant, pname, &t));
                FR_TRY(fr_params_add(g, pname, t, &np));
                FR_TRY(fr_params_note(&g->values[np], "parameter, un-folded from '%s' (%s %s; stored merged into "
                                      "one, equal values)", g->values[fid].name, op_name[op], lit));
                FR_TRY(fr_graph_add_value(g, vname, &out));
                const fr_value *f = &g->values[fid];
                fr_value_set_shape(&g->values[out], f->dtype, f->rank, f->dims);
                FR_TRY(add_op(g, op, np, cid, out));
            }
            g->nodes[n].inputs[k] = out;
        }
    return FR_OK;
}

fr_status fr_params_unfold_scalar(fr_graph *g, int fid, fr_param_pred is_param, const void *ctx, int *done)
{
    char pname[300], lit[64];
    double c = 0;
    int have_c, op = fx_op(g->values[fid].name);
    *done = 0;
    if (op < 0 || !fold_sources(g, fid, is_param, ctx, pname, sizeof pname, &c, &have_c) ||
        fr_graph_find_value(g, pname) >= 0)
        return FR_OK;
    /* else from the source line, every reader that has one agreeing */
    for (int n = 0; n < g->n_nodes && have_c <= 0; n++)
        for (int k = 0; k < g->nodes[n].n_inputs; k++) {
            double r;
            if (g->nodes[n].inputs[k] != fid || !g->nodes[n].torch_src) continue;
            if (!literal_beside(g->nodes[n].torch_src, leaf(pname), op, &r) || (have_c && r != c)) return FR_OK;
            c = r;
            have_c = -1;
            break;
        }
    if (!have_c) return FR_OK;
    fr_tensor *w, *ct;
    FR_TRY(invert(g->values[fid].constant, op, (float)c, pname, &w));
    if (!w) return FR_OK;
    int pid, cid;
    FR_TRY(fr_params_add(g, pname, w, &pid));
    snprintf(lit, sizeof lit, "%g", c);
    FR_TRY(fr_params_note(&g->values[pid], "parameter, un-folded from '%s' (%s %s)", g->values[fid].name,
                          op_name[op], lit));
    char cname[400];
    snprintf(cname, sizeof cname, "%s_scalar", g->values[fid].name);
    FR_TRY(fr_graph_add_unique_value(g, cname, &cid));
    FR_TRY(fr_tensor_new(FR_F32, 0, NULL, cname, &ct));
    *(float *)ct->data = (float)c;
    FR_TRY(fr_graph_set_initializer(g, cid, ct));
    fr_params_uninit(&g->values[fid]); /* computed again */
    FR_TRY(add_op(g, op, pid, cid, fid));
    if (all_equal(g->values[pid].constant)) FR_TRY(split(g, fid, op, lit, pid, cid, is_param, ctx));
    *done = 1;
    return FR_OK;
}

/* ---- a static export's position embedding: the rows of the table it reads ---- */

/* Named after the aten.embedding it replaced ("embedding_1"). */
static int is_lookup(const char *name)
{
    if (strncmp(name, "embedding", 9) != 0) return 0;
    if (!name[9]) return 1;
    if (name[9] != '_' || !name[10]) return 0;
    return strspn(name + 10, "0123456789") == strlen(name + 10);
}

/* The positions read are 0..T-1: the fold took them from an arange (GPT-2's cache_position
 * with no past) or a slice of a position_ids buffer (BERT's arange buffer). */
static int from_first_rows(const char *folded)
{
    return strstr(folded, "'arange'") || strstr(folded, "position_ids'");
}

/* The B slices of a [B, ...] float32 tensor hold the same bits. */
static int same_slices(const fr_tensor *t)
{
    if (t->dtype != FR_F32 || t->rank < 1 || t->dims[0] < 2) return 0;
    const size_t slice = (size_t)(fr_tensor_numel(t) / t->dims[0]) * sizeof(float);
    const unsigned char *d = t->data;
    for (int64_t b = 1; b < t->dims[0]; b++)
        if (memcmp(d, d + (size_t)b * slice, slice) != 0) return 0;
    return 1;
}

/* A lookup folded at the same positions for every row of the batch (OPT's positions come
 * from the attention mask, so the fold is [B, T, D]): PyTorch trains those table rows once,
 * with the gradient summed over the batch. So one [1, T, D] copy is the parameter, and an
 * Expand gives the B rows (whose backward sums them), not B copies trained apart. */
static fr_status shared_rows(fr_graph *g, int fid, const char *table)
{
    const fr_value *f = &g->values[fid];
    const int r = f->rank;
    int64_t dims[FR_MAX_RANK];
    memcpy(dims, f->dims, (size_t)r * sizeof *dims);
    char name[400], fname[300];
    snprintf(fname, sizeof fname, "%s", f->name);
    snprintf(name, sizeof name, "%s[0]", fname);
    fr_tensor *one, *shape;
    int pid, sid, nid;
    int64_t one_dims[FR_MAX_RANK];
    memcpy(one_dims, dims, sizeof one_dims);
    one_dims[0] = 1;
    FR_TRY(fr_tensor_new(FR_F32, r, one_dims, name, &one));
    memcpy(one->data, f->constant->data, (size_t)fr_tensor_numel(one) * sizeof(float));
    FR_TRY(fr_params_add(g, name, one, &pid));
    FR_TRY(fr_params_note(&g->values[pid], "batch row 0 of '%s', the rows of parameter '%s' the exporter folded at "
                          "fixed positions, equal in all %lld rows: trained once and broadcast", fname, table,
                          (long long)dims[0]));
    snprintf(name, sizeof name, "%s_shape", fname);
    FR_TRY(fr_graph_add_unique_value(g, name, &sid));
    FR_TRY(fr_tensor_new(FR_I64, 1, (const int64_t[]){r}, name, &shape));
    memcpy(shape->data, dims, (size_t)r * sizeof *dims);
    FR_TRY(fr_graph_set_initializer(g, sid, shape));
    fr_params_uninit(&g->values[fid]);
    snprintf(name, sizeof name, "unfold_%s", fname);
    int in[2] = {pid, sid};
    return fr_graph_add_node(g, "Expand", "", name, 2, in, 1, &fid, &nid);
}

fr_status fr_params_unfold_rows(fr_graph *g, int fid, const char *table, int *done)
{
    fr_value *f = &g->values[fid];
    *done = 0;
    if (!is_lookup(f->name) || fr_graph_find_value(g, table) >= 0) return FR_OK;
    *done = 1;
    /* [1, T, D] or [T, D]: rows 0..T-1 of the [positions, D] table; [B, T, D] of B equal
     * slices: one [1, T, D] trained and broadcast; else trained as stored */
    int r = f->rank;
    if (r == 3 && f->dims[0] > 1 && same_slices(f->constant)) return shared_rows(g, fid, table);
    if (!from_first_rows(f->folded_from) || !(r == 2 || (r == 3 && f->dims[0] == 1))) {
        f->torch_kind = fr_strdup("PARAMETER", "parameter record");
        if (!f->torch_kind) return FR_ERR_OOM;
        return fr_params_note(f, "trained in place of the rows of parameter '%s' it holds (the exporter folded "
                              "the lookup at fixed positions)", table);
    }
    int64_t t = f->dims[r - 2], d[2] = {t, f->dims[r - 1]}, dims[3] = {0};
    memcpy(dims, f->dims, (size_t)r * sizeof *dims);
    char name[400];
    snprintf(name, sizeof name, "%s[0:%lld]", table, (long long)t);
    fr_tensor *rows, *shape;
    int pid, sid, nid;
    FR_TRY(fr_tensor_clone(f->constant, name, &rows));
    rows->rank = 2;
    memcpy(rows->dims, d, sizeof d);
    FR_TRY(fr_params_add(g, name, rows, &pid));
    FR_TRY(fr_params_note(&g->values[pid], "rows 0..%lld of parameter '%s' (the exporter folded the lookup at "
                          "positions 0..%lld; the file holds no other row of the table)",
                          (long long)t - 1, table, (long long)t - 1));
    snprintf(name, sizeof name, "%s_shape", g->values[fid].name);
    FR_TRY(fr_graph_add_unique_value(g, name, &sid));
    FR_TRY(fr_tensor_new(FR_I64, 1, (const int64_t[]){r}, name, &shape));
    memcpy(shape->data, dims, (size_t)r * sizeof *dims);
    FR_TRY(fr_graph_set_initializer(g, sid, shape));
    fr_params_uninit(&g->values[fid]);
    snprintf(name, sizeof name, "unfold_%s", g->values[fid].name);
    int in[2] = {pid, sid};
    return fr_graph_add_node(g, "Reshape", "", name, 2, in, 1, &fid, &nid);
}
