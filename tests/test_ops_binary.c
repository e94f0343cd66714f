/* Binary / n-ary elementwise ops (ops/binary.c) against references written here, on fresh
 * random inputs, over broadcasting in both directions, rank-0 scalars, size-1 and empty
 * dims: arithmetic on float32/float64/int32/int64, Pow (negative bases, integer and float
 * exponents), Mod (both fmod modes), variadic Max/Min/Sum/Mean, comparisons, logic, Where
 * (3-way broadcast, several dtypes) and Expand.
 * Tolerances: float32 arithmetic within 1e-6 relative of the double reference; float64
 * within 1e-15; Sum/Mean within 1e-6 of the sum of magnitudes; integers, comparisons,
 * logic, Max/Min, Where and Expand exact. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/ir.h"
#include "harness.h"
#include "ops/op.h"

/* ---- a one-node graph run as the executor will: infer, allocate outputs, run ---- */

typedef struct tnode {
    fr_graph *g;
    int nid, n_in, n_out;
    int in_vid[8], out_vid[4];
    fr_tensor *in[8];  /* caller's tensors, or the value's constant for constant inputs */
    fr_tensor *out[4]; /* allocated from the inferred shapes */
} tnode;

/* ins[i] == NULL is an omitted optional input; bit i of const_mask makes input i a constant
 * (initializer, cloned) so infer() can read it. */
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
    FR_ASSERT_OK(fr_graph_add_node(g, op, "", "node_under_test", n_in, t->in_vid, n_out,
                                   t->out_vid, &t->nid));
}

static fr_node *tn_node(tnode *t) { return &t->g->nodes[t->nid]; }

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
    fr_kernel_ctx ctx = {t->g, n, fr_graph_opset(t->g, n->domain), t->n_in, t->n_out, t->in, t->out};
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

static fr_tensor *tnew(fr_dtype dt, int rank, const int64_t *dims)
{
    fr_tensor *t = NULL;
    FR_ASSERT_OK(fr_tensor_new(dt, rank, dims, "test tensor", &t));
    return t;
}

static int64_t rand_int(fr_rng *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(fr_rng_uniform(r) * (double)(hi - lo + 1));
}

/* Fill from doubles in [lo, hi); integers get integers in [lo, hi], bools 0/1. With
 * `discrete`, values come from the integers in [lo, hi] in every dtype, so comparisons see
 * ties. */
static void fill(fr_rng *r, fr_tensor *t, double lo, double hi, int discrete)
{
    int64_t n = fr_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) {
        double v = discrete || fr_dtype_is_int(t->dtype)
                       ? (double)rand_int(r, (int64_t)lo, (int64_t)hi)
                       : lo + (hi - lo) * fr_rng_uniform(r);
        switch (t->dtype) {
        case FR_F32: ((float *)t->data)[i] = (float)v; break;
        case FR_F64: ((double *)t->data)[i] = v; break;
        case FR_I32: ((int32_t *)t->data)[i] = (int32_t)v; break;
        case FR_I64: ((int64_t *)t->data)[i] = (int64_t)v; break;
        case FR_BOOL: ((uint8_t *)t->data)[i] = fr_rng_uniform(r) < 0.5; break;
        default: CU_FAIL_FATAL("fill: dtype");
        }
    }
}

static void put_f(fr_tensor *t, int64_t i, double v)
{
    if (t->dtype == FR_F32) ((float *)t->data)[i] = (float)v;
    else if (t->dtype == FR_F64) ((double *)t->data)[i] = v;
    else if (t->dtype == FR_I32) ((int32_t *)t->data)[i] = (int32_t)v;
    else ((int64_t *)t->data)[i] = (int64_t)v;
}

/* Independent numpy broadcasting: expected output shape, and the flat index in `src` of
 * output element i. */
static int bshape(int ra, const int64_t *da, int rb, const int64_t *db, int *r, int64_t *d)
{
    *r = ra > rb ? ra : rb;
    for (int k = 0; k < *r; k++) {
        int64_t a = k - (*r - ra) >= 0 ? da[k - (*r - ra)] : 1;
        int64_t b = k - (*r - rb) >= 0 ? db[k - (*r - rb)] : 1;
        if (a != b && a != 1 && b != 1) return 0;
        d[k] = a == 1 ? b : a;
    }
    return 1;
}

static int64_t src_index(const fr_tensor *src, const fr_tensor *out, int64_t i)
{
    int64_t idx = 0, mul = 1;
    for (int k = out->rank - 1; k >= 0; k--) {
        int64_t c = i % out->dims[k];
        i /= out->dims[k];
        int j = k - (out->rank - src->rank);
        if (j < 0) continue;
        if (src->dims[j] != 1) idx += c * mul;
        mul *= src->dims[j];
    }
    return idx;
}

static void assert_shape(const fr_tensor *y, int r, const int64_t *d)
{
    CU_ASSERT_EQUAL_FATAL(y->rank, r);
    for (int k = 0; k < r; k++) CU_ASSERT_EQUAL(y->dims[k], d[k]);
}

/* operand shape pairs: equal, scalar either side, rank-0, row and column broadcasts, both
 * directions, size-1, empty, and big enough for the fast paths */
typedef struct shp {
    int r;
    int64_t d[4];
} shp;
static const struct { shp a, b; } pairs[] = {
    {{0, {0}}, {0, {0}}},
    {{0, {0}}, {2, {3, 4}}},
    {{2, {3, 4}}, {0, {0}}},
    {{1, {5}}, {1, {5}}},
    {{3, {2, 3, 4}}, {3, {2, 3, 4}}},
    {{3, {2, 3, 4}}, {1, {4}}},
    {{1, {4}}, {3, {2, 3, 4}}},
    {{3, {2, 3, 4}}, {2, {3, 1}}},
    {{2, {3, 1}}, {2, {1, 4}}},
    {{3, {2, 1, 4}}, {2, {3, 1}}},
    {{1, {1}}, {1, {6}}},
    {{2, {6, 1}}, {1, {1}}},
    {{2, {0, 3}}, {1, {3}}},
    {{2, {2, 0}}, {1, {1}}},
    {{2, {1, 0}}, {2, {4, 1}}},
    {{3, {1, 1, 5}}, {3, {5, 1, 1}}},
    {{2, {64, 129}}, {1, {129}}},
    {{2, {64, 129}}, {2, {64, 1}}},
    {{4, {2, 3, 4, 5}}, {4, {2, 1, 4, 1}}},
};
#define N_PAIRS ((int)(sizeof pairs / sizeof pairs[0]))

static fr_status run2(tnode *t, const char *op, int64_t opset, fr_tensor *a, fr_tensor *b)
{
    fr_tensor *ins[2] = {a, b};
    tn_init(t, op, opset, 2, ins, 0, 1);
    return tn_run(t);
}

/* ---- arithmetic ---- */

static double ref_arith(const char *op, double a, double b)
{
    if (!strcmp(op, "Add")) return a + b;
    if (!strcmp(op, "Sub")) return a - b;
    if (!strcmp(op, "Mul")) return a * b;
    return a / b;
}

static void check_arith_float(fr_dtype dt)
{
    fr_rng r = fr_test_rng(dt == FR_F32 ? "arith_f32" : "arith_f64");
    const char *ops[] = {"Add", "Sub", "Mul", "Div"};
    double tol = dt == FR_F32 ? 1e-6 : 1e-15;
    for (int k = 0; k < 4; k++) {
        for (int p = 0; p < N_PAIRS; p++) {
            fr_tensor *a = tnew(dt, pairs[p].a.r, pairs[p].a.d), *b = tnew(dt, pairs[p].b.r, pairs[p].b.d);
            fill(&r, a, -3, 3, 0);
            fill(&r, b, -3, 3, 0);
            tnode t;
            FR_ASSERT_OK(run2(&t, ops[k], 14, a, b));
            fr_tensor *y = t.out[0];
            int er;
            int64_t ed[FR_MAX_RANK];
            CU_ASSERT_FATAL(bshape(a->rank, a->dims, b->rank, b->dims, &er, ed));
            assert_shape(y, er, ed);
            CU_ASSERT_EQUAL(y->dtype, dt);
            int bad = 0;
            for (int64_t i = 0; i < fr_tensor_numel(y); i++) {
                double av = fr_tensor_get_f64(a, src_index(a, y, i));
                double bv = fr_tensor_get_f64(b, src_index(b, y, i));
                double ref = ref_arith(ops[k], av, bv), got = fr_tensor_get_f64(y, i);
                if (!(fabs(got - ref) <= tol * fabs(ref))) {
                    if (bad++ < 3) fprintf(stderr, "\n  %s pair %d i=%lld: got %.10g want %.10g", ops[k], p, (long long)i, got, ref);
                }
            }
            CU_ASSERT_EQUAL(bad, 0);
            tn_free(&t);
            fr_tensor_free(a);
            fr_tensor_free(b);
        }
    }
}

static void test_arith_f32(void) { check_arith_float(FR_F32); }
static void test_arith_f64(void) { check_arith_float(FR_F64); }

/* int32/int64: exact; division truncates toward zero (reference through double, exact for
 * these magnitudes). */
static void test_arith_int(void)
{
    fr_rng r = fr_test_rng("arith_int");
    const char *ops[] = {"Add", "Sub", "Mul", "Div"};
    fr_dtype dts[] = {FR_I32, FR_I64};
    for (int di = 0; di < 2; di++) {
        for (int k = 0; k < 4; k++) {
            for (int p = 0; p < N_PAIRS; p++) {
                fr_tensor *a = tnew(dts[di], pairs[p].a.r, pairs[p].a.d);
                fr_tensor *b = tnew(dts[di], pairs[p].b.r, pairs[p].b.d);
                fill(&r, a, -1000, 1000, 0);
                fill(&r, b, -50, 50, 0);
                for (int64_t i = 0; i < fr_tensor_numel(b); i++)
                    if (fr_tensor_get_i64(b, i) == 0) put_f(b, i, 7);
                tnode t;
                FR_ASSERT_OK(run2(&t, ops[k], 14, a, b));
                fr_tensor *y = t.out[0];
                CU_ASSERT_EQUAL(y->dtype, dts[di]);
                int bad = 0;
                for (int64_t i = 0; i < fr_tensor_numel(y); i++) {
                    double av = (double)fr_tensor_get_i64(a, src_index(a, y, i));
                    double bv = (double)fr_tensor_get_i64(b, src_index(b, y, i));
                    double ref = k == 3 ? trunc(av / bv) : ref_arith(ops[k], av, bv);
                    bad += (double)fr_tensor_get_i64(y, i) != ref;
                }
                CU_ASSERT_EQUAL(bad, 0);
                tn_free(&t);
                fr_tensor_free(a);
                fr_tensor_free(b);
            }
        }
    }
    /* wrapping at the edges, and INT_MIN / -1 */
    int64_t d1[1] = {3};
    fr_tensor *a = tnew(FR_I32, 1, d1), *b = tnew(FR_I32, 1, d1);
    int32_t *av = a->data, *bv = b->data;
    av[0] = INT32_MAX; bv[0] = 1;
    av[1] = INT32_MIN; bv[1] = -1;
    av[2] = -7;        bv[2] = 2;
    tnode t;
    FR_ASSERT_OK(run2(&t, "Add", 14, a, b));
    CU_ASSERT_EQUAL(((int32_t *)t.out[0]->data)[0], INT32_MIN);
    tn_free(&t);
    FR_ASSERT_OK(run2(&t, "Div", 14, a, b));
    CU_ASSERT_EQUAL(((int32_t *)t.out[0]->data)[1], INT32_MIN);
    CU_ASSERT_EQUAL(((int32_t *)t.out[0]->data)[2], -3);
    tn_free(&t);
    FR_ASSERT_OK(run2(&t, "Mul", 14, a, a));
    CU_ASSERT_EQUAL(((int32_t *)t.out[0]->data)[0], 1); /* (2^31-1)^2 mod 2^32 */
    tn_free(&t);
    bv[2] = 0; /* integer division by zero is an error, not a crash */
    CU_ASSERT_EQUAL(run2(&t, "Div", 14, a, b), FR_ERR_RANGE);
    assert_error_mentions("division by zero");
    tn_free(&t);
    fr_tensor_free(a);
    fr_tensor_free(b);
}

/* ---- Pow ---- */

static void test_pow(void)
{
    fr_rng r = fr_test_rng("pow");
    fr_dtype edts[] = {FR_F32, FR_I64, FR_I32, FR_F64};
    for (int p = 0; p < N_PAIRS; p++) {
        for (int e = 0; e < 4; e++) {
            fr_tensor *a = tnew(FR_F32, pairs[p].a.r, pairs[p].a.d);
            fr_tensor *b = tnew(edts[e], pairs[p].b.r, pairs[p].b.d);
            fill(&r, a, -3, 3, 0);
            fill(&r, b, -3, 3, 1); /* integral exponents: negative bases stay real */
            if (edts[e] == FR_F64 && fr_tensor_numel(b) > 1) put_f(b, 0, 0.5); /* NaN for a < 0 */
            tnode t;
            FR_ASSERT_OK(run2(&t, "Pow", 15, a, b));
            fr_tensor *y = t.out[0];
            CU_ASSERT_EQUAL(y->dtype, FR_F32);
            int bad = 0;
            for (int64_t i = 0; i < fr_tensor_numel(y); i++) {
                double av = fr_tensor_get_f64(a, src_index(a, y, i));
                double bv = fr_tensor_get_f64(b, src_index(b, y, i));
                double ref = pow(av, bv), got = fr_tensor_get_f64(y, i);
                if (isnan(ref) ? !isnan(got) : !(fabs(got - ref) <= 1e-6 * fabs(ref))) {
                    if (bad++ < 3) fprintf(stderr, "\n  pow(%g, %g) got %.10g want %.10g", av, bv, got, ref);
                }
            }
            CU_ASSERT_EQUAL(bad, 0);
            tn_free(&t);
            fr_tensor_free(a);
            fr_tensor_free(b);
        }
    }
    /* scalar exponents: 2 (the multiply fast path), 3 and 0.5, on negative bases too */
    double exps[] = {2, 3, 0.5, -1};
    int64_t d[2] = {5, 8};
    for (int k = 0; k < 4; k++) {
        fr_tensor *a = tnew(FR_F32, 2, d), *b = tnew(FR_F32, 0, NULL);
        fill(&r, a, -4, 4, 0);
        *(float *)b->data = (float)exps[k];
        tnode t;
        FR_ASSERT_OK(run2(&t, "Pow", 13, a, b));
        int bad = 0;
        for (int i = 0; i < 40; i++) {
            double av = ((float *)a->data)[i], ref = pow(av, exps[k]);
            double got = ((float *)t.out[0]->data)[i];
            bad += isnan(ref) ? !isnan(got) : !(fabs(got - ref) <= 1e-6 * fabs(ref));
        }
        CU_ASSERT_EQUAL(bad, 0);
        tn_free(&t);
        fr_tensor_free(a);
        fr_tensor_free(b);
    }
    /* integer base, integer exponent: exact; negative exponents truncate 1/x^e */
    fr_tensor *a = tnew(FR_I64, 2, d), *b = tnew(FR_I64, 1, d + 1);
    fill(&r, a, -5, 5, 0);
    fill(&r, b, -2, 9, 0);
    for (int i = 0; i < 40; i++) /* 0 to a negative power is the error case below */
        if (((int64_t *)a->data)[i] == 0) ((int64_t *)a->data)[i] = 2;
    tnode t;
    FR_ASSERT_OK(run2(&t, "Pow", 15, a, b));
    int bad = 0;
    for (int i = 0; i < 40; i++) {
        int64_t av = ((int64_t *)a->data)[i], ev = ((int64_t *)b->data)[i % 8];
        int64_t want = 1;
        if (ev < 0)
            want = av == 1 ? 1 : av == -1 ? ((ev & 1) ? -1 : 1) : 0;
        else
            for (int64_t j = 0; j < ev; j++) want *= av;
        bad += ((int64_t *)t.out[0]->data)[i] != want;
    }
    tn_free(&t);
    CU_ASSERT_EQUAL(bad, 0);
    /* 0 to a negative power is an error; int base with float exponent is unsupported */
    ((int64_t *)a->data)[0] = 0;
    for (int j = 0; j < 8; j++) ((int64_t *)b->data)[j] = -1;
    CU_ASSERT_EQUAL(run2(&t, "Pow", 15, a, b), FR_ERR_RANGE);
    tn_free(&t);
    fr_tensor *bf = tnew(FR_F32, 0, NULL);
    CU_ASSERT_EQUAL(run2(&t, "Pow", 15, a, bf), FR_ERR_UNSUPPORTED);
    assert_error_mentions("int64");
    tn_free(&t);
    fr_tensor_free(bf);
    fr_tensor_free(a);
    fr_tensor_free(b);
}

/* ---- Mod ---- */

static void test_mod(void)
{
    fr_rng r = fr_test_rng("mod");
    fr_dtype dts[] = {FR_I64, FR_I32, FR_F32, FR_F64};
    for (int di = 0; di < 4; di++) {
        for (int fm = 0; fm <= 1; fm++) {
            int is_float = di >= 2;
            for (int p = 0; p < N_PAIRS; p++) {
                fr_tensor *a = tnew(dts[di], pairs[p].a.r, pairs[p].a.d);
                fr_tensor *b = tnew(dts[di], pairs[p].b.r, pairs[p].b.d);
                fill(&r, a, -100, 100, 0);
                fill(&r, b, -9, 9, 0);
                for (int64_t i = 0; i < fr_tensor_numel(b); i++)
                    if (fr_tensor_get_f64(b, i) == 0) put_f(b, i, -4);
                tnode t;
                fr_tensor *ins[2] = {a, b};
                tn_init(&t, "Mod", 13, 2, ins, 0, 1);
                FR_ASSERT_OK(fr_node_set_attr_int(tn_node(&t), "fmod", fm));
                fr_status st = tn_run(&t);
                if (is_float && !fm) { /* ONNX: floats need fmod=1 */
                    CU_ASSERT_EQUAL(st, FR_ERR_UNSUPPORTED);
                    assert_error_mentions("fmod");
                } else {
                    CU_ASSERT_EQUAL_FATAL(st, FR_OK);
                    fr_tensor *y = t.out[0];
                    int bad = 0;
                    for (int64_t i = 0; i < fr_tensor_numel(y); i++) {
                        double av = fr_tensor_get_f64(a, src_index(a, y, i));
                        double bv = fr_tensor_get_f64(b, src_index(b, y, i));
                        /* fmod: sign of the dividend; Python mod: sign of the divisor */
                        double ref = fm ? fmod(av, bv) : av - bv * floor(av / bv);
                        bad += fr_tensor_get_f64(y, i) != ref;
                    }
                    CU_ASSERT_EQUAL(bad, 0);
                }
                tn_free(&t);
                fr_tensor_free(a);
                fr_tensor_free(b);
            }
        }
    }
}

/* ---- variadic Max, Min, Sum, Mean ---- */

static const struct { int n; shp s[4]; } var_cases[] = {
    {1, {{2, {3, 4}}}},
    {1, {{0, {0}}}},
    {2, {{2, {3, 1}}, {1, {4}}}},
    {3, {{2, {3, 1}}, {1, {4}}, {3, {2, 1, 1}}}},
    {4, {{0, {0}}, {1, {5}}, {2, {2, 5}}, {2, {2, 1}}}},
    {3, {{2, {0, 3}}, {1, {3}}, {0, {0}}}},
    {2, {{2, {50, 70}}, {2, {50, 70}}}},
};

static void check_variadic(const char *op, fr_dtype dt)
{
    fr_rng r = fr_test_rng(op);
    for (size_t c = 0; c < sizeof var_cases / sizeof var_cases[0]; c++) {
        int n = var_cases[c].n;
        fr_tensor *ins[4];
        int er = 0;
        int64_t ed[FR_MAX_RANK] = {0};
        for (int k = 0; k < n; k++) {
            ins[k] = tnew(dt, var_cases[c].s[k].r, var_cases[c].s[k].d);
            fill(&r, ins[k], -5, 5, dt != FR_F32 && dt != FR_F64);
            int64_t prev[FR_MAX_RANK];
            memcpy(prev, ed, sizeof prev);
            CU_ASSERT_FATAL(bshape(er, prev, ins[k]->rank, ins[k]->dims, &er, ed));
        }
        tnode t;
        tn_init(&t, op, 13, n, ins, 0, 1);
        FR_ASSERT_OK(tn_run(&t));
        fr_tensor *y = t.out[0];
        assert_shape(y, er, ed);
        int bad = 0;
        for (int64_t i = 0; i < fr_tensor_numel(y); i++) {
            double acc = 0, mag = 0;
            for (int k = 0; k < n; k++) {
                double v = fr_tensor_get_f64(ins[k], src_index(ins[k], y, i));
                if (!strcmp(op, "Max")) acc = k ? fmax(acc, v) : v;
                else if (!strcmp(op, "Min")) acc = k ? fmin(acc, v) : v;
                else acc += v;
                mag += fabs(v);
            }
            if (!strcmp(op, "Mean")) {
                acc /= n;
                mag /= n;
            }
            double got = fr_tensor_get_f64(y, i);
            bad += !(fabs(got - acc) <= 1e-6 * mag);
        }
        CU_ASSERT_EQUAL(bad, 0);
        tn_free(&t);
        for (int k = 0; k < n; k++) fr_tensor_free(ins[k]);
    }
}

static void test_variadic(void)
{
    const char *ops[] = {"Max", "Min", "Sum", "Mean"};
    for (int k = 0; k < 4; k++) {
        check_variadic(ops[k], FR_F32);
        check_variadic(ops[k], FR_F64);
    }
    check_variadic("Max", FR_I64);
    check_variadic("Min", FR_I32);
    check_variadic("Sum", FR_I64);
    /* Max/Min propagate NaN from either side (numpy maximum/minimum) */
    int64_t d[1] = {2};
    fr_tensor *a = tnew(FR_F32, 1, d), *b = tnew(FR_F32, 1, d);
    ((float *)a->data)[0] = NAN;
    ((float *)a->data)[1] = 1;
    ((float *)b->data)[0] = 1;
    ((float *)b->data)[1] = NAN;
    for (int k = 0; k < 2; k++) {
        tnode t;
        FR_ASSERT_OK(run2(&t, ops[k], 13, a, b));
        CU_ASSERT(isnan(((float *)t.out[0]->data)[0]) && isnan(((float *)t.out[0]->data)[1]));
        tn_free(&t);
    }
    /* Mean has no integer kernel */
    fr_tensor *ai = tnew(FR_I64, 1, d);
    tnode t;
    tn_init(&t, "Mean", 13, 1, &ai, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_UNSUPPORTED);
    tn_free(&t);
    fr_tensor_free(ai);
    fr_tensor_free(a);
    fr_tensor_free(b);
}

/* ---- comparisons and logic ---- */

static int ref_cmp(const char *op, double a, double b)
{
    if (!strcmp(op, "Equal")) return a == b;
    if (!strcmp(op, "Less")) return a < b;
    if (!strcmp(op, "LessOrEqual")) return a <= b;
    if (!strcmp(op, "Greater")) return a > b;
    return a >= b;
}

static void test_compare(void)
{
    fr_rng r = fr_test_rng("compare");
    const char *ops[] = {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"};
    fr_dtype dts[] = {FR_F32, FR_F64, FR_I32, FR_I64, FR_BOOL};
    for (int di = 0; di < 5; di++) {
        for (int k = 0; k < 5; k++) {
            if (dts[di] == FR_BOOL && k > 0) continue;
            for (int p = 0; p < N_PAIRS; p++) {
                fr_tensor *a = tnew(dts[di], pairs[p].a.r, pairs[p].a.d);
                fr_tensor *b = tnew(dts[di], pairs[p].b.r, pairs[p].b.d);
                fill(&r, a, -2, 2, 1); /* small integer set: plenty of ties */
                fill(&r, b, -2, 2, 1);
                tnode t;
                FR_ASSERT_OK(run2(&t, ops[k], 13, a, b));
                fr_tensor *y = t.out[0];
                CU_ASSERT_EQUAL(y->dtype, FR_BOOL);
                int bad = 0;
                for (int64_t i = 0; i < fr_tensor_numel(y); i++) {
                    double av = fr_tensor_get_f64(a, src_index(a, y, i));
                    double bv = fr_tensor_get_f64(b, src_index(b, y, i));
                    bad += ((uint8_t *)y->data)[i] != ref_cmp(ops[k], av, bv);
                }
                CU_ASSERT_EQUAL(bad, 0);
                tn_free(&t);
                fr_tensor_free(a);
                fr_tensor_free(b);
            }
        }
    }
    /* NaN compares unequal and unordered */
    fr_tensor *a = tnew(FR_F32, 0, NULL), *b = tnew(FR_F32, 0, NULL);
    *(float *)a->data = NAN;
    for (int k = 0; k < 5; k++) {
        tnode t;
        FR_ASSERT_OK(run2(&t, ops[k], 13, a, b));
        CU_ASSERT_EQUAL(*(uint8_t *)t.out[0]->data, 0);
        tn_free(&t);
    }
    /* Less on bool is not a supported kernel */
    fr_tensor *bb = tnew(FR_BOOL, 0, NULL);
    tnode t;
    CU_ASSERT_EQUAL(run2(&t, "Less", 13, bb, bb), FR_ERR_UNSUPPORTED);
    assert_error_mentions("bool");
    tn_free(&t);
    fr_tensor_free(bb);
    fr_tensor_free(a);
    fr_tensor_free(b);
}

static void test_logic(void)
{
    fr_rng r = fr_test_rng("logic");
    const char *ops[] = {"And", "Or", "Xor"};
    for (int k = 0; k < 3; k++) {
        for (int p = 0; p < N_PAIRS; p++) {
            fr_tensor *a = tnew(FR_BOOL, pairs[p].a.r, pairs[p].a.d);
            fr_tensor *b = tnew(FR_BOOL, pairs[p].b.r, pairs[p].b.d);
            fill(&r, a, 0, 1, 0);
            fill(&r, b, 0, 1, 0);
            tnode t;
            FR_ASSERT_OK(run2(&t, ops[k], 7, a, b));
            fr_tensor *y = t.out[0];
            CU_ASSERT_EQUAL(y->dtype, FR_BOOL);
            int bad = 0;
            for (int64_t i = 0; i < fr_tensor_numel(y); i++) {
                int av = ((uint8_t *)a->data)[src_index(a, y, i)];
                int bv = ((uint8_t *)b->data)[src_index(b, y, i)];
                int want = k == 0 ? (av && bv) : k == 1 ? (av || bv) : (av != bv);
                bad += ((uint8_t *)y->data)[i] != want;
            }
            CU_ASSERT_EQUAL(bad, 0);
            tn_free(&t);
            fr_tensor_free(a);
            fr_tensor_free(b);
        }
    }
    int64_t d[1] = {2};
    fr_tensor *f = tnew(FR_F32, 1, d);
    tnode t;
    CU_ASSERT_EQUAL(run2(&t, "And", 7, f, f), FR_ERR_UNSUPPORTED);
    assert_error_mentions("float32");
    tn_free(&t);
    fr_tensor_free(f);
}

/* ---- Where ---- */

static void test_where(void)
{
    fr_rng r = fr_test_rng("where");
    static const struct { shp c, x, y; } cases[] = {
        {{2, {3, 1}}, {2, {1, 4}}, {0, {0}}},      /* broadcast condition */
        {{1, {4}}, {3, {2, 3, 4}}, {2, {3, 4}}},
        {{3, {2, 3, 4}}, {0, {0}}, {1, {1}}},
        {{0, {0}}, {1, {5}}, {1, {5}}},            /* scalar condition */
        {{2, {0, 3}}, {1, {3}}, {1, {1}}},         /* empty */
        {{2, {40, 33}}, {2, {40, 33}}, {2, {40, 33}}},
    };
    fr_dtype dts[] = {FR_F32, FR_I64, FR_U8, FR_F16, FR_BOOL, FR_F64};
    for (int di = 0; di < 6; di++) {
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            fr_tensor *cond = tnew(FR_BOOL, cases[c].c.r, cases[c].c.d);
            fr_tensor *x = tnew(dts[di], cases[c].x.r, cases[c].x.d);
            fr_tensor *y = tnew(dts[di], cases[c].y.r, cases[c].y.d);
            fill(&r, cond, 0, 1, 0);
            for (size_t b = 0; b < x->nbytes; b++) ((uint8_t *)x->data)[b] = (uint8_t)rand_int(&r, 0, 255);
            for (size_t b = 0; b < y->nbytes; b++) ((uint8_t *)y->data)[b] = (uint8_t)rand_int(&r, 0, 255);
            fr_tensor *ins[3] = {cond, x, y};
            tnode t;
            tn_init(&t, "Where", 16, 3, ins, 0, 1);
            FR_ASSERT_OK(tn_run(&t));
            fr_tensor *o = t.out[0];
            int er, r2;
            int64_t ed[FR_MAX_RANK], e2[FR_MAX_RANK];
            CU_ASSERT_FATAL(bshape(cond->rank, cond->dims, x->rank, x->dims, &r2, e2));
            CU_ASSERT_FATAL(bshape(r2, e2, y->rank, y->dims, &er, ed));
            assert_shape(o, er, ed);
            CU_ASSERT_EQUAL(o->dtype, dts[di]);
            size_t es = fr_dtype_size(dts[di]);
            int bad = 0;
            for (int64_t i = 0; i < fr_tensor_numel(o); i++) {
                int cv = ((uint8_t *)cond->data)[src_index(cond, o, i)];
                const uint8_t *want = cv ? (uint8_t *)x->data + es * (size_t)src_index(x, o, i)
                                         : (uint8_t *)y->data + es * (size_t)src_index(y, o, i);
                bad += memcmp((uint8_t *)o->data + es * (size_t)i, want, es) != 0;
            }
            CU_ASSERT_EQUAL(bad, 0);
            tn_free(&t);
            fr_tensor_free(cond);
            fr_tensor_free(x);
            fr_tensor_free(y);
        }
    }
    /* condition must be bool; x and y one dtype */
    int64_t d[1] = {3};
    fr_tensor *c = tnew(FR_F32, 1, d), *x = tnew(FR_F32, 1, d), *xi = tnew(FR_I64, 1, d);
    fr_tensor *ins[3] = {c, x, x};
    tnode t;
    tn_init(&t, "Where", 16, 3, ins, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    assert_error_mentions("bool");
    tn_free(&t);
    fr_tensor *cb = tnew(FR_BOOL, 1, d);
    fr_tensor *ins2[3] = {cb, x, xi};
    tn_init(&t, "Where", 16, 3, ins2, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    tn_free(&t);
    fr_tensor_free(cb);
    fr_tensor_free(c);
    fr_tensor_free(x);
    fr_tensor_free(xi);
}

/* ---- Expand ---- */

static fr_tensor *shape_tensor(int n, const int64_t *v)
{
    int64_t d[1] = {n};
    fr_tensor *t = tnew(FR_I64, 1, d);
    for (int i = 0; i < n; i++) ((int64_t *)t->data)[i] = v[i];
    return t;
}

static void test_expand(void)
{
    fr_rng r = fr_test_rng("expand");
    static const struct { shp in; int n; int64_t shape[4]; } cases[] = {
        {{2, {3, 1}}, 3, {2, 1, 4}},   /* 1 in the shape keeps the input dim */
        {{2, {2, 3}}, 1, {3}},         /* shape of smaller rank than the input */
        {{1, {4}}, 2, {1, 1}},         /* all-ones shape: rank grows only */
        {{0, {0}}, 2, {2, 3}},         /* scalar input */
        {{2, {2, 3}}, 0, {0}},         /* empty shape: identity */
        {{1, {1}}, 2, {3, 0}},         /* expand to an empty tensor */
        {{3, {1, 4, 1}}, 3, {5, 1, 7}},
    };
    fr_dtype dts[] = {FR_F32, FR_I64, FR_I8, FR_F16, FR_BOOL};
    for (int di = 0; di < 5; di++) {
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
            fr_tensor *x = tnew(dts[di], cases[c].in.r, cases[c].in.d);
            for (size_t b = 0; b < x->nbytes; b++) ((uint8_t *)x->data)[b] = (uint8_t)rand_int(&r, 0, 255);
            fr_tensor *s = shape_tensor(cases[c].n, cases[c].shape);
            fr_tensor *ins[2] = {x, s};
            tnode t;
            tn_init(&t, "Expand", 13, 2, ins, 2u, 1);
            FR_ASSERT_OK(tn_run(&t));
            fr_tensor *o = t.out[0];
            int er;
            int64_t ed[FR_MAX_RANK];
            CU_ASSERT_FATAL(bshape(x->rank, x->dims, cases[c].n, cases[c].shape, &er, ed));
            assert_shape(o, er, ed);
            CU_ASSERT_EQUAL(o->dtype, dts[di]);
            size_t es = fr_dtype_size(dts[di]);
            int bad = 0;
            for (int64_t i = 0; i < fr_tensor_numel(o); i++)
                bad += memcmp((uint8_t *)o->data + es * (size_t)i,
                              (uint8_t *)x->data + es * (size_t)src_index(x, o, i), es) != 0;
            CU_ASSERT_EQUAL(bad, 0);
            tn_free(&t);
            fr_tensor_free(x);
            fr_tensor_free(s);
        }
    }
    /* a shape that does not broadcast, a negative dim, a non-constant shape */
    int64_t d[1] = {3}, bad_shape[2] = {2, 4}, neg[1] = {-1};
    fr_tensor *x = tnew(FR_F32, 1, d), *s = shape_tensor(2, bad_shape), *sn = shape_tensor(1, neg);
    fr_tensor *ins[2] = {x, s};
    tnode t;
    tn_init(&t, "Expand", 13, 2, ins, 2u, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    assert_error_mentions("broadcast");
    tn_free(&t);
    ins[1] = sn;
    tn_init(&t, "Expand", 13, 2, ins, 2u, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    assert_error_mentions("negative");
    tn_free(&t);
    ins[1] = s;
    tn_init(&t, "Expand", 13, 2, ins, 0u, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_SHAPE);
    assert_error_mentions("constant");
    tn_free(&t);
    fr_tensor_free(x);
    fr_tensor_free(s);
    fr_tensor_free(sn);
}

/* ---- type and shape errors ---- */

static void test_errors(void)
{
    int64_t d3[1] = {3}, d4[1] = {4};
    fr_tensor *f3 = tnew(FR_F32, 1, d3), *f4 = tnew(FR_F32, 1, d4), *i3 = tnew(FR_I64, 1, d3);
    fr_tensor *b3 = tnew(FR_BOOL, 1, d3), *h3 = tnew(FR_F16, 1, d3);
    tnode t;
    CU_ASSERT_EQUAL(run2(&t, "Add", 14, f3, f4), FR_ERR_SHAPE);
    assert_error_mentions("[3]");
    tn_free(&t);
    CU_ASSERT_EQUAL(run2(&t, "Mul", 14, f3, i3), FR_ERR_SHAPE);
    assert_error_mentions("int64");
    tn_free(&t);
    CU_ASSERT_EQUAL(run2(&t, "Add", 14, b3, b3), FR_ERR_UNSUPPORTED);
    assert_error_mentions("bool");
    tn_free(&t);
    CU_ASSERT_EQUAL(run2(&t, "Sub", 14, h3, h3), FR_ERR_UNSUPPORTED);
    assert_error_mentions("float16");
    tn_free(&t);
    tn_init(&t, "Sum", 13, 0, NULL, 0, 1);
    CU_ASSERT_EQUAL(tn_run(&t), FR_ERR_GRAPH);
    tn_free(&t);
    fr_tensor_free(f3);
    fr_tensor_free(f4);
    fr_tensor_free(i3);
    fr_tensor_free(b3);
    fr_tensor_free(h3);
}

static void test_registered(void)
{
    const char *names[] = {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum",
                           "Mean", "Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual",
                           "And", "Or", "Xor", "Where", "Expand"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const fr_op_def *op = fr_op_find("", names[i]);
        CU_ASSERT_PTR_NOT_NULL(op);
        if (op) CU_ASSERT(op->infer && op->cpu);
    }
}

static CU_TestInfo binary_tests[] = {
    {"registered", test_registered},
    {"arith_f32", test_arith_f32},
    {"arith_f64", test_arith_f64},
    {"arith_int", test_arith_int},
    {"pow", test_pow},
    {"mod", test_mod},
    {"variadic", test_variadic},
    {"compare", test_compare},
    {"logic", test_logic},
    {"where", test_where},
    {"expand", test_expand},
    {"errors", test_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"ops_binary", NULL, NULL, NULL, NULL, binary_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
