/* Gather ops (ops/gather.c: Gather, GatherElements, GatherND) against references written here
 * by coordinate mapping, on fresh random data of many dtypes (float32, int64, bool, float16,
 * uint8, float64, int32, float8e4m3fn: gathers copy bytes, so results must be bit-exact) and
 * random int64/int32 indices of any rank (scalars included) with negative values, negative
 * axes, size-1 and empty dims. Out-of-range indices must give FR_ERR_RANGE with a message that
 * names the node, the index, its position and the axis. All comparisons are exact. */
#include <stdlib.h>
#include <string.h>

#include "graph/ir.h"
#include "harness.h"
#include "ops/op.h"

/* ---- a one-node graph run as the executor will: infer, allocate outputs, run ---- */

#define TN_MAX 8

typedef struct tnode {
    fr_graph *g;
    int nid, n_in, n_out;
    int in_vid[TN_MAX], out_vid[TN_MAX];
    fr_tensor *in[TN_MAX];  /* caller's tensors, or the value's constant for constant inputs */
    fr_tensor *out[TN_MAX]; /* allocated from the inferred shapes */
} tnode;

/* ins[i] == NULL is an omitted optional input; bit i of const_mask makes input i a constant
 * (an initializer holding a clone) that infer() can read. */
static void tn_init(tnode *t, const char *op, int64_t opset, int n_in, fr_tensor *const *ins,
                    unsigned const_mask, int n_out)
{
    memset(t, 0, sizeof *t);
    FR_ASSERT_OK(fr_graph_new(&t->g));
    fr_graph *g = t->g;
    g->opsets = fr_calloc(1, sizeof(fr_opset), "opsets");
    CU_ASSERT_PTR_NOT_NULL_FATAL(g->opsets);
    g->opsets[0].domain = fr_strdup("", "domain");
    g->opsets[0].version = opset;
    g->n_opsets = 1;
    t->n_in = n_in;
    t->n_out = n_out;
    for (int i = 0; i < n_in; i++) {
        t->in_vid[i] = -1;
        if (!ins[i]) continue;
        char nm[16];
        snprintf(nm, sizeof nm, "in%d", i);
        FR_ASSERT_OK(fr_graph_add_value(g, nm, &t->in_vid[i]));
        if (const_mask & (1u << i)) {
            fr_tensor *c;
            FR_ASSERT_OK(fr_tensor_clone(ins[i], nm, &c));
            FR_ASSERT_OK(fr_graph_set_initializer(g, t->in_vid[i], c));
            t->in[i] = c;
        } else {
            fr_value_set_shape(&g->values[t->in_vid[i]], ins[i]->dtype, ins[i]->rank, ins[i]->dims);
            FR_ASSERT_OK(fr_graph_mark_input(g, t->in_vid[i]));
            t->in[i] = ins[i];
        }
    }
    for (int o = 0; o < n_out; o++) {
        char nm[16];
        snprintf(nm, sizeof nm, "out%d", o);
        FR_ASSERT_OK(fr_graph_add_value(g, nm, &t->out_vid[o]));
    }
    FR_ASSERT_OK(fr_graph_add_node(g, op, "", "node_under_test", n_in, t->in_vid, n_out, t->out_vid,
                                   &t->nid));
}

static fr_node *tn_node(tnode *t)
{
    return &t->g->nodes[t->nid];
}

static fr_status tn_run(tnode *t)
{
    fr_node *n = tn_node(t);
    const fr_op_def *op = fr_op_find(n->domain, n->op_type);
    if (!op) return fr_error(FR_ERR_UNSUPPORTED, "op %s is not registered", n->op_type);
    FR_TRY(op->infer(t->g, t->nid));
    for (int o = 0; o < t->n_out; o++) {
        const fr_value *v = &t->g->values[t->out_vid[o]];
        FR_TRY(fr_tensor_new(v->dtype, v->rank, v->dims, v->name, &t->out[o]));
    }
    fr_kernel_ctx ctx = {t->g,  n,     fr_graph_opset(t->g, n->domain), t->n_in, t->n_out,
                         t->in, t->out};
    return op->cpu(&ctx);
}

static void tn_free(tnode *t)
{
    for (int o = 0; o < t->n_out; o++) fr_tensor_free(t->out[o]);
    fr_graph_free(t->g);
}

static void assert_error_mentions(const char *what)
{
    const char *e = fr_last_error();
    CU_ASSERT_PTR_NOT_NULL(strstr(e, "node_under_test"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e, what));
    if (!strstr(e, what)) fprintf(stderr, "\n  error was: %s (want '%s')\n", e, what);
}

/* ---- tensors ---- */

static const fr_dtype dtypes[] = {FR_F32, FR_I64, FR_BOOL, FR_F16,
                                  FR_U8,  FR_F64, FR_I32,  FR_F8E4M3};
#define N_DTYPES ((int)(sizeof dtypes / sizeof dtypes[0]))

static int64_t rint_in(fr_rng *r, int64_t lo, int64_t hi) /* uniform in [lo, hi] */
{
    return lo + (int64_t)(fr_rng_uniform(r) * (double)(hi - lo + 1));
}

static fr_tensor *tnew(fr_dtype dt, int rank, const int64_t *dims)
{
    fr_tensor *t = NULL;
    FR_ASSERT_OK(fr_tensor_new(dt, rank, dims, "test tensor", &t));
    return t;
}

/* Random bytes (bools 0/1): the ops copy bits, so any pattern must survive. */
static fr_tensor *trand(fr_rng *r, fr_dtype dt, int rank, const int64_t *dims)
{
    fr_tensor *t = tnew(dt, rank, dims);
    uint8_t *p = t->data;
    for (size_t i = 0; i < t->nbytes; i++)
        p[i] = dt == FR_BOOL ? (uint8_t)(fr_rng_uniform(r) < 0.5) : (uint8_t)rint_in(r, 0, 255);
    return t;
}

static void rand_dims(fr_rng *r, int rank, int64_t *dims, int64_t max, double p_zero)
{
    for (int k = 0; k < rank; k++) dims[k] = fr_rng_uniform(r) < p_zero ? 0 : rint_in(r, 1, max);
}

static void unravel(int64_t i, int rank, const int64_t *dims, int64_t *c)
{
    for (int k = rank - 1; k >= 0; k--) {
        c[k] = i % dims[k];
        i /= dims[k];
    }
}

static int64_t ravel(const int64_t *c, int rank, const int64_t *dims)
{
    int64_t i = 0;
    for (int k = 0; k < rank; k++) i = i * dims[k] + c[k];
    return i;
}

static int same_elem(const fr_tensor *y, int64_t yi, const fr_tensor *x, int64_t xi)
{
    size_t es = fr_dtype_size(x->dtype);
    return memcmp((const char *)y->data + yi * (int64_t)es,
                  (const char *)x->data + xi * (int64_t)es, es) == 0;
}

static void assert_shape(const fr_tensor *y, fr_dtype dt, int rank, const int64_t *dims)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(y);
    CU_ASSERT_EQUAL(y->dtype, dt);
    CU_ASSERT_EQUAL_FATAL(y->rank, rank);
    for (int k = 0; k < rank; k++) CU_ASSERT_EQUAL_FATAL(y->dims[k], dims[k]);
}

static void set_int_attr(tnode *t, const char *name, int64_t v)
{
    FR_ASSERT_OK(fr_node_set_attr_int(tn_node(t), name, v));
}

/* Random indices in [-n, n) (n > 0) of the given dtype and shape. */
static fr_tensor *rand_indices(fr_rng *r, fr_dtype dt, int rank, const int64_t *dims, int64_t n)
{
    fr_tensor *t = tnew(dt, rank, dims);
    int64_t cnt = fr_tensor_numel(t);
    for (int64_t i = 0; i < cnt; i++) {
        int64_t v = rint_in(r, -n, n - 1);
        if (dt == FR_I64)
            ((int64_t *)t->data)[i] = v;
        else
            ((int32_t *)t->data)[i] = (int32_t)v;
    }
    return t;
}

static int64_t idx_get(const fr_tensor *t, int64_t i)
{
    return t->dtype == FR_I64 ? ((int64_t *)t->data)[i] : ((int32_t *)t->data)[i];
}

static void idx_set(fr_tensor *t, int64_t i, int64_t v)
{
    if (t->dtype == FR_I64)
        ((int64_t *)t->data)[i] = v;
    else
        ((int32_t *)t->data)[i] = (int32_t)v;
}

/* ---- Gather ---- */

static void test_gather(void)
{
    fr_rng r = fr_test_rng("gather");
    for (int trial = 0; trial < 400; trial++) {
        int rank = (int)rint_in(&r, 1, 4), q = (int)rint_in(&r, 0, 3);
        int axis = (int)rint_in(&r, -rank, rank - 1), ax = axis < 0 ? axis + rank : axis;
        int64_t dims[FR_MAX_RANK], idims[FR_MAX_RANK], od[FR_MAX_RANK];
        rand_dims(&r, rank, dims, 5, 0.05);
        rand_dims(&r, q, idims, 3, 0.05);
        if (dims[ax] == 0 && q == 0) dims[ax] = 1; /* a scalar index needs something to pick */
        if (dims[ax] == 0) idims[0] = 0;
        fr_dtype it = trial % 2 ? FR_I64 : FR_I32;
        fr_tensor *x = trand(&r, dtypes[trial % N_DTYPES], rank, dims);
        fr_tensor *idx = rand_indices(&r, it, q, idims, dims[ax] ? dims[ax] : 1),
                  *ins[2] = {x, idx};
        int o = 0;
        for (int k = 0; k < ax; k++) od[o++] = dims[k];
        for (int k = 0; k < q; k++) od[o++] = idims[k];
        for (int k = ax + 1; k < rank; k++) od[o++] = dims[k];
        tnode t;
        tn_init(&t, "Gather", 13, 2, ins, trial % 3 == 0 ? 2u : 0u, 1); /* constant indices too */
        if (axis != 0 || trial % 2) set_int_attr(&t, "axis", axis);
        FR_ASSERT_OK(tn_run(&t));
        fr_tensor *y = t.out[0];
        assert_shape(y, x->dtype, o, od);
        int64_t n = fr_tensor_numel(y), bad = 0, c[FR_MAX_RANK], xc[FR_MAX_RANK];
        for (int64_t i = 0; i < n; i++) {
            unravel(i, o, od, c);
            int64_t v = idx_get(idx, ravel(c + ax, q, idims));
            for (int k = 0; k < rank; k++)
                xc[k] = k < ax ? c[k] : k == ax ? (v < 0 ? v + dims[ax] : v) : c[k + q - 1];
            bad += !same_elem(y, i, x, ravel(xc, rank, dims));
        }
        CU_ASSERT_EQUAL(bad, 0);
        tn_free(&t);
        fr_tensor_free(x);
        fr_tensor_free(idx);
    }
}

static void test_gather_out_of_range(void)
{
    fr_rng r = fr_test_rng("gather_range");
    int64_t d[2] = {10, 4}, di[2] = {2, 4};
    fr_tensor *x = trand(&r, FR_F32, 2, d);
    for (int c = 0; c < 2; c++) { /* index read at run time, then a constant caught by infer */
        fr_tensor *idx = rand_indices(&r, FR_I64, 2, di, 10), *ins[2] = {x, idx};
        idx_set(idx, 1 * 4 + 3, 12);
        tnode t;
        tn_init(&t, "Gather", 13, 2, ins, c ? 2u : 0u, 1);
        CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_RANGE);
        assert_error_mentions("node 'node_under_test' (Gather): index 12 at position [1, 3] is "
                              "out of range for axis 0 of size 10");
        tn_free(&t);
        fr_tensor_free(idx);
    }
    /* int32, negative past the start, along axis -1 */
    fr_tensor *idx = rand_indices(&r, FR_I32, 2, di, 4), *ins[2] = {x, idx};
    idx_set(idx, 2, -5);
    tnode t;
    tn_init(&t, "Gather", 13, 2, ins, 0, 1);
    set_int_attr(&t, "axis", -1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_RANGE);
    assert_error_mentions("index -5 at position [0, 2] is out of range for axis 1 of size 4");
    tn_free(&t);
    fr_tensor_free(idx);
    /* a scalar index; the boundary values -n and n-1 are fine, n is not */
    static const int64_t vals[3] = {-10, 9, 10};
    for (int k = 0; k < 3; k++) {
        fr_tensor *s = tnew(FR_I64, 0, NULL), *in2[2] = {x, s};
        *(int64_t *)s->data = vals[k];
        tn_init(&t, "Gather", 13, 2, in2, 0, 1);
        fr_status st = tn_run(&t);
        if (k < 2) {
            CU_ASSERT_EQUAL(st, FR_OK);
            if (st == FR_OK) {
                int64_t row = vals[k] < 0 ? vals[k] + 10 : vals[k];
                CU_ASSERT(memcmp(t.out[0]->data, (float *)x->data + row * 4, 4 * sizeof(float)) ==
                          0);
            }
        } else {
            CU_ASSERT_EQUAL(st, FR_ERR_RANGE);
            assert_error_mentions("index 10 at position [] is out of range");
        }
        tn_free(&t);
        fr_tensor_free(s);
    }
    /* float indices are unsupported */
    fr_tensor *fi = tnew(FR_F32, 1, di), *in3[2] = {x, fi};
    tn_init(&t, "Gather", 13, 2, in3, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    assert_error_mentions("float32");
    tn_free(&t);
    fr_tensor_free(fi);
    fr_tensor_free(x);
}

/* ---- GatherElements ---- */

static void test_gather_elements(void)
{
    fr_rng r = fr_test_rng("gather_elements");
    for (int trial = 0; trial < 300; trial++) {
        int rank = (int)rint_in(&r, 1, 4);
        int axis = (int)rint_in(&r, -rank, rank - 1), ax = axis < 0 ? axis + rank : axis;
        int64_t dims[FR_MAX_RANK], idims[FR_MAX_RANK];
        rand_dims(&r, rank, dims, 4, 0.0);
        for (int k = 0; k < rank; k++) /* the axis may be any length; others up to data's */
            idims[k] = k == ax ? rint_in(&r, 0, 5)
                               : rint_in(&r, fr_rng_uniform(&r) < 0.05 ? 0 : 1, dims[k]);
        fr_dtype it = trial % 2 ? FR_I64 : FR_I32;
        fr_tensor *x = trand(&r, dtypes[trial % N_DTYPES], rank, dims);
        fr_tensor *idx = rand_indices(&r, it, rank, idims, dims[ax]), *ins[2] = {x, idx};
        tnode t;
        tn_init(&t, "GatherElements", 13, 2, ins, trial % 3 == 0 ? 2u : 0u, 1);
        set_int_attr(&t, "axis", axis);
        FR_ASSERT_OK(tn_run(&t));
        fr_tensor *y = t.out[0];
        assert_shape(y, x->dtype, rank, idims);
        int64_t n = fr_tensor_numel(y), bad = 0, c[FR_MAX_RANK];
        for (int64_t i = 0; i < n; i++) {
            unravel(i, rank, idims, c);
            int64_t v = idx_get(idx, i);
            c[ax] = v < 0 ? v + dims[ax] : v;
            bad += !same_elem(y, i, x, ravel(c, rank, dims));
        }
        CU_ASSERT_EQUAL(bad, 0);
        tn_free(&t);
        fr_tensor_free(x);
        fr_tensor_free(idx);
    }
    /* errors: out of range (named), rank mismatch, indices larger than data off the axis */
    int64_t d[2] = {3, 4}, di[2] = {2, 4}, dbig[2] = {2, 5};
    fr_tensor *x = trand(&r, FR_BOOL, 2, d), *idx = rand_indices(&r, FR_I64, 2, di, 3);
    idx_set(idx, 5, -4);
    fr_tensor *ins[2] = {x, idx};
    tnode t;
    tn_init(&t, "GatherElements", 13, 2, ins, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_RANGE);
    assert_error_mentions("index -4 at position [1, 1] is out of range for axis 0 of size 3");
    tn_free(&t);
    fr_tensor *i1 = rand_indices(&r, FR_I64, 1, di, 3), *ib = rand_indices(&r, FR_I64, 2, dbig, 3);
    ins[1] = i1;
    tn_init(&t, "GatherElements", 13, 2, ins, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    assert_error_mentions("rank");
    tn_free(&t);
    ins[1] = ib;
    tn_init(&t, "GatherElements", 13, 2, ins, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    assert_error_mentions("[2, 5]");
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(idx);
    fr_tensor_free(i1);
    fr_tensor_free(ib);
}

/* ---- GatherND ---- */

static void test_gather_nd(void)
{
    fr_rng r = fr_test_rng("gather_nd");
    for (int trial = 0; trial < 300; trial++) {
        int b = trial % 3 == 0 ? 1 : 0, rank = b + (int)rint_in(&r, 1, 3);
        int m = (int)rint_in(&r, 1, rank - b), mid = (int)rint_in(&r, 0, 2), q = b + mid + 1;
        int64_t dims[FR_MAX_RANK], idims[FR_MAX_RANK], od[FR_MAX_RANK];
        rand_dims(&r, rank, dims, 4, 0.0);
        for (int k = 0; k < b; k++) idims[k] = dims[k];
        for (int k = b; k < q - 1; k++)
            idims[k] = fr_rng_uniform(&r) < 0.05 ? 0 : rint_in(&r, 1, 3);
        idims[q - 1] = m;
        int o = 0;
        for (int k = 0; k < q - 1; k++) od[o++] = idims[k];
        for (int k = b + m; k < rank; k++) od[o++] = dims[k];
        fr_dtype it = trial % 2 ? FR_I64 : FR_I32;
        fr_tensor *x = trand(&r, dtypes[trial % N_DTYPES], rank, dims);
        fr_tensor *idx = tnew(it, q, idims), *ins[2] = {x, idx};
        int64_t ni = fr_tensor_numel(idx);
        for (int64_t j = 0; j < ni; j++) {
            int64_t size = dims[b + j % m];
            idx_set(idx, j, rint_in(&r, -size, size - 1));
        }
        tnode t;
        tn_init(&t, "GatherND", 13, 2, ins, 0, 1);
        if (b || trial % 2) set_int_attr(&t, "batch_dims", b);
        FR_ASSERT_OK(tn_run(&t));
        fr_tensor *y = t.out[0];
        assert_shape(y, x->dtype, o, od);
        int64_t n = fr_tensor_numel(y), bad = 0, c[FR_MAX_RANK], xc[FR_MAX_RANK];
        for (int64_t i = 0; i < n; i++) {
            unravel(i, o, od, c);
            int64_t tuple = ravel(c, q - 1, idims) * m; /* first entry of the index tuple */
            for (int k = 0; k < b; k++) xc[k] = c[k];
            for (int l = 0; l < m; l++) {
                int64_t v = idx_get(idx, tuple + l);
                xc[b + l] = v < 0 ? v + dims[b + l] : v;
            }
            for (int k = b + m; k < rank; k++) xc[k] = c[q - 1 + k - b - m];
            bad += !same_elem(y, i, x, ravel(xc, rank, dims));
        }
        CU_ASSERT_EQUAL(bad, 0);
        tn_free(&t);
        fr_tensor_free(x);
        fr_tensor_free(idx);
    }
    /* errors: an out-of-range entry names the data axis it addresses; batch dims must match */
    int64_t d[3] = {2, 3, 4}, di[2] = {2, 2}, dib[3] = {3, 1, 1};
    fr_tensor *x = trand(&r, FR_F32, 3, d), *idx = tnew(FR_I64, 2, di), *ins[2] = {x, idx};
    int64_t v[4] = {1, 2, 0, 3};
    memcpy(idx->data, v, sizeof v);
    tnode t;
    tn_init(&t, "GatherND", 13, 2, ins, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_RANGE);
    assert_error_mentions("index 3 at position [1, 1] is out of range for axis 1 of size 3");
    tn_free(&t);
    fr_tensor *ib = tnew(FR_I64, 3, dib);
    ins[1] = ib;
    tn_init(&t, "GatherND", 13, 2, ins, 0, 1);
    set_int_attr(&t, "batch_dims", 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    assert_error_mentions("batch dim 0");
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(idx);
    fr_tensor_free(ib);
}

static void test_registered(void)
{
    const char *names[] = {"Gather", "GatherElements", "GatherND"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const fr_op_def *op = fr_op_find("", names[i]);
        CU_ASSERT_PTR_NOT_NULL(op);
        if (op) CU_ASSERT(op->infer && op->cpu);
    }
}

static CU_TestInfo gather_tests[] = {
    {"registered", test_registered},
    {"gather", test_gather},
    {"gather_out_of_range", test_gather_out_of_range},
    {"gather_elements", test_gather_elements},
    {"gather_nd", test_gather_nd},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"ops_gather", NULL, NULL, NULL, NULL, gather_tests},
    CU_SUITE_INFO_NULL,
};

int main(void)
{
    return fr_test_main(suites);
}
