/* Graph IR construction, attributes, lookups and topological ordering. */
#include "graph/ir.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/name_map.h"

fr_status fr_graph_new(fr_graph **out)
{
    fr_graph *g = fr_calloc(1, sizeof *g, "graph");
    if (!g) return FR_ERR_OOM;
    fr_status st = fr_name_map_new(&g->names);
    if (st != FR_OK) {
        free(g);
        return st;
    }
    g->ir_version = 8;
    *out = g;
    return FR_OK;
}

void fr_attr_clear(fr_attr *a)
{
    free(a->name);
    free(a->s);
    fr_tensor_free(a->t);
    free(a->floats);
    free(a->ints);
    if (a->strings)
        for (int i = 0; i < a->n; i++) free(a->strings[i]);
    free(a->strings);
    memset(a, 0, sizeof *a);
}

static fr_status copy_attr(const fr_attr *s, fr_attr *d)
{
    fr_status st = FR_OK;
    memset(d, 0, sizeof *d);
    d->name = s->name ? fr_strdup(s->name, "attribute copy") : NULL;
    if (s->name && !d->name) return FR_ERR_OOM;
    d->type = s->type;
    d->f = s->f;
    d->i = s->i;
    d->n = s->n;
    if (s->s) {
        d->s = fr_malloc(s->s_len + 1, "attribute copy");
        if (!d->s) return FR_ERR_OOM;
        memcpy(d->s, s->s, s->s_len);
        d->s[s->s_len] = '\0';
        d->s_len = s->s_len;
    }
    if (st == FR_OK && s->t) st = fr_tensor_clone(s->t, "attribute copy", &d->t);
    if (st == FR_OK && s->floats && s->n > 0) {
        d->floats = fr_malloc((size_t)s->n * sizeof(float), "attribute copy");
        if (!d->floats) return FR_ERR_OOM;
        memcpy(d->floats, s->floats, (size_t)s->n * sizeof(float));
    }
    if (st == FR_OK && s->ints && s->n > 0) {
        d->ints = fr_malloc((size_t)s->n * sizeof(int64_t), "attribute copy");
        if (!d->ints) return FR_ERR_OOM;
        memcpy(d->ints, s->ints, (size_t)s->n * sizeof(int64_t));
    }
    if (st == FR_OK && s->strings && s->n > 0) {
        d->strings = fr_calloc((size_t)s->n, sizeof(char *), "attribute copy");
        if (!d->strings) return FR_ERR_OOM;
        for (int i = 0; i < s->n; i++)
            if (s->strings[i] && !(d->strings[i] = fr_strdup(s->strings[i], "attribute copy"))) return FR_ERR_OOM;
    }
    return st;
}

fr_status fr_node_copy_attrs(fr_node *d, const fr_node *s)
{
    if (s->n_attrs <= 0) return FR_OK;
    d->attrs = fr_calloc((size_t)s->n_attrs, sizeof(fr_attr), "attribute copy");
    if (!d->attrs) return FR_ERR_OOM;
    for (int a = 0; a < s->n_attrs; a++) {
        d->n_attrs = a + 1; /* so a failure frees what was copied */
        FR_TRY(copy_attr(&s->attrs[a], &d->attrs[a]));
    }
    return FR_OK;
}

static void value_clear(fr_value *v)
{
    free(v->name);
    for (int i = 0; i < FR_MAX_RANK; i++) free(v->dim_params[i]);
    fr_tensor_free(v->constant);
    free(v->doc_string);
    free(v->external_location);
    free(v->torch_kind);
    free(v->folded_from);
    free(v->param_note);
}

/* What a node is (name, op, inputs, outputs, attributes), as opposed to where it came from. */
static void node_clear_identity(fr_node *n)
{
    free(n->name);
    free(n->op_type);
    free(n->domain);
    free(n->inputs);
    free(n->outputs);
    for (int i = 0; i < n->n_attrs; i++) fr_attr_clear(&n->attrs[i]);
    free(n->attrs);
}

static void node_clear(fr_node *n)
{
    node_clear_identity(n);
    free(n->doc_string);
    free(n->torch_fx);
    free(n->torch_scopes);
    free(n->torch_src);
}

void fr_graph_free(fr_graph *g)
{
    if (!g) return;
    for (int i = 0; i < g->n_values; i++) value_clear(&g->values[i]);
    for (int i = 0; i < g->n_nodes; i++) node_clear(&g->nodes[i]);
    for (int i = 0; i < g->n_opsets; i++) free(g->opsets[i].domain);
    for (int i = 0; i < g->n_metadata; i++) {
        free(g->metadata[i].key);
        free(g->metadata[i].value);
    }
    free(g->values);
    free(g->nodes);
    free(g->inputs);
    free(g->outputs);
    free(g->initializers);
    free(g->opsets);
    free(g->metadata);
    free(g->name);
    free(g->producer_name);
    free(g->producer_version);
    free(g->domain);
    free(g->doc_string);
    free(g->graph_doc_string);
    free(g->model_dir);
    free(g->source_path);
    free(g->torch_signature);
    fr_name_map_free(g->names);
    free(g);
}

static fr_status rebuild_name_map(fr_graph *g)
{
    fr_name_map_clear(g->names);
    for (int i = 0; i < g->n_values; i++) FR_TRY(fr_name_map_put(g->names, g->values[i].name, i));
    return FR_OK;
}

fr_status fr_graph_add_value(fr_graph *g, const char *name, int *id)
{
    if (!name || !name[0]) return fr_error(FR_ERR_GRAPH, "a value with an empty name was added");
    if (fr_name_map_get(g->names, name) >= 0)
        return fr_error(FR_ERR_GRAPH, "value '%s' is defined twice", name);
    if (g->n_values == g->cap_values) {
        int ncap = g->cap_values ? g->cap_values * 2 : 64;
        fr_value *nv = fr_realloc_array(g->values, (size_t)ncap, sizeof *nv, "graph values");
        if (!nv) return FR_ERR_OOM;
        g->values = nv;
        g->cap_values = ncap;
        /* the map holds pointers to names, which did not move (they are separate strings) */
    }
    fr_value *v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    v->name = fr_strdup(name, "value name");
    if (!v->name) return FR_ERR_OOM;
    v->rank = -1;
    v->producer = -1;
    for (int i = 0; i < FR_MAX_RANK; i++) v->dims[i] = -1;
    FR_TRY(fr_name_map_put(g->names, v->name, g->n_values));
    *id = g->n_values++;
    return FR_OK;
}

int fr_graph_find_value(const fr_graph *g, const char *name)
{
    return name ? fr_name_map_get(g->names, name) : -1;
}

fr_status fr_graph_add_unique_value(fr_graph *g, const char *base, int *id)
{
    if (fr_graph_find_value(g, base) < 0) return fr_graph_add_value(g, base, id);
    size_t len = strlen(base) + 24;
    char *buf = fr_malloc(len, "value name");
    if (!buf) return FR_ERR_OOM;
    for (long k = 1;; k++) {
        snprintf(buf, len, "%s__%ld", base, k);
        if (fr_graph_find_value(g, buf) < 0) break;
    }
    fr_status st = fr_graph_add_value(g, buf, id);
    free(buf);
    return st;
}

void fr_value_set_shape(fr_value *v, fr_dtype dt, int rank, const int64_t *dims)
{
    v->dtype = dt;
    v->rank = rank;
    for (int i = 0; i < FR_MAX_RANK; i++) v->dims[i] = i < rank ? dims[i] : -1;
}

/* Node id's name (autonamed "<op_type>_<id>" when empty), op, domain ("ai.onnx" normalized to
 * "") and inputs/outputs in new memory, and its outputs' producer. Nothing changes on failure. */
static fr_status node_set_identity(fr_graph *g, int id, const char *op_type, const char *domain, const char *name,
                                   int n_in, const int *inputs, int n_out, const int *outputs)
{
    char autoname[64];
    if (!name || !name[0]) {
        snprintf(autoname, sizeof autoname, "%s_%d", op_type, id);
        name = autoname;
    }
    fr_node fresh;
    memset(&fresh, 0, sizeof fresh);
    fresh.name = fr_strdup(name, "node name");
    fresh.op_type = fr_strdup(op_type, "node op_type");
    fresh.domain = fr_strdup(domain && strcmp(domain, "ai.onnx") != 0 ? domain : "", "node domain");
    fresh.inputs = fr_calloc((size_t)(n_in > 0 ? n_in : 1), sizeof(int), "node inputs");
    fresh.outputs = fr_calloc((size_t)(n_out > 0 ? n_out : 1), sizeof(int), "node outputs");
    if (!fresh.name || !fresh.op_type || !fresh.domain || !fresh.inputs || !fresh.outputs) {
        node_clear_identity(&fresh);
        return FR_ERR_OOM;
    }
    fr_node *n = &g->nodes[id];
    n->name = fresh.name;
    n->op_type = fresh.op_type;
    n->domain = fresh.domain;
    n->inputs = fresh.inputs;
    n->outputs = fresh.outputs;
    n->n_inputs = n_in;
    n->n_outputs = n_out;
    if (n_in) memcpy(n->inputs, inputs, (size_t)n_in * sizeof(int));
    if (n_out) memcpy(n->outputs, outputs, (size_t)n_out * sizeof(int));
    for (int i = 0; i < n_out; i++)
        if (outputs[i] >= 0) g->values[outputs[i]].producer = id;
    return FR_OK;
}

fr_status fr_graph_add_node(fr_graph *g, const char *op_type, const char *domain,
                            const char *name, int n_in, const int *inputs, int n_out,
                            const int *outputs, int *node_id)
{
    if (g->n_nodes == g->cap_nodes) {
        int ncap = g->cap_nodes ? g->cap_nodes * 2 : 64;
        fr_node *nn = fr_realloc_array(g->nodes, (size_t)ncap, sizeof *nn, "graph nodes");
        if (!nn) return FR_ERR_OOM;
        g->nodes = nn;
        g->cap_nodes = ncap;
    }
    int id = g->n_nodes;
    memset(&g->nodes[id], 0, sizeof g->nodes[id]);
    FR_TRY(node_set_identity(g, id, op_type, domain, name, n_in, inputs, n_out, outputs));
    g->n_nodes++;
    if (node_id) *node_id = id;
    return FR_OK;
}

fr_status fr_node_reset(fr_graph *g, int nid, const char *op_type, const char *domain, const char *name, int n_in,
                        const int *inputs, int n_out, const int *outputs)
{
    fr_node old = g->nodes[nid];
    FR_TRY(node_set_identity(g, nid, op_type, domain, name, n_in, inputs, n_out, outputs));
    node_clear_identity(&old);
    fr_node *n = &g->nodes[nid];
    n->attrs = NULL;
    n->n_attrs = 0;
    n->op = NULL;
    return FR_OK;
}

/* ---- attributes ---- */

static fr_attr *attr_slot(fr_node *n, const char *name)
{
    for (int i = 0; i < n->n_attrs; i++) {
        if (strcmp(n->attrs[i].name, name) == 0) {
            fr_attr_clear(&n->attrs[i]);
            n->attrs[i].name = fr_strdup(name, "attribute name");
            return n->attrs[i].name ? &n->attrs[i] : NULL;
        }
    }
    fr_attr *na = fr_realloc_array(n->attrs, (size_t)n->n_attrs + 1, sizeof *na, "attributes");
    if (!na) return NULL;
    n->attrs = na;
    fr_attr *a = &n->attrs[n->n_attrs];
    memset(a, 0, sizeof *a);
    a->name = fr_strdup(name, "attribute name");
    if (!a->name) return NULL;
    n->n_attrs++;
    return a;
}

fr_status fr_node_set_attr_int(fr_node *n, const char *name, int64_t v)
{
    fr_attr *a = attr_slot(n, name);
    if (!a) return FR_ERR_OOM;
    a->type = FR_ATTR_INT;
    a->i = v;
    return FR_OK;
}

fr_status fr_node_set_attr_float(fr_node *n, const char *name, float v)
{
    fr_attr *a = attr_slot(n, name);
    if (!a) return FR_ERR_OOM;
    a->type = FR_ATTR_FLOAT;
    a->f = v;
    return FR_OK;
}

fr_status fr_node_set_attr_string(fr_node *n, const char *name, const char *v)
{
    fr_attr *a = attr_slot(n, name);
    if (!a) return FR_ERR_OOM;
    a->type = FR_ATTR_STRING;
    a->s = fr_strdup(v, "attribute string");
    if (!a->s) return FR_ERR_OOM;
    a->s_len = strlen(v);
    return FR_OK;
}

fr_status fr_node_set_attr_ints(fr_node *n, const char *name, int count, const int64_t *v)
{
    fr_attr *a = attr_slot(n, name);
    if (!a) return FR_ERR_OOM;
    a->type = FR_ATTR_INTS;
    a->ints = fr_calloc((size_t)(count > 0 ? count : 1), sizeof(int64_t), "attribute ints");
    if (!a->ints) return FR_ERR_OOM;
    if (count) memcpy(a->ints, v, (size_t)count * sizeof(int64_t));
    a->n = count;
    return FR_OK;
}

fr_status fr_node_set_attr_floats(fr_node *n, const char *name, int count, const float *v)
{
    fr_attr *a = attr_slot(n, name);
    if (!a) return FR_ERR_OOM;
    a->type = FR_ATTR_FLOATS;
    a->floats = fr_calloc((size_t)(count > 0 ? count : 1), sizeof(float), "attribute floats");
    if (!a->floats) return FR_ERR_OOM;
    if (count) memcpy(a->floats, v, (size_t)count * sizeof(float));
    a->n = count;
    return FR_OK;
}

fr_status fr_node_set_attr_tensor(fr_node *n, const char *name, const fr_tensor *t)
{
    fr_attr *a = attr_slot(n, name);
    if (!a) return FR_ERR_OOM;
    a->type = FR_ATTR_TENSOR;
    return fr_tensor_clone(t, name, &a->t);
}

const fr_attr *fr_node_attr(const fr_node *n, const char *name)
{
    for (int i = 0; i < n->n_attrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
    return NULL;
}

static fr_status attr_type_error(const fr_node *n, const fr_attr *a, const char *want)
{
    return fr_error(FR_ERR_PARSE, "node '%s' (%s): attribute '%s' has type %d, expected %s",
                    n->name, n->op_type, a->name, (int)a->type, want);
}

fr_status fr_node_attr_int(const fr_node *n, const char *name, int64_t dflt, int64_t *out)
{
    const fr_attr *a = fr_node_attr(n, name);
    if (!a) {
        *out = dflt;
        return FR_OK;
    }
    if (a->type != FR_ATTR_INT) return attr_type_error(n, a, "INT");
    *out = a->i;
    return FR_OK;
}

fr_status fr_node_attr_float(const fr_node *n, const char *name, float dflt, float *out)
{
    const fr_attr *a = fr_node_attr(n, name);
    if (!a) {
        *out = dflt;
        return FR_OK;
    }
    if (a->type == FR_ATTR_INT) { /* some exporters write whole numbers as INT */
        *out = (float)a->i;
        return FR_OK;
    }
    if (a->type != FR_ATTR_FLOAT) return attr_type_error(n, a, "FLOAT");
    *out = a->f;
    return FR_OK;
}

fr_status fr_node_attr_string(const fr_node *n, const char *name, const char *dflt,
                              const char **out)
{
    const fr_attr *a = fr_node_attr(n, name);
    if (!a) {
        *out = dflt;
        return FR_OK;
    }
    if (a->type != FR_ATTR_STRING) return attr_type_error(n, a, "STRING");
    *out = a->s ? a->s : "";
    return FR_OK;
}

fr_status fr_node_attr_ints(const fr_node *n, const char *name, int *count,
                            const int64_t **vals)
{
    const fr_attr *a = fr_node_attr(n, name);
    if (!a) {
        *count = -1;
        *vals = NULL;
        return FR_OK;
    }
    if (a->type != FR_ATTR_INTS) return attr_type_error(n, a, "INTS");
    *count = a->n;
    *vals = a->ints;
    return FR_OK;
}

/* ---- graph-level ---- */

int64_t fr_graph_opset(const fr_graph *g, const char *domain)
{
    if (!domain || strcmp(domain, "ai.onnx") == 0) domain = "";
    for (int i = 0; i < g->n_opsets; i++)
        if (strcmp(g->opsets[i].domain, domain) == 0) return g->opsets[i].version;
    return 0;
}

static fr_status append_id(int **arr, int *n, int vid, const char *what)
{
    int *na = fr_realloc_array(*arr, (size_t)*n + 1, sizeof(int), what);
    if (!na) return FR_ERR_OOM;
    na[(*n)++] = vid;
    *arr = na;
    return FR_OK;
}

fr_status fr_graph_mark_input(fr_graph *g, int vid)
{
    g->values[vid].flags |= FR_VAL_INPUT;
    return append_id(&g->inputs, &g->n_inputs, vid, "graph inputs");
}

fr_status fr_graph_mark_output(fr_graph *g, int vid)
{
    g->values[vid].flags |= FR_VAL_OUTPUT;
    return append_id(&g->outputs, &g->n_outputs, vid, "graph outputs");
}

fr_status fr_graph_import_opset(fr_graph *g, const char *domain, int64_t version)
{
    for (int i = 0; i < g->n_opsets; i++)
        if (strcmp(g->opsets[i].domain, domain) == 0) return FR_OK;
    fr_opset *no = fr_realloc_array(g->opsets, (size_t)g->n_opsets + 1, sizeof *no, "opset imports");
    if (!no) return FR_ERR_OOM;
    g->opsets = no;
    no[g->n_opsets].domain = fr_strdup(domain, "opset imports");
    if (!no[g->n_opsets].domain) return FR_ERR_OOM;
    no[g->n_opsets].version = version;
    g->n_opsets++;
    return FR_OK;
}

fr_status fr_graph_set_initializer(fr_graph *g, int vid, fr_tensor *t)
{
    fr_value *v = &g->values[vid];
    int was_init = (v->flags & FR_VAL_INITIALIZER) != 0;
    fr_tensor_free(v->constant);
    v->constant = t;
    fr_value_set_shape(v, t->dtype, t->rank, t->dims);
    v->flags |= FR_VAL_INITIALIZER;
    if (fr_dtype_is_float(t->dtype)) v->flags |= FR_VAL_PARAM;
    if (!was_init) return append_id(&g->initializers, &g->n_initializers, vid, "initializers");
    return FR_OK;
}

fr_status fr_graph_rebuild_producers(fr_graph *g)
{
    for (int i = 0; i < g->n_values; i++) g->values[i].producer = -1;
    for (int n = 0; n < g->n_nodes; n++) {
        const fr_node *nd = &g->nodes[n];
        for (int o = 0; o < nd->n_outputs; o++) {
            int vid = nd->outputs[o];
            if (vid < 0) continue;
            fr_value *v = &g->values[vid];
            if (v->producer >= 0)
                return fr_error(FR_ERR_GRAPH, "value '%s' is produced by two nodes: '%s' and '%s'",
                                v->name, g->nodes[v->producer].name, nd->name);
            if (v->flags & (FR_VAL_INITIALIZER | FR_VAL_INPUT))
                return fr_error(FR_ERR_GRAPH,
                                "node '%s' (%s) writes '%s', which is a graph input or initializer",
                                nd->name, nd->op_type, v->name);
            v->producer = n;
        }
    }
    return FR_OK;
}

fr_status fr_graph_toposort(fr_graph *g)
{
    FR_TRY(fr_graph_rebuild_producers(g));
    int nn = g->n_nodes;
    if (nn == 0) return FR_OK;
    /* Kahn's algorithm over node -> node edges, stable (keeps model order where possible) */
    int *indeg = fr_calloc((size_t)nn, sizeof(int), "toposort");
    int *order = fr_calloc((size_t)nn, sizeof(int), "toposort");
    int *cons_count = fr_calloc((size_t)nn + 1, sizeof(int), "toposort");
    fr_node *sorted = NULL;
    int *cons = NULL;
    fr_status st = FR_OK;
    if (!indeg || !order || !cons_count) {
        st = FR_ERR_OOM;
        goto done;
    }
    size_t edges = 0;
    for (int n = 0; n < nn; n++) {
        const fr_node *nd = &g->nodes[n];
        for (int i = 0; i < nd->n_inputs; i++) {
            int vid = nd->inputs[i];
            if (vid < 0) continue;
            const fr_value *v = &g->values[vid];
            if (v->producer < 0) {
                if (!(v->flags & (FR_VAL_INPUT | FR_VAL_INITIALIZER)) && !v->constant) {
                    st = fr_error(FR_ERR_GRAPH,
                                  "node '%s' (%s) reads '%s', which no node produces and which is "
                                  "neither a graph input nor an initializer",
                                  nd->name, nd->op_type, v->name);
                    goto done;
                }
                continue;
            }
            indeg[n]++;
            cons_count[v->producer]++;
            edges++;
        }
    }
    /* CSR of consumers */
    cons = fr_calloc(edges ? edges : 1, sizeof(int), "toposort");
    if (!cons) {
        st = FR_ERR_OOM;
        goto done;
    }
    int *start = fr_calloc((size_t)nn + 1, sizeof(int), "toposort");
    if (!start) {
        st = FR_ERR_OOM;
        goto done;
    }
    for (int n = 0; n < nn; n++) start[n + 1] = start[n] + cons_count[n];
    memset(cons_count, 0, (size_t)nn * sizeof(int));
    for (int n = 0; n < nn; n++) {
        const fr_node *nd = &g->nodes[n];
        for (int i = 0; i < nd->n_inputs; i++) {
            int vid = nd->inputs[i];
            if (vid < 0 || g->values[vid].producer < 0) continue;
            int p = g->values[vid].producer;
            cons[start[p] + cons_count[p]++] = n;
        }
    }
    /* queue ordered by original index: a simple scan keeps model order stable */
    int head = 0, tail = 0;
    for (int n = 0; n < nn; n++)
        if (indeg[n] == 0) order[tail++] = n;
    while (head < tail) {
        int n = order[head++];
        for (int k = start[n]; k < start[n + 1]; k++)
            if (--indeg[cons[k]] == 0) order[tail++] = cons[k];
    }
    if (tail < nn) {
        int bad = -1;
        for (int n = 0; n < nn; n++)
            if (indeg[n] > 0) {
                bad = n;
                break;
            }
        st = fr_error(FR_ERR_GRAPH,
                      "the graph has a cycle: node '%s' (%s) depends on its own output "
                      "(%d nodes are on or behind the cycle)",
                      g->nodes[bad].name, g->nodes[bad].op_type, nn - tail);
        free(start);
        goto done;
    }
    free(start);
    sorted = fr_malloc((size_t)nn * sizeof *sorted, "toposort");
    if (!sorted) {
        st = FR_ERR_OOM;
        goto done;
    }
    for (int k = 0; k < nn; k++) sorted[k] = g->nodes[order[k]];
    memcpy(g->nodes, sorted, (size_t)nn * sizeof *sorted);
    st = fr_graph_rebuild_producers(g);
done:
    free(indeg);
    free(order);
    free(cons_count);
    free(cons);
    free(sorted);
    return st;
}

fr_status fr_graph_compact(fr_graph *g)
{
    int w = 0;
    for (int n = 0; n < g->n_nodes; n++) {
        if (g->nodes[n].dead) {
            node_clear(&g->nodes[n]);
            continue;
        }
        if (w != n) g->nodes[w] = g->nodes[n];
        w++;
    }
    g->n_nodes = w;
    FR_TRY(rebuild_name_map(g));
    return fr_graph_rebuild_producers(g);
}

fr_status fr_graph_fix_dim(fr_graph *g, const char *name, int64_t value)
{
    int hits = 0;
    if (value < 0) return fr_error(FR_ERR_INVALID_ARG, "--dim %s=%lld: a dimension must be >= 0", name, (long long)value);
    for (int i = 0; i < g->n_values; i++) {
        fr_value *v = &g->values[i];
        for (int d = 0; d < FR_MAX_RANK; d++) {
            if (v->dim_params[d] && strcmp(v->dim_params[d], name) == 0) {
                v->dims[d] = value;
                hits++;
            }
        }
    }
    if (!hits)
        return fr_error(FR_ERR_INVALID_ARG, "--dim %s=%lld: the model has no symbolic dimension named '%s'",
                        name, (long long)value, name);
    return FR_OK;
}

int64_t fr_graph_param_count(const fr_graph *g)
{
    int64_t total = 0;
    for (int i = 0; i < g->n_values; i++) {
        const fr_value *v = &g->values[i];
        if ((v->flags & FR_VAL_PARAM) && v->constant) total += fr_tensor_numel(v->constant);
    }
    return total;
}
