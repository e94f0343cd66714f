/* The attention mask read symbolically (see attention_mask.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops/op.h"
#include "passes/attention_fuse.h"
#include "passes/attention_mask.h"
#include "passes/pattern.h"

#define MASKED_MAX (-1e30) /* an additive mask drops a score at or below this */
#define MAX_ATOMS 8
#define MAX_DEPTH 48
#define RAMP_MAX ((int64_t)1 << 26) /* constants checked element by element up to this size */

/* c0 + sum_a c[a] * coord[a] over a value's coordinates; c[a] is 0 on unit dims. */
typedef struct lin {
    int64_t c0, c[FR_MAX_RANK];
} lin;

/* pad = 0: l <= 0.  pad = 1: input[b, k] != 0 (the analysis' one padding input). */
typedef struct atom {
    int pad;
    lin l, b, k;
} atom;

enum { S_LIN, S_BOOL, S_PADV, S_ADD, S_TUPLE };

/* What one value computes. S_LIN: l. S_BOOL: the conjunction a[0..na) (none: all true).
 * S_PADV: input[b, k] itself (not yet tested). S_ADD: 0 where the conjunction holds, dropped
 * elsewhere. S_TUPLE: an index tuple on the last axis, component j = t[j] (over the others). */
typedef struct sym {
    int kind, rank;
    int64_t dims[FR_MAX_RANK];
    lin l, b, k;
    lin t[4];
    int nt;
    atom a[MAX_ATOMS];
    int na;
} sym;

typedef struct actx {
    const fr_graph *g;
    int pad_input;
    int depth;
    char *why;
    size_t nwhy;
} actx;

static int fail(actx *cx, const char *fmt, const char *name)
{
    if (!cx->why[0]) snprintf(cx->why, cx->nwhy, fmt, name ? name : "?");
    return 0;
}

static void lin_axis(lin *l, int a)
{
    memset(l, 0, sizeof *l);
    l->c[a] = 1;
}

/* Coefficients moved by map (input axis -> output axis, -1: a unit axis dropped). */
static void lin_map(lin *l, int rank, const int *map)
{
    lin o;
    memset(&o, 0, sizeof o);
    o.c0 = l->c0;
    for (int a = 0; a < rank; a++)
        if (map[a] >= 0) o.c[map[a]] = l->c[a];
    *l = o;
}

static void sym_map(sym *s, const int *map, int rank, const int64_t *dims)
{
    const int r0 = s->rank;
    lin_map(&s->l, r0, map);
    lin_map(&s->b, r0, map);
    lin_map(&s->k, r0, map);
    for (int j = 0; j < s->nt; j++) lin_map(&s->t[j], r0, map);
    for (int i = 0; i < s->na; i++) {
        lin_map(&s->a[i].l, r0, map);
        lin_map(&s->a[i].b, r0, map);
        lin_map(&s->a[i].k, r0, map);
    }
    s->rank = rank;
    memcpy(s->dims, dims, sizeof(int64_t) * (size_t)rank);
}

/* Right-aligned broadcast of s to the rank and dims of value v. */
static void sym_broadcast(sym *s, const fr_value *v)
{
    int map[FR_MAX_RANK];
    for (int a = 0; a < s->rank; a++) map[a] = a + v->rank - s->rank;
    sym_map(s, map, v->rank, v->dims);
}

/* The atom of a comparison x OP y (integers), as d <= 0. */
static atom cmp_atom(const lin *x, const lin *y, const char *op)
{
    atom t;
    memset(&t, 0, sizeof t);
    const int le = strcmp(op, "LessOrEqual") == 0 || strcmp(op, "Less") == 0;
    const lin *p = le ? x : y, *q = le ? y : x; /* p <= q or p < q */
    t.l.c0 = p->c0 - q->c0;
    for (int a = 0; a < FR_MAX_RANK; a++) t.l.c[a] = p->c[a] - q->c[a];
    if (strcmp(op, "Less") == 0 || strcmp(op, "Greater") == 0) t.l.c0 += 1;
    return t;
}

/* A constant small enough to check element by element. */
static int checkable(const fr_tensor *t) { return t && fr_tensor_numel(t) <= RAMP_MAX; }

/* Component j of nj (the last axis; nj = 0: no tuple axis) of constant t as an affine form of
 * the leading `rank` coordinates. */
static int const_ramp(const fr_tensor *t, int rank, const int64_t *dims, int j, int nj, lin *l)
{
    const int64_t step = nj ? nj : 1;
    int64_t n = 1, stride[FR_MAX_RANK];
    for (int a = rank - 1; a >= 0; a--) {
        stride[a] = n;
        n *= dims[a];
    }
    if (!checkable(t) || n == 0 || n * step != fr_tensor_numel(t)) return 0;
    memset(l, 0, sizeof *l);
    const double c0 = fr_tensor_get_f64(t, j);
    if (c0 != floor(c0) || fabs(c0) > 1e15) return 0;
    l->c0 = (int64_t)c0;
    for (int a = 0; a < rank; a++)
        if (dims[a] > 1) l->c[a] = (int64_t)fr_tensor_get_f64(t, stride[a] * step + j) - l->c0;
    int64_t coord[FR_MAX_RANK] = {0};
    for (int64_t e = 0; e < n; e++) {
        int64_t want = l->c0;
        for (int a = 0; a < rank; a++) want += l->c[a] * coord[a];
        if (fr_tensor_get_f64(t, e * step + j) != (double)want) return 0;
        for (int a = rank - 1; a >= 0 && ++coord[a] == dims[a]; a--) coord[a] = 0;
    }
    return 1;
}

/* A constant: an integer ramp, all true, or a constant causal / window mask (last two dims). */
static int eval_const(actx *cx, const fr_value *v, sym *s)
{
    const fr_tensor *t = v->constant;
    if (t->dtype != FR_BOOL) {
        if (!const_ramp(t, v->rank, v->dims, 0, 0, &s->l)) return fail(cx, "the constant '%s' is no ramp of positions", v->name);
        s->kind = S_LIN;
        return 1;
    }
    s->kind = S_BOOL;
    int64_t w = 0;
    const int r = v->rank;
    int all = checkable(t);
    for (int64_t e = 0; all && e < fr_tensor_numel(t); e++) all = fr_tensor_get_f64(t, e) != 0;
    if (all) return 1;
    const int kind = r >= 2 && checkable(t) ? fr_attn_classify_mask(t, 1, v->dims[r - 2], v->dims[r - 1], &w)
                                                      : FR_ATTN_MASK_BAD;
    if (kind == FR_ATTN_MASK_BAD) return fail(cx, "the constant mask '%s' is neither causal nor a sliding window", v->name);
    if (kind == FR_ATTN_MASK_NONE) return 1;
    memset(s->a, 0, sizeof s->a[0] * 2);
    s->a[0].l.c[r - 1] = 1; /* k - q <= 0 */
    s->a[0].l.c[r - 2] = -1;
    s->na = 1;
    if (w > 0) { /* q - k - w + 1 <= 0 */
        s->a[1].l.c[r - 1] = -1;
        s->a[1].l.c[r - 2] = 1;
        s->a[1].l.c0 = 1 - w;
        s->na = 2;
    }
    return 1;
}

/* The axes of an Unsqueeze/Squeeze: the second input (opset >= 13) or the attribute; *n = -1
 * when there are none (Squeeze: every unit dim). */
static int node_axes(const fr_graph *g, const fr_node *n, int64_t *axes, int *na)
{
    *na = -1;
    if (n->n_inputs > 1 && n->inputs[1] >= 0) {
        const fr_tensor *t = g->values[n->inputs[1]].constant;
        if (!t || fr_tensor_numel(t) > FR_MAX_RANK) return 0;
        *na = (int)fr_tensor_numel(t);
        for (int i = 0; i < *na; i++) axes[i] = fr_tensor_get_i64(t, i);
        return 1;
    }
    const fr_attr *a = fr_node_attr(n, "axes");
    if (!a) return 1;
    if (a->type != FR_ATTR_INTS || a->n > FR_MAX_RANK) return 0;
    *na = a->n;
    memcpy(axes, a->ints, sizeof(int64_t) * (size_t)a->n);
    return 1;
}

static int eval(actx *cx, int v, sym *s);

/* Views: Unsqueeze, Squeeze, Reshape that only adds or removes unit dims, Expand; y the output. */
static int eval_view(actx *cx, const fr_node *n, const fr_value *y, sym *s)
{
    const fr_graph *g = cx->g;
    if (!eval(cx, n->inputs[0], s)) return 0;
    const fr_value *x = &g->values[n->inputs[0]];
    int map[FR_MAX_RANK];
    if (fr_is_onnx_op(n, "Expand")) {
        sym_broadcast(s, y);
        return 1;
    }
    if (fr_is_onnx_op(n, "Unsqueeze") || fr_is_onnx_op(n, "Squeeze")) {
        int64_t axes[FR_MAX_RANK];
        int na, mark[FR_MAX_RANK] = {0};
        const int unsq = fr_is_onnx_op(n, "Unsqueeze"), rr = unsq ? y->rank : x->rank;
        if (!node_axes(g, n, axes, &na)) return fail(cx, "the axes of '%s' are not constant", n->name);
        for (int i = 0; i < na; i++) {
            const int64_t a = axes[i] < 0 ? axes[i] + rr : axes[i];
            if (a < 0 || a >= rr) return fail(cx, "'%s' has an axis out of range", n->name);
            mark[a] = 1;
        }
        if (!unsq && na < 0)
            for (int a = 0; a < rr; a++) mark[a] = x->dims[a] == 1;
        for (int a = 0, o = 0; a < (unsq ? y->rank : x->rank); a++) {
            if (unsq && !mark[a]) map[o++] = a;
            if (!unsq) map[a] = mark[a] ? -1 : o++;
        }
        sym_map(s, map, y->rank, y->dims);
        return 1;
    }
    /* Reshape: the dims other than 1 the same, in order */
    int o = 0;
    for (int a = 0; a < x->rank; a++) {
        while (o < y->rank && y->dims[o] == 1 && x->dims[a] != 1) o++;
        if (x->dims[a] == 1) {
            map[a] = -1;
            continue;
        }
        if (o >= y->rank || y->dims[o] != x->dims[a]) return fail(cx, "'%s' reshapes more than unit dims", n->name);
        map[a] = o++;
    }
    for (; o < y->rank; o++)
        if (y->dims[o] != 1) return fail(cx, "'%s' reshapes more than unit dims", n->name);
    sym_map(s, map, y->rank, y->dims);
    return 1;
}

/* Binary ops on positions and booleans (inputs broadcast to y). */
static int eval_binary(actx *cx, const fr_node *n, const fr_value *y, sym *s)
{
    sym a, b;
    if (!eval(cx, n->inputs[0], &a) || !eval(cx, n->inputs[1], &b)) return 0;
    sym_broadcast(&a, y);
    sym_broadcast(&b, y);
    *s = a;
    if (fr_is_onnx_op(n, "And")) {
        if (a.kind != S_BOOL || b.kind != S_BOOL || a.na + b.na > MAX_ATOMS)
            return fail(cx, "'%s' is an And of values other than masks", n->name);
        memcpy(s->a + a.na, b.a, sizeof b.a[0] * (size_t)b.na);
        s->na = a.na + b.na;
        return 1;
    }
    if (a.kind != S_LIN || b.kind != S_LIN) return fail(cx, "'%s' computes with values other than positions", n->name);
    const char *op = n->op_type;
    if (!strcmp(op, "Add") || !strcmp(op, "Sub")) {
        const int64_t sg = !strcmp(op, "Add") ? 1 : -1;
        s->l.c0 = a.l.c0 + sg * b.l.c0;
        for (int d = 0; d < FR_MAX_RANK; d++) s->l.c[d] = a.l.c[d] + sg * b.l.c[d];
        return 1;
    }
    if (!strcmp(op, "Mul")) {
        int bc = 1, ac = 1;
        for (int d = 0; d < FR_MAX_RANK; d++) {
            bc = bc && b.l.c[d] == 0;
            ac = ac && a.l.c[d] == 0;
        }
        if (!ac && !bc) return fail(cx, "'%s' multiplies two positions", n->name);
        const lin *x = bc ? &a.l : &b.l;
        const int64_t f = bc ? b.l.c0 : a.l.c0;
        s->l.c0 = x->c0 * f;
        for (int d = 0; d < FR_MAX_RANK; d++) s->l.c[d] = x->c[d] * f;
        return 1;
    }
    s->kind = S_BOOL;
    s->na = 1;
    if (!strcmp(op, "Equal")) {
        s->a[0] = cmp_atom(&a.l, &b.l, "LessOrEqual");
        s->a[1] = cmp_atom(&a.l, &b.l, "GreaterOrEqual");
        s->na = 2;
        return 1;
    }
    s->a[0] = cmp_atom(&a.l, &b.l, op);
    return 1;
}

/* GatherND(input or Cast(input, bool), (batch, key) index tuples): the input at those indices. */
static int eval_gathernd(actx *cx, const fr_node *n, const fr_value *y, sym *s)
{
    const fr_graph *g = cx->g;
    int64_t bd;
    if (fr_node_attr_int(n, "batch_dims", 0, &bd) != FR_OK || bd != 0)
        return fail(cx, "'%s' gathers with batch_dims", n->name);
    sym d, ix;
    if (!eval(cx, n->inputs[0], &d)) return 0;
    const fr_value *iv = &g->values[n->inputs[1]];
    if (iv->rank < 1 || iv->dims[iv->rank - 1] != 2 || d.rank != 2)
        return fail(cx, "'%s' gathers other than (batch, key) pairs", n->name);
    ix.rank = iv->rank;
    memcpy(ix.dims, iv->dims, sizeof(int64_t) * (size_t)iv->rank);
    if (iv->constant) {
        ix.kind = S_TUPLE;
        ix.nt = 2;
        for (int j = 0; j < 2; j++)
            if (!const_ramp(iv->constant, iv->rank - 1, iv->dims, j, 2, &ix.t[j]))
                return fail(cx, "the indices of '%s' are no ramp of positions", n->name);
    } else if (!eval(cx, n->inputs[1], &ix)) {
        return 0;
    }
    if (ix.kind != S_TUPLE || ix.nt != 2) return fail(cx, "the indices of '%s' are no (batch, key) pairs", n->name);
    /* the gathered value must be the input itself (its coordinate 0 the batch, 1 the key) */
    const atom *pa = d.kind == S_BOOL && d.na == 1 && d.a[0].pad ? &d.a[0] : NULL;
    const lin *b = d.kind == S_PADV ? &d.b : pa ? &pa->b : NULL, *k = d.kind == S_PADV ? &d.k : pa ? &pa->k : NULL;
    if (!b || b->c0 || k->c0 || b->c[0] != (d.dims[0] > 1) || b->c[1] || k->c[0] || k->c[1] != (d.dims[1] > 1))
        return fail(cx, "'%s' gathers from a value other than the padding input", n->name);
    *s = d;
    memset(&s->b, 0, sizeof s->b);
    memset(&s->k, 0, sizeof s->k);
    lin *nb = s->kind == S_PADV ? &s->b : &s->a[0].b, *nk = s->kind == S_PADV ? &s->k : &s->a[0].k;
    *nb = ix.t[0];
    *nk = ix.t[1];
    int map[FR_MAX_RANK];
    for (int a = 0; a < iv->rank - 1; a++) map[a] = a;
    map[iv->rank - 1] = -1;
    s->rank = iv->rank; /* the tuple forms' coordinates: the indices' leading axes */
    sym_map(s, map, y->rank, y->dims);
    return 1;
}

static int eval_node(actx *cx, const fr_node *n, const fr_value *y, sym *s)
{
    const fr_graph *g = cx->g;
    if (fr_is_onnx_op(n, "Identity")) return eval(cx, n->inputs[0], s);
    if (fr_is_onnx_op(n, "Unsqueeze") || fr_is_onnx_op(n, "Squeeze") || fr_is_onnx_op(n, "Reshape") ||
        fr_is_onnx_op(n, "Expand"))
        return eval_view(cx, n, y, s);
    if (fr_is_onnx_op(n, "Cast")) {
        if (!eval(cx, n->inputs[0], s)) return 0;
        if (y->dtype != FR_BOOL) {
            if (s->kind == S_LIN || s->kind == S_PADV) return 1;
            return fail(cx, "'%s' casts a mask to numbers", n->name);
        }
        if (s->kind == S_BOOL) return 1;
        if (s->kind != S_PADV) return fail(cx, "'%s' casts positions to bool", n->name);
        atom t = {.pad = 1, .b = s->b, .k = s->k};
        s->kind = S_BOOL;
        s->a[0] = t;
        s->na = 1;
        return 1;
    }
    if (fr_is_onnx_op(n, "Range")) {
        double st, dl;
        if (!fr_const_scalar(g, n->inputs[0], &st) || !fr_const_scalar(g, n->inputs[2], &dl) || st != floor(st) ||
            dl != floor(dl))
            return fail(cx, "'%s' is a Range of other than constant integer start and step", n->name);
        s->kind = S_LIN;
        lin_axis(&s->l, 0);
        s->l.c[0] = y->dims[0] > 1 ? (int64_t)dl : 0;
        s->l.c0 = (int64_t)st;
        return 1;
    }
    if (fr_is_onnx_op(n, "Neg")) {
        if (!eval(cx, n->inputs[0], s) || s->kind != S_LIN) return fail(cx, "'%s' negates other than positions", n->name);
        s->l.c0 = -s->l.c0;
        for (int d = 0; d < FR_MAX_RANK; d++) s->l.c[d] = -s->l.c[d];
        return 1;
    }
    if (fr_is_onnx_op(n, "Not")) {
        if (!eval(cx, n->inputs[0], s) || s->kind != S_BOOL || s->na != 1 || s->a[0].pad)
            return fail(cx, "'%s' negates other than one comparison", n->name);
        lin *l = &s->a[0].l; /* not (l <= 0)  <=>  -l + 1 <= 0 */
        l->c0 = 1 - l->c0;
        for (int d = 0; d < FR_MAX_RANK; d++) l->c[d] = -l->c[d];
        return 1;
    }
    static const char *const bin[] = {"And", "Add", "Sub", "Mul", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Equal"};
    for (size_t i = 0; i < sizeof bin / sizeof bin[0]; i++)
        if (fr_is_onnx_op(n, bin[i]) && n->n_inputs == 2) return eval_binary(cx, n, y, s);
    if (fr_is_onnx_op(n, "GatherND") && n->n_inputs == 2) return eval_gathernd(cx, n, y, s);
    if (fr_is_onnx_op(n, "Concat") && n->n_inputs >= 1 && n->n_inputs <= 4) {
        int64_t axis;
        if (fr_node_attr_int(n, "axis", 0, &axis) != FR_OK || (axis != -1 && axis != y->rank - 1))
            return fail(cx, "'%s' concatenates other than index tuples", n->name);
        s->kind = S_TUPLE;
        s->nt = n->n_inputs;
        s->rank = y->rank;
        memcpy(s->dims, y->dims, sizeof(int64_t) * (size_t)y->rank);
        for (int j = 0; j < n->n_inputs; j++) {
            sym p;
            if (!eval(cx, n->inputs[j], &p)) return 0;
            if (p.kind != S_LIN || p.rank != y->rank || p.dims[p.rank - 1] != 1)
                return fail(cx, "'%s' concatenates other than index tuples", n->name);
            s->t[j] = p.l;
        }
        return 1;
    }
    if (fr_is_onnx_op(n, "Where") && n->n_inputs == 3) {
        double zero;
        const fr_tensor *ft = g->values[n->inputs[2]].constant;
        int fill = ft && fr_dtype_is_float(ft->dtype) && fr_tensor_numel(ft) >= 1 &&
                   !(g->values[n->inputs[2]].flags & FR_VAL_PARAM) && checkable(ft);
        for (int64_t e = 0; fill && e < fr_tensor_numel(ft); e++) fill = fr_tensor_get_f64(ft, e) <= MASKED_MAX;
        if (!fill || !fr_const_scalar(g, n->inputs[1], &zero) || zero != 0)
            return fail(cx, "'%s' is a Where other than (mask, 0, lowest)", n->name);
        if (!eval(cx, n->inputs[0], s)) return 0;
        if (s->kind != S_BOOL) return fail(cx, "the condition of '%s' is no mask", n->name);
        sym_broadcast(s, y);
        s->kind = S_ADD;
        return 1;
    }
    return fail(cx, "the mask is computed by '%s', an op the symbolic reading does not take", n->name);
}

static int eval(actx *cx, int v, sym *s)
{
    const fr_graph *g = cx->g;
    const fr_value *val = &g->values[v];
    memset(s, 0, sizeof *s);
    if (cx->depth >= MAX_DEPTH) return fail(cx, "the mask chain is deeper than the reading goes (at '%s')", val->name);
    if (val->rank < 0 || val->rank > FR_MAX_RANK) return fail(cx, "'%s' has no known shape", val->name);
    for (int d = 0; d < val->rank; d++)
        if (val->dims[d] < 0) return fail(cx, "'%s' has no known shape", val->name);
    if (val->flags & FR_VAL_PARAM) return fail(cx, "the mask reads the trained value '%s'", val->name);
    s->rank = val->rank;
    memcpy(s->dims, val->dims, sizeof(int64_t) * (size_t)val->rank);
    if (val->constant) return eval_const(cx, val, s);
    if (val->flags & FR_VAL_INPUT) {
        if (val->rank != 2 || !(fr_dtype_is_int(val->dtype) || val->dtype == FR_BOOL))
            return fail(cx, "the mask reads the input '%s', not a [batch, keys] padding mask", val->name);
        if (cx->pad_input >= 0 && cx->pad_input != v)
            return fail(cx, "the mask reads two inputs (the second '%s')", val->name);
        cx->pad_input = v;
        s->kind = S_PADV;
        if (val->dims[0] > 1) lin_axis(&s->b, 0);
        if (val->dims[1] > 1) lin_axis(&s->k, 1);
        return 1;
    }
    const fr_node *n = fr_live_producer(g, v);
    if (!n) return fail(cx, "'%s' has no producer", val->name);
    cx->depth++;
    const int ok = eval_node(cx, n, val, s);
    cx->depth--;
    if (ok) { /* a unit dim's coordinate is 0: its coefficient means nothing */
        for (int d = 0; d < s->rank; d++)
            if (s->dims[d] == 1) {
                s->l.c[d] = s->b.c[d] = s->k.c[d] = 0;
                for (int i = 0; i < s->na; i++) s->a[i].l.c[d] = s->a[i].b.c[d] = s->a[i].k.c[d] = 0;
            }
    }
    return ok;
}

/* l is exactly coordinate `axis` (axis < 0: the constant 0). */
static int is_coord(const lin *l, int rank, int axis)
{
    if (l->c0) return 0;
    for (int a = 0; a < rank; a++)
        if (l->c[a] != (a == axis)) return 0;
    return 1;
}

static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int fr_attn_mask_symbolic(const fr_graph *g, int x, int boolean, const fr_value *sv, fr_attn_mask_info *info)
{
    memset(info, 0, sizeof *info);
    info->seg = info->ones = -1;
    actx cx = {g, -1, 0, info->why, sizeof info->why};
    sym s;
    if (sv->rank < 2 || !eval(&cx, x, &s)) return info->kind = FR_ATTN_MASK_BAD;
    const int r = sv->rank, rm = s.rank, off = r - rm;
    const int64_t Tq = sv->dims[r - 2], Tk = sv->dims[r - 1];
    if (s.kind != (boolean ? S_BOOL : S_ADD) || rm > r) {
        fail(&cx, "'%s' is no mask of the scores", g->values[x].name);
        return info->kind = FR_ATTN_MASK_BAD;
    }
    for (int a = 0; a < rm; a++)
        if (s.dims[a] != 1 && s.dims[a] != sv->dims[a + off]) {
            fail(&cx, "'%s' does not broadcast to the scores", g->values[x].name);
            return info->kind = FR_ATTN_MASK_BAD;
        }
    const int aq = rm - 2, ak = rm - 1, ab = off == 0 ? 0 : -1;
    int causal = 0;
    int64_t window = 0;
    for (int i = 0; i < s.na; i++) {
        const atom *t = &s.a[i];
        if (t->pad) {
            const fr_value *in = &g->values[cx.pad_input];
            const int bax = sv->dims[0] > 1 || in->dims[0] > 1 ? ab : -1;
            if (in->dims[0] != sv->dims[0] || in->dims[1] != Tk || !is_coord(&t->b, rm, bax) ||
                !is_coord(&t->k, rm, Tk > 1 ? ak : -1)) {
                fail(&cx, "the input '%s' is read at other than (batch, key)", in->name);
                return info->kind = FR_ATTN_MASK_BAD;
            }
            if (in->flags & FR_VAL_ONES) {
                info->ones = cx.pad_input;
            } else if (in->dtype != FR_I64 && in->dtype != FR_I32) { /* the segment ids' types */
                fail(&cx, "the padding input '%s' is neither int64 nor int32", in->name);
                return info->kind = FR_ATTN_MASK_BAD;
            } else {
                info->seg = cx.pad_input;
            }
            continue;
        }
        const lin *l = &t->l;
        for (int a = 0; a < rm; a++)
            if (a != aq && a != ak && l->c[a]) {
                fail(&cx, "'%s' compares positions along a batch or head axis", g->values[x].name);
                return info->kind = FR_ATTN_MASK_BAD;
            }
        const int64_t cq = rm >= 2 ? l->c[aq] : 0, ck = l->c[ak];
        int64_t hi = l->c0, lo = l->c0; /* over q in [0, Tq), k in [0, Tk) */
        hi += (cq > 0 ? cq * (Tq - 1) : 0) + (ck > 0 ? ck * (Tk - 1) : 0);
        lo += (cq < 0 ? cq * (Tq - 1) : 0) + (ck < 0 ? ck * (Tk - 1) : 0);
        if (hi <= 0) continue; /* keeps every score */
        if (lo > 0) {
            fail(&cx, "'%s' masks every score", g->values[x].name);
            return info->kind = FR_ATTN_MASK_BAD;
        }
        if (cq == -ck && ck > 0 && floor_div(-l->c0, ck) == 0) { /* ck (k - q) + c0 <= 0 -> k <= q */
            causal = 1;
        } else if (cq == -ck && ck < 0) { /* -|ck| (k - q) + c0 <= 0 -> q - k <= c0 / |ck| */
            const int64_t w = floor_div(-l->c0, -ck) + 1;
            if (w < 1) {
                fail(&cx, "'%s' masks every score", g->values[x].name);
                return info->kind = FR_ATTN_MASK_BAD;
            }
            window = window && window < w ? window : w;
        } else {
            fail(&cx, "'%s' compares positions in a way that is neither causal nor a sliding window",
                 g->values[x].name);
            return info->kind = FR_ATTN_MASK_BAD;
        }
    }
    if ((causal || window) && Tq != Tk) {
        fail(&cx, "'%s' is causal with as many queries as keys only", g->values[x].name);
        return info->kind = FR_ATTN_MASK_BAD;
    }
    if (window && !causal) {
        fail(&cx, "'%s' is a sliding window without the causal mask", g->values[x].name);
        return info->kind = FR_ATTN_MASK_BAD;
    }
    if (window >= Tk) window = 0; /* a window as long as the sequence drops nothing */
    info->window = window;
    return info->kind = causal ? FR_ATTN_MASK_CAUSAL : FR_ATTN_MASK_NONE;
}

void fr_attn_mask_describe(const fr_attn_mask_info *m, const fr_graph *g, char *buf, size_t n)
{
    size_t o = 0;
    if (m->kind == FR_ATTN_MASK_BAD) {
        snprintf(buf, n, "dense additive mask (%s)", m->why[0] ? m->why : "not recognized");
        return;
    }
    o += (size_t)snprintf(buf, n, "%s", m->kind == FR_ATTN_MASK_CAUSAL ? "causal" : "no causal mask");
    if (o < n && m->window) o += (size_t)snprintf(buf + o, n - o, ", window %lld", (long long)m->window);
    if (o < n && m->seg >= 0)
        o += (size_t)snprintf(buf + o, n - o, ", key padding '%s' -> Sk", g->values[m->seg].name);
    if (o < n && m->ones >= 0)
        snprintf(buf + o, n - o, ", key padding '%s' dropped (fed all ones)", g->values[m->ones].name);
}

fr_status fr_attn_mask_note(fr_graph *g, const char *name, const fr_attn_mask_info *m)
{
    for (int i = g->n_nodes - 1; i >= 0; i--) {
        fr_node *n = &g->nodes[i];
        if (n->dead || strcmp(n->op_type, "Attention") != 0 || strcmp(n->domain, FR_DOMAIN_FP8RUN) != 0 ||
            strcmp(n->name, name) != 0)
            continue;
        char buf[320];
        memcpy(buf, FR_ATTN_MASK_NOTE, sizeof FR_ATTN_MASK_NOTE - 1);
        fr_attn_mask_describe(m, g, buf + sizeof FR_ATTN_MASK_NOTE - 1, sizeof buf - sizeof FR_ATTN_MASK_NOTE + 1);
        char *d = fr_strdup(buf, "attention mask note");
        if (!d) return FR_ERR_OOM;
        free(n->doc_string);
        n->doc_string = d;
        return FR_OK;
    }
    return FR_OK;
}

/* How fused node n masks, as text: its note when it had a run-time mask, else its attributes. */
static void node_mask_text(const fr_graph *g, const fr_node *n, char *buf, size_t size)
{
    const size_t np = sizeof FR_ATTN_MASK_NOTE - 1;
    if (n->doc_string && strncmp(n->doc_string, FR_ATTN_MASK_NOTE, np) == 0) {
        snprintf(buf, size, "%s", n->doc_string + np);
        return;
    }
    int64_t causal = 0, window = 0;
    if (fr_node_attr_int(n, "causal", 0, &causal) != FR_OK || fr_node_attr_int(n, "window", 0, &window) != FR_OK)
        fr_clear_error();
    const int m = n->n_inputs > 3 ? n->inputs[3] : -1, sk = n->n_inputs > 4 ? n->inputs[4] : -1;
    size_t o = (size_t)snprintf(buf, size, "%s", m >= 0 ? "dense additive mask" : causal ? "causal" : "no mask");
    if (o < size && window) o += (size_t)snprintf(buf + o, size - o, ", window %lld", (long long)window);
    if (o < size && m >= 0 && causal) o += (size_t)snprintf(buf + o, size - o, ", causal");
    if (o < size && sk >= 0) snprintf(buf + o, size - o, ", key padding '%s' -> Sk", g->values[sk].name);
}

fr_status fr_attn_mask_report(const fr_graph *g, int *dense, char *detail, size_t size)
{
    enum { KINDS = 8 };
    char text[KINDS][256];
    int count[KINDS] = {0}, kinds = 0, total = 0, other = 0;
    *dense = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        if (n->dead || strcmp(n->domain, FR_DOMAIN_FP8RUN) != 0 ||
            (strcmp(n->op_type, "Attention") != 0 && strcmp(n->op_type, "AttentionQKV") != 0))
            continue;
        char t[256];
        node_mask_text(g, n, t, sizeof t);
        total++;
        if (strncmp(t, "dense", 5) == 0) { /* named: each such node is worth a look */
            char named[256];
            snprintf(named, sizeof named, "'%.80s': %.160s", n->name, t);
            memcpy(t, named, sizeof t);
            (*dense)++;
        }
        int k = 0;
        while (k < kinds && strcmp(text[k], t) != 0) k++;
        if (k == kinds && kinds < KINDS) snprintf(text[kinds++], sizeof text[0], "%s", t);
        if (k < kinds)
            count[k]++;
        else
            other++;
    }
    if (!total) {
        snprintf(detail, size, "no fused attention");
        return FR_OK;
    }
    size_t o = (size_t)snprintf(detail, size, "%d attention%s", total, total == 1 ? "" : "s");
    for (int k = 0; k < kinds && o < size; k++)
        o += (size_t)snprintf(detail + o, size - o, "%s %d %s", k ? ";" : ":", count[k], text[k]);
    if (other && o < size) snprintf(detail + o, size - o, "; %d of other kinds", other);
    return FR_OK;
}
