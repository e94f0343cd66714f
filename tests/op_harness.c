/* One-node runner and tensor helpers for the forward op tests (see op_harness.h). */
#include "tests/op_harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the node under test ---- */

void tn_init_domain(tnode *t, const char *domain, const char *op, int64_t opset, int n_in,
                    fr_tensor *const *ins, unsigned const_mask, int n_out)
{
    memset(t, 0, sizeof *t);
    if (n_in > TN_MAX || n_out > TN_MAX) CU_FAIL_FATAL("tn_init: over TN_MAX inputs or outputs");
    FR_ASSERT_OK(fr_graph_new(&t->g));
    fr_graph *g = t->g;
    g->opsets = fr_calloc(1, sizeof(fr_opset), "opsets");
    CU_ASSERT_PTR_NOT_NULL_FATAL(g->opsets);
    g->opsets[0].domain = fr_strdup(domain, "domain");
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
            fr_value *v = &g->values[t->in_vid[i]];
            fr_value_set_shape(v, ins[i]->dtype, ins[i]->rank, ins[i]->dims);
            FR_ASSERT_OK(fr_graph_mark_input(g, t->in_vid[i]));
            t->in[i] = ins[i];
        }
    }
    for (int o = 0; o < n_out; o++) {
        char nm[16];
        snprintf(nm, sizeof nm, "out%d", o);
        FR_ASSERT_OK(fr_graph_add_value(g, nm, &t->out_vid[o]));
    }
    FR_ASSERT_OK(fr_graph_add_node(g, op, domain, "node_under_test", n_in, t->in_vid, n_out,
                                   t->out_vid, &t->nid));
}

void tn_init(tnode *t, const char *op, int64_t opset, int n_in, fr_tensor *const *ins,
             unsigned const_mask, int n_out)
{
    tn_init_domain(t, FR_DOMAIN_ONNX, op, opset, n_in, ins, const_mask, n_out);
}

void tn_omit_output(tnode *t, int o)
{
    t->g->values[t->out_vid[o]].producer = -1;
    t->out_vid[o] = -1;
    tn_node(t)->outputs[o] = -1;
}

fr_node *tn_node(tnode *t) { return &t->g->nodes[t->nid]; }

fr_status tn_run(tnode *t)
{
    fr_node *n = tn_node(t);
    const fr_op_def *op = fr_op_find(n->domain, n->op_type);
    if (!op) return fr_error(FR_ERR_UNSUPPORTED, "op %s is not registered", n->op_type);
    FR_TRY(op->infer(t->g, t->nid));
    for (int o = 0; o < t->n_out; o++) {
        if (t->out_vid[o] < 0) continue;
        const fr_value *v = &t->g->values[t->out_vid[o]];
        FR_TRY(fr_tensor_new(v->dtype, v->rank, v->dims, v->name, &t->out[o]));
        if (t->out[o]->nbytes) memset(t->out[o]->data, 0x5A, t->out[o]->nbytes);
    }
    fr_kernel_ctx ctx = {t->g,     n,      fr_graph_opset(t->g, n->domain), t->n_in,
                         t->n_out, t->in, t->out};
    return op->cpu(&ctx);
}

void tn_free(tnode *t)
{
    for (int o = 0; o < t->n_out; o++) fr_tensor_free(t->out[o]);
    fr_graph_free(t->g);
}

void tn_assert_error(const char *what)
{
    const char *e = fr_last_error();
    CU_ASSERT_PTR_NOT_NULL(strstr(e, "node_under_test"));
    CU_ASSERT_PTR_NOT_NULL(strstr(e, what));
    if (!strstr(e, what)) fprintf(stderr, "\n  error was: %s (want '%s')\n", e, what);
}

/* ---- test tensors ---- */

const fr_dtype tt_dtypes[TT_N_DTYPES] = {FR_F32, FR_I64, FR_BOOL, FR_F16,
                                         FR_U8,  FR_F64, FR_I32,  FR_F8E4M3};

fr_tensor *tt_new(fr_dtype dt, int rank, const int64_t *dims)
{
    fr_tensor *t = NULL;
    FR_ASSERT_OK(fr_tensor_new(dt, rank, dims, "test tensor", &t));
    return t;
}

fr_tensor *tt_ints(fr_dtype dt, int n, const int64_t *v)
{
    int64_t d = n;
    fr_tensor *t = tt_new(dt, 1, &d);
    for (int i = 0; i < n; i++) {
        if (dt == FR_I64)
            ((int64_t *)t->data)[i] = v[i];
        else
            ((int32_t *)t->data)[i] = (int32_t)v[i];
    }
    return t;
}

fr_tensor *tt_scalar(fr_dtype dt, double v)
{
    fr_tensor *t = tt_new(dt, 0, NULL);
    tt_set(t, 0, v);
    return t;
}

fr_tensor *tt_scalar1(float v)
{
    int64_t one = 1;
    fr_tensor *t = tt_new(FR_F32, 1, &one);
    ((float *)t->data)[0] = v;
    return t;
}

float *tt_floats(const fr_tensor *t)
{
    const int64_t n = fr_tensor_numel(t);
    float *f = malloc((size_t)(n ? n : 1) * sizeof(float));
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    for (int64_t i = 0; i < n; i++)
        f[i] = t->dtype == FR_BF16 ? fr_bf16_to_f32(((const uint16_t *)t->data)[i]) : ((const float *)t->data)[i];
    return f;
}

void tt_set(fr_tensor *t, int64_t i, double v)
{
    switch (t->dtype) {
    case FR_F32: ((float *)t->data)[i] = (float)v; break;
    case FR_F64: ((double *)t->data)[i] = v; break;
    case FR_I8: ((int8_t *)t->data)[i] = (int8_t)v; break;
    case FR_I16: ((int16_t *)t->data)[i] = (int16_t)v; break;
    case FR_I32: ((int32_t *)t->data)[i] = (int32_t)v; break;
    case FR_I64: ((int64_t *)t->data)[i] = (int64_t)v; break;
    case FR_U8: ((uint8_t *)t->data)[i] = (uint8_t)v; break;
    case FR_BOOL: ((uint8_t *)t->data)[i] = v != 0; break;
    case FR_BF16: ((uint16_t *)t->data)[i] = fr_f32_to_bf16((float)v); break;
    default: CU_FAIL_FATAL("tt_set: dtype not handled");
    }
}

int64_t tt_rand_int(fr_rng *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(fr_rng_uniform(r) * (double)(hi - lo + 1));
}

void tt_rand_dims(fr_rng *r, int rank, int64_t *dims, int64_t max, double p_zero)
{
    for (int k = 0; k < rank; k++)
        dims[k] = fr_rng_uniform(r) < p_zero ? 0 : tt_rand_int(r, 1, max);
}

static double draw_uniform(fr_rng *r, double lo, double hi)
{
    return lo + (hi - lo) * fr_rng_uniform(r);
}

static double draw_int(fr_rng *r, double lo, double hi)
{
    return (double)tt_rand_int(r, (int64_t)lo, (int64_t)hi);
}

static double draw_normal(fr_rng *r, double mean, double sd)
{
    return mean + sd * fr_rng_normal(r);
}

/* A new tensor of draw(r, a, b) values: bools a fair coin, integer dtypes rounded. */
static fr_tensor *rand_tensor(fr_rng *r, fr_dtype dt, int rank, const int64_t *dims,
                              double (*draw)(fr_rng *, double, double), double a, double b)
{
    fr_tensor *t = tt_new(dt, rank, dims);
    int64_t n = fr_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double v = dt == FR_BOOL ? fr_rng_uniform(r) < 0.5 : draw(r, a, b);
        tt_set(t, i, fr_dtype_is_int(dt) ? round(v) : v);
    }
    return t;
}

fr_tensor *tt_rand_uniform(fr_rng *r, fr_dtype dt, int rank, const int64_t *dims, double lo,
                           double hi)
{
    return rand_tensor(r, dt, rank, dims, fr_dtype_is_int(dt) ? draw_int : draw_uniform, lo, hi);
}

fr_tensor *tt_rand_ints(fr_rng *r, fr_dtype dt, int rank, const int64_t *dims, int64_t lo,
                        int64_t hi)
{
    return rand_tensor(r, dt, rank, dims, draw_int, (double)lo, (double)hi);
}

fr_tensor *tt_randn(fr_rng *r, fr_dtype dt, int rank, const int64_t *dims, double mean,
                    double sd)
{
    return rand_tensor(r, dt, rank, dims, draw_normal, mean, sd);
}

fr_tensor *tt_rand_bits(fr_rng *r, fr_dtype dt, int rank, const int64_t *dims)
{
    fr_tensor *t = tt_new(dt, rank, dims);
    uint8_t *p = t->data;
    for (size_t i = 0; i < t->nbytes; i++)
        p[i] = dt == FR_BOOL ? (uint8_t)(fr_rng_uniform(r) < 0.5) : (uint8_t)tt_rand_int(r, 0, 255);
    return t;
}

void tt_unravel(int64_t i, int rank, const int64_t *dims, int64_t *c)
{
    for (int k = rank - 1; k >= 0; k--) {
        c[k] = i % dims[k];
        i /= dims[k];
    }
}

int64_t tt_ravel(const int64_t *c, int rank, const int64_t *dims)
{
    int64_t i = 0;
    for (int k = 0; k < rank; k++) i = i * dims[k] + c[k];
    return i;
}

int64_t tt_bcast_index(const fr_tensor *src, const fr_tensor *out, int64_t i)
{
    int64_t idx = 0, mul = 1;
    for (int k = out->rank - 1; k >= 0; k--) {
        int64_t c = i % out->dims[k];
        i /= out->dims[k];
        int j = k - (out->rank - src->rank); /* right-aligned */
        if (j < 0) continue;
        if (src->dims[j] != 1) idx += c * mul;
        mul *= src->dims[j];
    }
    return idx;
}

void tn_init_gemm(tnode *t, fr_rng *r, fr_dtype dt, int64_t M, int64_t N, int64_t K, int ta, int tb, float alpha,
                  float beta, int ci, int set_attrs, fr_tensor **ins)
{
    /* C's shape: rank (-1: no C) and dims, -1 standing for M and -2 for N */
    static const struct {
        int r;
        int64_t d[2];
    } c_shapes[TT_GEMM_N_C] = {
        {-1, {0}}, {0, {0}}, {1, {1}}, {1, {-2}}, {2, {1, -2}}, {2, {-1, 1}}, {2, {-1, -2}}, {2, {1, 1}},
    };
    int64_t da[2] = {ta ? K : M, ta ? M : K}, db[2] = {tb ? N : K, tb ? K : N};
    ins[0] = tt_randn(r, dt, 2, da, 0, 1);
    ins[1] = tt_randn(r, dt, 2, db, 0, 1);
    ins[2] = NULL;
    if (c_shapes[ci].r >= 0) {
        int64_t dc[2];
        for (int k = 0; k < c_shapes[ci].r; k++)
            dc[k] = c_shapes[ci].d[k] == -1 ? M : c_shapes[ci].d[k] == -2 ? N : c_shapes[ci].d[k];
        ins[2] = tt_randn(r, dt, c_shapes[ci].r, dc, 0, 1);
    }
    tn_init(t, "Gemm", 13, ins[2] ? 3 : 2, ins, 0, 1);
    if (set_attrs) {
        TN_ATTR(t, int, "transA", ta);
        TN_ATTR(t, int, "transB", tb);
        TN_ATTR(t, float, "alpha", alpha);
        TN_ATTR(t, float, "beta", beta);
    }
}

int tt_param_shape(tt_pshape p, int xr, const int64_t *xd, int axis, int64_t *d)
{
    int r = 0;
    switch (p) {
    case TT_P_EXACT:
    case TT_P_SIZE1:
        for (int k = axis; k < xr; k++) d[r++] = xd[k];
        if (p == TT_P_SIZE1) d[0] = 1;
        return r;
    case TT_P_LAST: d[0] = xd[xr - 1]; return 1;
    case TT_P_LEAD1:
        d[r++] = 1;
        for (int k = axis; k < xr; k++) d[r++] = xd[k];
        return r;
    case TT_P_FULL:
        for (int k = 0; k < xr; k++) d[r++] = xd[k];
        return r;
    }
    return 0;
}

void tt_assert_shape(const fr_tensor *y, fr_dtype dt, int rank, const int64_t *dims)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(y);
    CU_ASSERT_EQUAL(y->dtype, dt);
    CU_ASSERT_EQUAL_FATAL(y->rank, rank);
    for (int k = 0; k < rank; k++) CU_ASSERT_EQUAL_FATAL(y->dims[k], dims[k]);
}

int tt_same_elem(const fr_tensor *y, int64_t yi, const fr_tensor *x, int64_t xi)
{
    size_t es = fr_dtype_size(x->dtype);
    return memcmp((const char *)y->data + yi * (int64_t)es,
                  (const char *)x->data + xi * (int64_t)es, es) == 0;
}

double tt_rel_err(const fr_tensor *y, const double *ref, int64_t n)
{
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double v = fr_tensor_get_f64(y, i);
        if (!isfinite(ref[i]) || !isfinite(v)) {
            if (isnan(ref[i]) ? !isnan(v) : v != ref[i]) return INFINITY;
            continue;
        }
        num += (v - ref[i]) * (v - ref[i]);
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}
