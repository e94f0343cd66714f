/* Deep copy of a graph: the trainer keeps a pristine copy of the model for export, prepares a
 * separate training copy, and runs evaluation on a copy that borrows the training copy's
 * constants (so parameter updates are seen without copying weights). Value ids, node order and
 * every list keep their positions, so ids taken in one copy are valid in the other. */
#include <stdlib.h>
#include <string.h>

#include "graph/ir.h"

static char *dup_or_null(const char *s, fr_status *st)
{
    if (!s || *st != FR_OK) return NULL;
    char *d = fr_strdup(s, "graph copy");
    if (!d) *st = FR_ERR_OOM;
    return d;
}

static fr_status copy_tensor(const fr_tensor *src, int share, fr_tensor **out)
{
    *out = NULL;
    if (!src) return FR_OK;
    if (!share) return fr_tensor_clone(src, "graph copy", out);
    fr_tensor *t = fr_calloc(1, sizeof *t, "graph copy");
    if (!t) return FR_ERR_OOM;
    *t = *src;
    t->owns_data = 0; /* borrowed: the source graph keeps the storage */
    *out = t;
    return FR_OK;
}

static fr_status copy_ids(const int *src, int n, int **dst)
{
    *dst = NULL;
    if (n <= 0) return FR_OK;
    *dst = fr_malloc((size_t)n * sizeof(int), "graph copy");
    if (!*dst) return FR_ERR_OOM;
    memcpy(*dst, src, (size_t)n * sizeof(int));
    return FR_OK;
}

static fr_status copy_values(const fr_graph *g, int share, fr_graph *c)
{
    for (int i = 0; i < g->n_values; i++) {
        const fr_value *s = &g->values[i];
        int id;
        FR_TRY(fr_graph_add_value(c, s->name, &id));
        if (id != i) return fr_error(FR_ERR_INTERNAL, "graph copy: value '%s' got id %d, not %d", s->name, id, i);
        fr_value *d = &c->values[id];
        fr_status st = FR_OK;
        d->dtype = s->dtype;
        d->rank = s->rank;
        memcpy(d->dims, s->dims, sizeof d->dims);
        for (int k = 0; k < FR_MAX_RANK; k++) d->dim_params[k] = dup_or_null(s->dim_params[k], &st);
        d->flags = s->flags;
        d->producer = s->producer;
        d->doc_string = dup_or_null(s->doc_string, &st);
        d->external_location = dup_or_null(s->external_location, &st);
        d->param_note = dup_or_null(s->param_note, &st);
        d->torch_kind = dup_or_null(s->torch_kind, &st);
        d->folded_from = dup_or_null(s->folded_from, &st);
        FR_TRY(st);
        FR_TRY(copy_tensor(s->constant, share, &d->constant));
    }
    return FR_OK;
}

static fr_status copy_nodes(const fr_graph *g, fr_graph *c)
{
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *s = &g->nodes[i];
        int id;
        FR_TRY(fr_graph_add_node(c, s->op_type, s->domain, s->name, s->n_inputs, s->inputs,
                                 s->n_outputs, s->outputs, &id));
        fr_node *d = &c->nodes[id];
        fr_status st = FR_OK;
        d->doc_string = dup_or_null(s->doc_string, &st);
        FR_TRY(st);
        d->op = s->op;
        d->dead = s->dead;
        FR_TRY(fr_node_copy_attrs(d, s));
    }
    /* fr_graph_add_node set producers from the outputs; restore the source's exact record */
    for (int i = 0; i < g->n_values; i++) c->values[i].producer = g->values[i].producer;
    return FR_OK;
}

static fr_status copy_header(const fr_graph *g, fr_graph *c)
{
    fr_status st = FR_OK;
    c->name = dup_or_null(g->name, &st);
    c->producer_name = dup_or_null(g->producer_name, &st);
    c->producer_version = dup_or_null(g->producer_version, &st);
    c->domain = dup_or_null(g->domain, &st);
    c->doc_string = dup_or_null(g->doc_string, &st);
    c->graph_doc_string = dup_or_null(g->graph_doc_string, &st);
    c->model_dir = dup_or_null(g->model_dir, &st);
    c->source_path = dup_or_null(g->source_path, &st);
    FR_TRY(st);
    c->ir_version = g->ir_version;
    c->model_version = g->model_version;
    FR_TRY(copy_ids(g->inputs, g->n_inputs, &c->inputs));
    c->n_inputs = g->n_inputs;
    FR_TRY(copy_ids(g->outputs, g->n_outputs, &c->outputs));
    c->n_outputs = g->n_outputs;
    FR_TRY(copy_ids(g->initializers, g->n_initializers, &c->initializers));
    c->n_initializers = g->n_initializers;
    if (g->n_opsets > 0) {
        c->opsets = fr_calloc((size_t)g->n_opsets, sizeof *c->opsets, "graph copy");
        if (!c->opsets) return FR_ERR_OOM;
        for (int i = 0; i < g->n_opsets; i++) {
            c->n_opsets = i + 1;
            c->opsets[i].domain = dup_or_null(g->opsets[i].domain ? g->opsets[i].domain : "", &st);
            c->opsets[i].version = g->opsets[i].version;
            FR_TRY(st);
        }
    }
    if (g->n_metadata > 0) {
        c->metadata = fr_calloc((size_t)g->n_metadata, sizeof *c->metadata, "graph copy");
        if (!c->metadata) return FR_ERR_OOM;
        for (int i = 0; i < g->n_metadata; i++) {
            c->n_metadata = i + 1;
            c->metadata[i].key = dup_or_null(g->metadata[i].key, &st);
            c->metadata[i].value = dup_or_null(g->metadata[i].value, &st);
            FR_TRY(st);
        }
    }
    return FR_OK;
}

fr_status fr_train_clone_graph(const fr_graph *g, int share_constants, fr_graph **out)
{
    *out = NULL;
    if (!g) return fr_error(FR_ERR_INVALID_ARG, "graph copy: no graph");
    fr_graph *c;
    FR_TRY(fr_graph_new(&c));
    fr_status st = copy_values(g, share_constants, c);
    if (st == FR_OK) st = copy_nodes(g, c);
    if (st == FR_OK) st = copy_header(g, c);
    if (st != FR_OK) {
        fr_graph_free(c);
        return st;
    }
    *out = c;
    return FR_OK;
}

fr_status fr_graph_take_constants(fr_graph *g, fr_graph *from)
{
    for (int i = 0; i < g->n_values; i++) {
        fr_tensor *t = g->values[i].constant;
        if (!t || t->owns_data || !t->nbytes) continue;
        /* a copy keeps value ids: the owner is the value at the same id */
        fr_tensor *o = i < from->n_values ? from->values[i].constant : NULL;
        if (o && o->owns_data && o->data == t->data) { /* the storage changes hands: no copy */
            o->owns_data = 0;
            t->owns_data = 1;
            continue;
        }
        /* borrowed from elsewhere (a pass moved it): copied, so that g stands alone */
        void *d = fr_malloc(t->nbytes, "graph constants");
        if (!d) return FR_ERR_OOM;
        memcpy(d, t->data, t->nbytes);
        t->data = d;
        t->owns_data = 1;
    }
    return FR_OK;
}
