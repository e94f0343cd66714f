/* Dropout in training graphs (see dropout.h). */
#include <stdio.h>
#include <string.h>

#include "ops/dropout_mask.h"
#include "ops/op.h"
#include "passes/dropout.h"
#include "passes/pattern.h"

fr_status fr_dropout_key(fr_graph *g, int *vid)
{
    *vid = fr_graph_find_value(g, FR_DROPOUT_KEY_INPUT);
    if (*vid >= 0) {
        const fr_value *v = &g->values[*vid];
        if (!(v->flags & FR_VAL_INPUT) || v->dtype != FR_I64 || v->rank != 1 || v->dims[0] != FR_DROPOUT_KEY_LEN)
            return fr_error(FR_ERR_GRAPH, "the model has a value named '%s' that is not fp8run's dropout key "
                            "(an int64 [%d] graph input)", FR_DROPOUT_KEY_INPUT, FR_DROPOUT_KEY_LEN);
        return FR_OK;
    }
    FR_TRY(fr_graph_add_value(g, FR_DROPOUT_KEY_INPUT, vid));
    int64_t dims[1] = {FR_DROPOUT_KEY_LEN};
    fr_value_set_shape(&g->values[*vid], FR_I64, 1, dims);
    return fr_graph_mark_input(g, *vid);
}

/* FNV-1a of the node's name: its stream, stable across builds and copies. */
static uint64_t name_stream(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static fr_status add_keyed(fr_graph *g, int x, double p, const char *name, int y)
{
    int key, nid;
    FR_TRY(fr_dropout_key(g, &key));
    FR_TRY(fr_graph_import_opset(g, FR_DOMAIN_FP8RUN, 1));
    int in[2] = {x, key};
    FR_TRY(fr_graph_add_node(g, "KeyedDropout", FR_DOMAIN_FP8RUN, name, 2, in, 1, &y, &nid));
    FR_TRY(fr_node_set_attr_float(&g->nodes[nid], "ratio", (float)p));
    return fr_node_set_attr_int(&g->nodes[nid], "seed", (int64_t)name_stream(g->nodes[nid].name));
}

fr_status fr_dropout_add(fr_graph *g, int x, double p, const char *name, const char *out_name, int *y)
{
    if (!(p > 0 && p < 1)) return fr_error(FR_ERR_INVALID_ARG, "dropout '%s': ratio %g is not in (0, 1)", name, p);
    FR_TRY(fr_graph_add_unique_value(g, out_name, y));
    g->values[*y].dtype = g->values[x].dtype;
    return add_keyed(g, x, p, name, *y);
}

/* v's one-element value when it is an initializer or a live Constant node's output: 1 and *out. */
static int known_scalar(const fr_graph *g, int v, double *out)
{
    if (v < 0) return 0;
    const fr_tensor *t = (g->values[v].flags & FR_VAL_PARAM) ? NULL : g->values[v].constant;
    const fr_node *c = t ? NULL : fr_live_producer(g, v);
    if (c && fr_is_onnx_op(c, "Constant")) {
        const fr_attr *a = fr_node_attr(c, "value");
        if (a && a->type == FR_ATTR_TENSOR) t = a->t;
        a = t ? NULL : fr_node_attr(c, "value_float");
        if (a && a->type == FR_ATTR_FLOAT) return (*out = a->f), 1;
        a = t ? NULL : fr_node_attr(c, "value_int");
        if (a && a->type == FR_ATTR_INT) return (*out = (double)a->i), 1;
    }
    if (!t || fr_tensor_numel(t) != 1) return 0;
    *out = fr_tensor_get_f64(t, 0);
    return 1;
}

/* The ratio of a training-mode ONNX Dropout, 1; 0 when it is not one (or its ratio is unknown). */
static int training_ratio(const fr_graph *g, const fr_node *n, double *p)
{
    int64_t opset = fr_graph_opset(g, n->domain);
    if (opset >= 1 && opset < 7) {
        int64_t is_test;
        float r;
        if (fr_node_attr_int(n, "is_test", 0, &is_test) != FR_OK || is_test ||
            fr_node_attr_float(n, "ratio", 0.5f, &r) != FR_OK)
            return 0;
        *p = r;
        return 1;
    }
    if (opset >= 7 && opset < 12) return 0;
    double tm;
    if (n->n_inputs < 3 || !known_scalar(g, n->inputs[2], &tm) || tm == 0) return 0;
    *p = 0.5;
    return n->n_inputs < 2 || n->inputs[1] < 0 || known_scalar(g, n->inputs[1], p);
}

static int is_read(const fr_graph *g, int v)
{
    if (v < 0) return 0;
    if (g->values[v].flags & FR_VAL_OUTPUT) return 1;
    for (int i = 0; i < g->n_nodes; i++)
        for (int k = 0; !g->nodes[i].dead && k < g->nodes[i].n_inputs; k++)
            if (g->nodes[i].inputs[k] == v) return 1;
    return 0;
}

fr_status fr_dropout_train(fr_graph *g, int *count)
{
    *count = 0;
    const int n0 = g->n_nodes;
    for (int i = 0; i < n0; i++) {
        const fr_node *n = &g->nodes[i];
        double p;
        if (!fr_is_onnx_op(n, "Dropout") || n->n_inputs < 1 || n->n_outputs < 1 || !training_ratio(g, n, &p) ||
            !(p > 0 && p < 1))
            continue;
        if (n->n_outputs > 1 && is_read(g, n->outputs[1]))
            return fr_error(FR_ERR_UNSUPPORTED, "node '%s' (Dropout): its mask output '%s' is read; training with "
                            "dropout computes the data output only", n->name, g->values[n->outputs[1]].name);
        char name[512];
        snprintf(name, sizeof name, "%s", n->name);
        int x = n->inputs[0], y = n->outputs[0];
        g->nodes[i].dead = 1; /* its output gets the new node as producer */
        FR_TRY(add_keyed(g, x, p, name, y));
        (*count)++;
    }
    if (*count == 0) return FR_OK;
    FR_TRY(fr_graph_compact(g));
    return fr_graph_toposort(g);
}

fr_status fr_dropout_strip(fr_graph *g, int *count)
{
    *count = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        fr_node *n = &g->nodes[i];
        if (n->dead || strcmp(n->op_type, "KeyedDropout") != 0 || strcmp(n->domain, FR_DOMAIN_FP8RUN) != 0)
            continue;
        int x = n->inputs[0], y = n->outputs[0];
        (*count)++;
        if (g->values[y].flags & FR_VAL_OUTPUT) { /* keeps its name: y = x * 1 */
            FR_TRY(fr_node_set_attr_float(n, "ratio", 0.0f));
            continue;
        }
        n->dead = 1;
        for (int j = 0; j < g->n_nodes; j++)
            for (int k = 0; !g->nodes[j].dead && k < g->nodes[j].n_inputs; k++)
                if (g->nodes[j].inputs[k] == y) g->nodes[j].inputs[k] = x;
    }
    if (*count == 0) return FR_OK;
    FR_TRY(fr_graph_compact(g));
    /* the key, read no more, stops being an input (the caller feeds none) */
    int key = fr_graph_find_value(g, FR_DROPOUT_KEY_INPUT), w = 0;
    if (key < 0 || is_read(g, key)) return FR_OK;
    for (int i = 0; i < g->n_inputs; i++)
        if (g->inputs[i] != key) g->inputs[w++] = g->inputs[i];
    g->n_inputs = w;
    g->values[key].flags &= ~FR_VAL_INPUT;
    return FR_OK;
}
