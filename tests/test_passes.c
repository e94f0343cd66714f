/* The forward passes and the CPU executor on graphs built here: constant folding of a
 * Shape -> Gather -> Unsqueeze -> Concat -> Reshape chain, what must not fold (parameters,
 * large outputs), DCE, Identity removal keeping output names, symbolic-dim errors, the
 * per-node inference check, declared output shapes; the executor's buffer reuse, input
 * checks, kernel error context and repeatable runs, on fresh random inputs. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/gradcheck.h"
#include "ops/op.h"
#include "passes/passes.h"
#include "runtime/exec/executor.h"

/* ---- graph building helpers ---- */

static int val(fr_graph *g, const char *name)
{
    int id = -1;
    if (fr_graph_add_value(g, name, &id) != FR_OK) return -1;
    return id;
}

/* A graph input; dims < 0 take the symbolic name from `params` (may be NULL). */
static int input(fr_graph *g, const char *name, fr_dtype dt, int rank, const int64_t *dims,
                 const char *const *params)
{
    int id = val(g, name);
    fr_value_set_shape(&g->values[id], dt, rank, dims);
    for (int d = 0; d < rank; d++)
        if (params && params[d]) g->values[id].dim_params[d] = strdup(params[d]);
    FR_ASSERT_OK(fr_graph_mark_input(g, id));
    return id;
}

static int const_i64(fr_graph *g, const char *name, int rank, int64_t n, const int64_t *v)
{
    int id = val(g, name);
    fr_tensor *t;
    int64_t dims[1] = {n};
    if (fr_tensor_new(FR_I64, rank, dims, name, &t) != FR_OK) return -1;
    memcpy(t->data, v, (size_t)n * sizeof(int64_t));
    FR_ASSERT_OK(fr_graph_set_initializer(g, id, t));
    return id;
}

static int node1(fr_graph *g, const char *op, const char *name, int n_in, const int *in,
                 const char *out_name)
{
    int out = val(g, out_name);
    if (fr_graph_add_node(g, op, "", name, n_in, in, 1, &out, NULL) != FR_OK) return -1;
    return out;
}

static int count_op(const fr_graph *g, const char *op)
{
    int c = 0;
    for (int i = 0; i < g->n_nodes; i++) c += strcmp(g->nodes[i].op_type, op) == 0;
    return c;
}

static int have_ops(const char *const *ops)
{
    for (; *ops; ops++)
        if (!fr_op_find("", *ops)) {
            fprintf(stderr, "\n  op %s is not registered yet\n", *ops);
            return 0;
        }
    return 1;
}

/* ---- folding ---- */

/* x[batch, seq, 4] -> Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)),
 * Unsqueeze(Gather(Shape(x), 1)), [2, 2])) : only the Reshape may survive. */
static fr_graph *shape_chain_graph(void)
{
    fr_graph *g = fr_gc_new_graph(13);
    const char *params[3] = {"batch", "seq", NULL};
    int64_t dims[3] = {-1, -1, 4};
    int x = input(g, "x", FR_F32, 3, dims, params);
    int64_t zero = 0, one = 1, two_two[2] = {2, 2};
    int c0 = const_i64(g, "c0", 0, 1, &zero), c1 = const_i64(g, "c1", 0, 1, &one);
    int ax = const_i64(g, "axes0", 1, 1, &zero), c22 = const_i64(g, "c22", 1, 2, two_two);
    int s = node1(g, "Shape", "shape", 1, &x, "s");
    int in_g0[2] = {s, c0}, in_g1[2] = {s, c1};
    int b = node1(g, "Gather", "gather_b", 2, in_g0, "b");
    int q = node1(g, "Gather", "gather_q", 2, in_g1, "q");
    int in_u0[2] = {b, ax}, in_u1[2] = {q, ax};
    int b1 = node1(g, "Unsqueeze", "unsq_b", 2, in_u0, "b1");
    int q1 = node1(g, "Unsqueeze", "unsq_q", 2, in_u1, "q1");
    int in_c[3] = {b1, q1, c22};
    int shp = node1(g, "Concat", "concat", 3, in_c, "target");
    FR_ASSERT_OK(fr_node_set_attr_int(&g->nodes[g->n_nodes - 1], "axis", 0));
    int in_r[2] = {x, shp};
    int y = node1(g, "Reshape", "reshape", 2, in_r, "y");
    FR_ASSERT_OK(fr_graph_mark_output(g, y));
    return g;
}

static void test_fold_shape_chain(void)
{
    static const char *const ops[] = {"Shape", "Gather", "Unsqueeze", "Concat", "Reshape", NULL};
    CU_ASSERT_FATAL(have_ops(ops));
    fr_graph *g = shape_chain_graph();
    fr_dim_binding dims[2] = {{"batch", 2}, {"seq", 3}};
    fr_prepare_options opt;
    fr_prepare_options_default(&opt);
    opt.dims = dims;
    opt.n_dims = 2;
    fr_prepare_stats stats;
    FR_ASSERT_OK(fr_prepare_forward(g, &opt, &stats));
    CU_ASSERT_EQUAL(g->n_nodes, 1);
    CU_ASSERT_STRING_EQUAL(g->nodes[0].op_type, "Reshape");
    CU_ASSERT_EQUAL(stats.nodes_folded, 6);
    CU_ASSERT_EQUAL(stats.nodes_removed, 6);
    const fr_value *target = &g->values[g->nodes[0].inputs[1]];
    CU_ASSERT_PTR_NOT_NULL_FATAL(target->constant);
    CU_ASSERT(target->flags & FR_VAL_FOLDED);
    CU_ASSERT_EQUAL_FATAL(fr_tensor_numel(target->constant), 4);
    int64_t want[4] = {2, 3, 2, 2};
    for (int i = 0; i < 4; i++) CU_ASSERT_EQUAL(fr_tensor_get_i64(target->constant, i), want[i]);
    const fr_value *y = &g->values[g->outputs[0]];
    CU_ASSERT_EQUAL(y->rank, 4);
    CU_ASSERT_EQUAL(y->dims[1], 3);

    /* and it runs: Reshape keeps the data */
    fr_rng r = fr_test_rng("fold_shape_chain");
    fr_exec *e;
    FR_ASSERT_OK(fr_exec_new(g, &e));
    int64_t xd[3] = {2, 3, 4};
    fr_tensor *x;
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 3, xd, "x", &x));
    fr_rng_fill(&r, x->data, 24, -1, 1);
    FR_ASSERT_OK(fr_exec_set_input(e, "x", x));
    FR_ASSERT_OK(fr_exec_run(e));
    const fr_tensor *out = fr_exec_output(e, "y");
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    CU_ASSERT_EQUAL(out->rank, 4);
    CU_ASSERT(memcmp(out->data, x->data, 24 * sizeof(float)) == 0);
    fr_tensor_free(x);
    fr_exec_free(e);
    fr_graph_free(g);

    /* without folding the Reshape target is not constant: the static-shape error */
    g = shape_chain_graph();
    opt.fold = 0;
    CU_ASSERT_EQUAL(fr_prepare_forward(g, &opt, NULL), FR_ERR_SHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "reshape"));
    fr_graph_free(g);
}

/* Parameters never fold; integer constants do, below the size cap. */
static void test_fold_rules(void)
{
    fr_graph *g = fr_gc_new_graph(17);
    int64_t d4[1] = {4};
    int x = input(g, "x", FR_F32, 1, d4, NULL);
    int w = val(g, "w"), k = val(g, "k");
    fr_tensor *wt, *kt;
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 1, d4, "w", &wt));
    FR_ASSERT_OK(fr_tensor_new(FR_I64, 1, d4, "k", &kt));
    for (int i = 0; i < 4; i++) {
        ((float *)wt->data)[i] = (float)i;
        ((int64_t *)kt->data)[i] = i + 1;
    }
    FR_ASSERT_OK(fr_graph_set_initializer(g, w, wt));
    FR_ASSERT_OK(fr_graph_set_initializer(g, k, kt));
    CU_ASSERT(g->values[w].flags & FR_VAL_PARAM);
    CU_ASSERT(!(g->values[k].flags & FR_VAL_PARAM));
    int nw = node1(g, "Neg", "neg_w", 1, &w, "nw");
    int in_a[2] = {x, nw};
    int y = node1(g, "Add", "add", 2, in_a, "y");
    int nk = node1(g, "Neg", "neg_k", 1, &k, "nk");
    int z = node1(g, "Abs", "abs_k", 1, &nk, "z");
    FR_ASSERT_OK(fr_graph_mark_output(g, y));
    FR_ASSERT_OK(fr_graph_mark_output(g, z));
    fr_prepare_stats st;
    FR_ASSERT_OK(fr_prepare_forward(g, NULL, &st));
    CU_ASSERT_EQUAL(st.nodes_folded, 2); /* neg_k, abs_k */
    CU_ASSERT_EQUAL(g->n_nodes, 2);      /* neg_w (reads a parameter), add */
    CU_ASSERT_EQUAL(count_op(g, "Neg"), 1);
    const fr_value *zv = &g->values[fr_graph_find_value(g, "z")];
    CU_ASSERT_PTR_NOT_NULL_FATAL(zv->constant);
    CU_ASSERT(zv->flags & FR_VAL_FOLDED);
    CU_ASSERT_EQUAL(fr_tensor_get_i64(zv->constant, 3), 4);
    CU_ASSERT(g->values[fr_graph_find_value(g, "nw")].constant == NULL);
    /* a folded graph output is served from the constant */
    fr_exec *e;
    FR_ASSERT_OK(fr_exec_new(g, &e));
    fr_tensor *xt;
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 1, d4, "x", &xt));
    fr_rng r = fr_test_rng("fold_rules");
    fr_rng_fill(&r, xt->data, 4, -2, 2);
    FR_ASSERT_OK(fr_exec_set_input(e, "x", xt));
    FR_ASSERT_OK(fr_exec_run(e));
    const fr_tensor *yo = fr_exec_output(e, "y"), *zo = fr_exec_output(e, "z");
    CU_ASSERT_PTR_NOT_NULL_FATAL(yo);
    CU_ASSERT_PTR_NOT_NULL_FATAL(zo);
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(((float *)yo->data)[i], ((float *)xt->data)[i] - (float)i);
        CU_ASSERT_EQUAL(((int64_t *)zo->data)[i], i + 1);
    }
    fr_tensor_free(xt);
    fr_exec_free(e);
    fr_graph_free(g);

    /* the size cap: with a cap of 3 elements nothing of [4] folds */
    g = fr_gc_new_graph(17);
    k = val(g, "k");
    FR_ASSERT_OK(fr_tensor_new(FR_I64, 1, d4, "k", &kt));
    FR_ASSERT_OK(fr_graph_set_initializer(g, k, kt));
    nk = node1(g, "Neg", "neg_k", 1, &k, "nk");
    FR_ASSERT_OK(fr_graph_mark_output(g, nk));
    fr_prepare_options opt;
    fr_prepare_options_default(&opt);
    opt.fold_max_elements = 3;
    FR_ASSERT_OK(fr_prepare_forward(g, &opt, &st));
    CU_ASSERT_EQUAL(st.nodes_folded, 0);
    CU_ASSERT_EQUAL(g->n_nodes, 1);
    fr_graph_free(g);
}

/* ---- DCE and Identity removal ---- */

static void test_dce(void)
{
    fr_graph *g = fr_gc_new_graph(17);
    int64_t d[2] = {2, 3};
    int x = input(g, "x", FR_F32, 2, d, NULL);
    int a = node1(g, "Neg", "unused_neg", 1, &x, "a");
    node1(g, "NoSuchOp", "unused_unsupported", 1, &a, "a2"); /* dead: never resolved */
    int y = node1(g, "Abs", "abs", 1, &x, "y");
    FR_ASSERT_OK(fr_graph_mark_output(g, y));
    fr_prepare_stats st;
    FR_ASSERT_OK(fr_prepare_forward(g, NULL, &st));
    CU_ASSERT_EQUAL(g->n_nodes, 1);
    CU_ASSERT_STRING_EQUAL(g->nodes[0].name, "abs");
    CU_ASSERT_EQUAL(st.nodes_removed, 2);
    fr_graph_free(g);

    /* a live unsupported op: the error names op, node and opset */
    g = fr_gc_new_graph(17);
    x = input(g, "x", FR_F32, 2, d, NULL);
    y = node1(g, "NoSuchOp", "the_node", 1, &x, "y");
    FR_ASSERT_OK(fr_graph_mark_output(g, y));
    CU_ASSERT_EQUAL(fr_prepare_forward(g, NULL, NULL), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "NoSuchOp"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "the_node"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "17"));
    fr_graph_free(g);

    /* fr_dce alone: folded outputs count as not needing their producer */
    g = fr_gc_new_graph(17);
    x = input(g, "x", FR_F32, 2, d, NULL);
    a = node1(g, "Neg", "n1", 1, &x, "a");
    y = node1(g, "Abs", "n2", 1, &a, "y");
    FR_ASSERT_OK(fr_graph_mark_output(g, y));
    int removed;
    FR_ASSERT_OK(fr_dce(g, &removed));
    CU_ASSERT_EQUAL(removed, 0);
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 2, d, "y", &g->values[y].constant));
    FR_ASSERT_OK(fr_dce(g, &removed));
    CU_ASSERT_EQUAL(removed, 2);
    CU_ASSERT(g->nodes[0].dead && g->nodes[1].dead);
    fr_graph_free(g);
}

static void test_identity_removal(void)
{
    fr_graph *g = fr_gc_new_graph(17);
    int64_t d[1] = {5};
    int x = input(g, "x", FR_F32, 1, d, NULL);
    /* x -> Identity -> a -> Neg -> t -> Identity -> u -> Identity -> out (graph output) */
    int a = node1(g, "Identity", "id_a", 1, &x, "a");
    int t = node1(g, "Neg", "neg", 1, &a, "t");
    int u = node1(g, "Identity", "id_u", 1, &t, "u");
    int out = node1(g, "Identity", "id_out", 1, &u, "out");
    /* out -> Identity -> out2 (another graph output: this copy must stay) */
    int out2 = node1(g, "Identity", "id_out2", 1, &out, "out2");
    /* x -> Identity -> passthrough (graph output fed by a graph input: stays) */
    int pass = node1(g, "Identity", "id_pass", 1, &x, "passthrough");
    /* an Abs reading the middle of the chain, so 'u' has two readers */
    int v = node1(g, "Abs", "abs", 1, &u, "v");
    FR_ASSERT_OK(fr_graph_mark_output(g, out));
    FR_ASSERT_OK(fr_graph_mark_output(g, out2));
    FR_ASSERT_OK(fr_graph_mark_output(g, pass));
    FR_ASSERT_OK(fr_graph_mark_output(g, v));
    fr_prepare_stats st;
    FR_ASSERT_OK(fr_prepare_forward(g, NULL, &st));
    CU_ASSERT_EQUAL(st.identities_removed, 3);
    CU_ASSERT_EQUAL(count_op(g, "Identity"), 2);
    CU_ASSERT_EQUAL(g->n_nodes, 4); /* neg, abs, id_out2, id_pass */
    /* the graph outputs keep their names, in order */
    CU_ASSERT_STRING_EQUAL(g->values[g->outputs[0]].name, "out");
    CU_ASSERT_STRING_EQUAL(g->values[g->outputs[1]].name, "out2");
    CU_ASSERT_STRING_EQUAL(g->values[g->outputs[2]].name, "passthrough");
    CU_ASSERT_STRING_EQUAL(g->values[g->outputs[3]].name, "v");
    /* Neg now writes 'out' directly and reads x */
    int neg = -1;
    for (int i = 0; i < g->n_nodes; i++)
        if (strcmp(g->nodes[i].name, "neg") == 0) neg = i;
    CU_ASSERT_FATAL(neg >= 0);
    CU_ASSERT_EQUAL(g->nodes[neg].inputs[0], x);
    CU_ASSERT_STRING_EQUAL(g->values[g->nodes[neg].outputs[0]].name, "out");
    (void)out;

    fr_rng r = fr_test_rng("identity_removal");
    fr_exec *e;
    FR_ASSERT_OK(fr_exec_new(g, &e));
    fr_tensor *xt;
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 1, d, "x", &xt));
    fr_rng_fill(&r, xt->data, 5, -3, 3);
    FR_ASSERT_OK(fr_exec_set_input(e, "x", xt));
    FR_ASSERT_OK(fr_exec_run(e));
    const float *xv = xt->data;
    const char *names[4] = {"out", "out2", "passthrough", "v"};
    for (int o = 0; o < 4; o++) {
        const fr_tensor *ot = fr_exec_output(e, names[o]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ot);
        CU_ASSERT_STRING_EQUAL(fr_exec_output_name(e, o), names[o]);
        for (int i = 0; i < 5; i++) {
            float want = o == 2 ? xv[i] : o == 3 ? fabsf(xv[i]) : -xv[i];
            CU_ASSERT_EQUAL(((float *)ot->data)[i], want);
        }
    }
    fr_tensor_free(xt);
    fr_exec_free(e);
    fr_graph_free(g);
}

/* ---- dims and inference checks ---- */

static fr_graph *sym_graph(void)
{
    fr_graph *g = fr_gc_new_graph(17);
    const char *params[2] = {"batch", "seq"};
    int64_t dims[2] = {-1, -1};
    int x = input(g, "ids", FR_F32, 2, dims, params);
    int y = node1(g, "Neg", "neg", 1, &x, "y");
    FR_ASSERT_OK(fr_graph_mark_output(g, y));
    return g;
}

static void test_symbolic_dims(void)
{
    fr_graph *g = sym_graph();
    fr_dim_binding one[1] = {{"batch", 2}};
    fr_prepare_options opt;
    fr_prepare_options_default(&opt);
    opt.dims = one;
    opt.n_dims = 1;
    CU_ASSERT_EQUAL(fr_prepare_forward(g, &opt, NULL), FR_ERR_SHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "'ids'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "'seq'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "--dim seq=VALUE"));
    fr_graph_free(g);

    /* a --dim the model does not have */
    g = sym_graph();
    fr_dim_binding typo[1] = {{"batchsize", 2}};
    opt.dims = typo;
    CU_ASSERT_EQUAL(fr_prepare_forward(g, &opt, NULL), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "batchsize"));
    fr_graph_free(g);

    /* a name given twice */
    g = sym_graph();
    fr_dim_binding twice[2] = {{"seq", 2}, {"seq", 3}};
    opt.dims = twice;
    opt.n_dims = 2;
    CU_ASSERT_EQUAL(fr_prepare_forward(g, &opt, NULL), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "twice"));
    fr_graph_free(g);

    /* dims from the shape of the array the caller will feed; --dim wins and must agree */
    g = sym_graph();
    fr_input_shape shp = {"ids", 2, {4, 7}};
    opt.dims = one; /* batch = 2 */
    opt.n_dims = 1;
    opt.input_shapes = &shp;
    opt.n_input_shapes = 1;
    CU_ASSERT_EQUAL(fr_prepare_forward(g, &opt, NULL), FR_ERR_SHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "[batch=2, seq]"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "[4, 7]"));
    fr_graph_free(g);
    g = sym_graph();
    opt.n_dims = 0;
    FR_ASSERT_OK(fr_prepare_forward(g, &opt, NULL));
    const fr_value *y = &g->values[g->outputs[0]];
    CU_ASSERT_EQUAL(y->dims[0], 4);
    CU_ASSERT_EQUAL(y->dims[1], 7);
    fr_graph_free(g);
    /* wrong rank, unknown input */
    g = sym_graph();
    fr_input_shape bad = {"ids", 1, {4}};
    opt.input_shapes = &bad;
    CU_ASSERT_EQUAL(fr_prepare_forward(g, &opt, NULL), FR_ERR_SHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "rank 2"));
    fr_graph_free(g);
    g = sym_graph();
    fr_input_shape other = {"tokens", 2, {4, 7}};
    opt.input_shapes = &other;
    CU_ASSERT_EQUAL(fr_prepare_forward(g, &opt, NULL), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "'tokens'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "'ids'"));
    fr_graph_free(g);
}

static fr_status lazy_infer(fr_graph *g, int node_id)
{
    (void)g;
    (void)node_id;
    return FR_OK; /* forgets to set the output */
}

static void test_infer_checks(void)
{
    /* an op whose infer leaves the output without a shape is an internal error naming it */
    fr_graph *g = fr_gc_new_graph(17);
    int64_t d[1] = {3};
    int x = input(g, "x", FR_F32, 1, d, NULL);
    int y = node1(g, "Neg", "lazy_node", 1, &x, "y");
    FR_ASSERT_OK(fr_graph_mark_output(g, y));
    fr_value_set_shape(&g->values[y], FR_F32, 1, d); /* a stale declared shape must not help */
    fr_op_def lazy = *fr_op_find("", "Neg");
    lazy.infer = lazy_infer;
    g->nodes[0].op = &lazy;
    CU_ASSERT_EQUAL(fr_infer_graph(g, 1, 0, NULL), FR_ERR_INTERNAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "lazy_node"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "Neg"));
    fr_graph_free(g);

    /* the model declares an output shape inference disagrees with */
    g = fr_gc_new_graph(17);
    x = input(g, "x", FR_F32, 1, d, NULL);
    y = node1(g, "Neg", "neg", 1, &x, "y");
    FR_ASSERT_OK(fr_graph_mark_output(g, y));
    int64_t wrong[1] = {5};
    fr_value_set_shape(&g->values[y], FR_F32, 1, wrong);
    CU_ASSERT_EQUAL(fr_prepare_forward(g, NULL, NULL), FR_ERR_SHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "'y'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "[5]"));
    fr_graph_free(g);

    /* a graph output nothing produces */
    g = fr_gc_new_graph(17);
    x = input(g, "x", FR_F32, 1, d, NULL);
    y = val(g, "orphan");
    FR_ASSERT_OK(fr_graph_mark_output(g, y));
    CU_ASSERT_EQUAL(fr_prepare_forward(g, NULL, NULL), FR_ERR_GRAPH);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "orphan"));
    fr_graph_free(g);

    /* a node declaring more outputs than its op has: the model is at fault, and the message
     * names the node and how many the op gives */
    for (int n_out = 2; n_out <= 1000; n_out += 998) {
        g = fr_gc_new_graph(17);
        x = input(g, "x", FR_F32, 1, d, NULL);
        int *outs = calloc((size_t)n_out, sizeof *outs);
        CU_ASSERT_PTR_NOT_NULL_FATAL(outs);
        for (int o = 0; o < n_out; o++) {
            char nm[16];
            snprintf(nm, sizeof nm, "o%d", o);
            outs[o] = val(g, nm);
        }
        FR_ASSERT_OK(fr_graph_add_node(g, "Relu", "", "many_out", 1, &x, n_out, outs, NULL));
        FR_ASSERT_OK(fr_graph_mark_output(g, outs[n_out - 1]));
        CU_ASSERT_EQUAL(fr_prepare_forward(g, NULL, NULL), FR_ERR_GRAPH);
        char want[64];
        snprintf(want, sizeof want, "declares %d outputs, but Relu gives 1", n_out);
        CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "'many_out'"));
        CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), want));
        if (!strstr(fr_last_error(), want)) printf("\n  %s", fr_last_error());
        free(outs);
        fr_graph_free(g);
    }
}

/* ---- executor ---- */

/* A chain of 20 Neg nodes and a broadcast Add at the end: the pool needs only a few blocks,
 * and results match a double-precision reference on fresh inputs, run after run. */
static void test_exec_pool_and_reuse(void)
{
    fr_graph *g = fr_gc_new_graph(17);
    int64_t d[2] = {8, 16}, db[1] = {16};
    int x = input(g, "x", FR_F32, 2, d, NULL);
    int b = input(g, "b", FR_F32, 1, db, NULL);
    int cur = x;
    for (int i = 0; i < 20; i++) {
        char nm[32], vn[32];
        snprintf(nm, sizeof nm, "neg%d", i);
        snprintf(vn, sizeof vn, "v%d", i);
        cur = node1(g, "Neg", nm, 1, &cur, vn);
    }
    int in_a[2] = {cur, b};
    int y = node1(g, "Add", "add", 2, in_a, "y");
    /* a second output that is also read later: its block must never be reused */
    int z = node1(g, "Abs", "abs", 1, &y, "z");
    int in_m[2] = {z, y};
    int w = node1(g, "Mul", "mul", 2, in_m, "w");
    FR_ASSERT_OK(fr_graph_mark_output(g, y));
    FR_ASSERT_OK(fr_graph_mark_output(g, w));
    FR_ASSERT_OK(fr_prepare_forward(g, NULL, NULL));
    fr_exec *e;
    FR_ASSERT_OK(fr_exec_new(g, &e));
    CU_ASSERT(fr_exec_pool_blocks(e) <= 4);
    CU_ASSERT(fr_exec_pool_bytes(e) <= 4 * 8 * 16 * sizeof(float));
    fr_rng r = fr_test_rng("exec_pool_and_reuse");
    fr_tensor *xt, *bt;
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 2, d, "x", &xt));
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 1, db, "b", &bt));
    for (int run = 0; run < 3; run++) {
        fr_rng_fill(&r, xt->data, 128, -4, 4);
        fr_rng_fill(&r, bt->data, 16, -4, 4);
        FR_ASSERT_OK(fr_exec_set_input(e, "x", xt));
        FR_ASSERT_OK(fr_exec_set_input(e, "b", bt));
        FR_ASSERT_OK(fr_exec_run(e));
        const fr_tensor *yo = fr_exec_output(e, "y"), *wo = fr_exec_output_at(e, 1);
        CU_ASSERT_PTR_NOT_NULL_FATAL(yo);
        CU_ASSERT_PTR_NOT_NULL_FATAL(wo);
        CU_ASSERT_EQUAL(yo->nbytes, 128 * sizeof(float));
        double yref[128], wref[128];
        for (int i = 0; i < 128; i++) {
            yref[i] = (double)((float *)xt->data)[i] + ((float *)bt->data)[i % 16];
            wref[i] = fabs(yref[i]) * yref[i];
        }
        CU_ASSERT(fr_rel_l2_d(yo->data, yref, 128) < 1e-6);
        CU_ASSERT(fr_rel_l2_d(wo->data, wref, 128) < 1e-6);
    }
    /* output lookups */
    CU_ASSERT_PTR_NULL(fr_exec_output(e, "v3"));
    CU_ASSERT_EQUAL(fr_exec_n_outputs(e), 2);
    CU_ASSERT_EQUAL(fr_exec_n_inputs(e), 2);
    CU_ASSERT_STRING_EQUAL(fr_exec_input(e, 1)->name, "b");
    fr_tensor_free(xt);
    fr_tensor_free(bt);
    fr_exec_free(e);
    fr_graph_free(g);
}

static fr_status failing_cpu(const fr_kernel_ctx *ctx)
{
    (void)ctx;
    return fr_error(FR_ERR_RANGE, "index 9 is out of range");
}

static void test_exec_inputs_and_errors(void)
{
    fr_graph *g = fr_gc_new_graph(17);
    int64_t d[2] = {2, 3};
    int x = input(g, "x", FR_F32, 2, d, NULL);
    int y = node1(g, "Neg", "neg_node", 1, &x, "y");
    /* an unused second output: Dropout's mask */
    int m = val(g, "mask");
    int outs[2] = {val(g, "dy"), m};
    FR_ASSERT_OK(fr_graph_add_node(g, "Dropout", "", "drop", 1, &y, 2, outs, NULL));
    FR_ASSERT_OK(fr_graph_mark_output(g, outs[0]));
    FR_ASSERT_OK(fr_prepare_forward(g, NULL, NULL));
    fr_exec *e;
    FR_ASSERT_OK(fr_exec_new(g, &e));
    CU_ASSERT_PTR_NULL(fr_exec_output(e, "dy")); /* nothing run yet */
    CU_ASSERT_EQUAL(fr_exec_run(e), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "'x'"));
    fr_tensor *t;
    int64_t wrong[2] = {3, 2};
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 2, wrong, "x", &t));
    CU_ASSERT_EQUAL(fr_exec_set_input(e, "x", t), FR_ERR_SHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "'x'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "float32 [2, 3]"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "float32 [3, 2]"));
    fr_tensor_free(t);
    FR_ASSERT_OK(fr_tensor_new(FR_F64, 2, d, "x", &t));
    CU_ASSERT_EQUAL(fr_exec_set_input(e, "x", t), FR_ERR_SHAPE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "float64"));
    fr_tensor_free(t);
    CU_ASSERT_EQUAL(fr_exec_set_input(e, "nope", NULL), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "'nope'"));
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 2, d, "x", &t));
    ((float *)t->data)[4] = 2.5f;
    FR_ASSERT_OK(fr_exec_set_input(e, "x", t));
    FR_ASSERT_OK(fr_exec_run(e));
    CU_ASSERT_EQUAL(((float *)fr_exec_output(e, "dy")->data)[4], -2.5f);
    /* a kernel error keeps its status and gets the node named */
    fr_op_def bad = *g->nodes[0].op;
    bad.cpu = failing_cpu;
    const fr_op_def *saved = g->nodes[0].op;
    g->nodes[0].op = &bad;
    CU_ASSERT_EQUAL(fr_exec_run(e), FR_ERR_RANGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "neg_node"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "index 9"));
    CU_ASSERT_PTR_NULL(fr_exec_output(e, "dy")); /* a failed run exposes no outputs */
    g->nodes[0].op = saved;
    fr_tensor_free(t);
    fr_exec_free(e);
    fr_graph_free(g);

    /* an unprepared graph is refused */
    g = sym_graph();
    FR_ASSERT_OK(fr_graph_toposort(g));
    CU_ASSERT_EQUAL(fr_exec_new(g, &e), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "fr_prepare_forward"));
    fr_graph_free(g);
}

static CU_TestInfo pass_tests[] = {
    {"fold_shape_chain", test_fold_shape_chain},
    {"fold_rules", test_fold_rules},
    {"dce", test_dce},
    {"identity_removal", test_identity_removal},
    {"symbolic_dims", test_symbolic_dims},
    {"infer_checks", test_infer_checks},
    CU_TEST_INFO_NULL,
};

static CU_TestInfo exec_tests[] = {
    {"pool_and_reuse", test_exec_pool_and_reuse},
    {"inputs_and_errors", test_exec_inputs_and_errors},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"passes", NULL, NULL, NULL, NULL, pass_tests},
    {"executor", NULL, NULL, NULL, NULL, exec_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
