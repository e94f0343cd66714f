/* The forward preparation pipeline (see passes.h for the order and why). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/limits.h"
#include "ops/op.h"
#include "passes/attention_import.h"
#include "passes/passes.h"
#include "passes/rotary_embedding.h"

void fr_prepare_options_default(fr_prepare_options *o)
{
    memset(o, 0, sizeof *o);
    o->fold = 1;
    o->fold_max_elements = FR_FOLD_MAX_ELEMENTS_DEFAULT;
}

char *fr_value_shape_text(const fr_value *v, char *buf, size_t n)
{
    if (n == 0) return buf;
    if (v->rank < 0) {
        snprintf(buf, n, "(no shape)");
        return buf;
    }
    size_t off = (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < v->rank && off < n; d++) {
        const char *sep = d ? ", " : "";
        if (v->dim_params[d] && v->dims[d] >= 0)
            off += (size_t)snprintf(buf + off, n - off, "%s%s=%lld", sep, v->dim_params[d],
                                    (long long)v->dims[d]);
        else if (v->dim_params[d])
            off += (size_t)snprintf(buf + off, n - off, "%s%s", sep, v->dim_params[d]);
        else if (v->dims[d] >= 0)
            off += (size_t)snprintf(buf + off, n - off, "%s%lld", sep, (long long)v->dims[d]);
        else
            off += (size_t)snprintf(buf + off, n - off, "%s?", sep);
    }
    if (off < n) snprintf(buf + off, n - off, "]");
    return buf;
}

static fr_status check_outputs_exist(const fr_graph *g)
{
    for (int i = 0; i < g->n_outputs; i++) {
        const fr_value *v = &g->values[g->outputs[i]];
        if (v->producer < 0 && !v->constant && !(v->flags & FR_VAL_INPUT))
            return fr_error(FR_ERR_GRAPH,
                            "graph output '%s' is produced by no node and is neither a graph "
                            "input nor an initializer",
                            v->name);
    }
    return FR_OK;
}

static fr_status bind_named_dims(fr_graph *g, const fr_prepare_options *opt)
{
    for (int i = 0; i < opt->n_dims; i++) {
        const fr_dim_binding *b = &opt->dims[i];
        if (!b->name || !b->name[0]) return fr_error(FR_ERR_INVALID_ARG, "--dim: empty dimension name");
        for (int j = 0; j < i; j++)
            if (strcmp(opt->dims[j].name, b->name) == 0)
                return fr_error(FR_ERR_INVALID_ARG, "--dim %s is given twice (%lld and %lld)",
                                b->name, (long long)opt->dims[j].value, (long long)b->value);
        FR_TRY(fr_graph_fix_dim(g, b->name, b->value));
    }
    return FR_OK;
}

static void list_inputs(const fr_graph *g, char *buf, size_t n)
{
    size_t off = 0;
    buf[0] = '\0';
    for (int i = 0; i < g->n_inputs && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%s'%s'", i ? ", " : "", g->values[g->inputs[i]].name);
    if (g->n_inputs == 0) snprintf(buf, n, "none");
}

/* Fix the dims of graph inputs from the shapes the caller will feed. */
static fr_status bind_input_shapes(fr_graph *g, const fr_prepare_options *opt)
{
    for (int i = 0; i < opt->n_input_shapes; i++) {
        const fr_input_shape *s = &opt->input_shapes[i];
        char want[512], got[256], names[512];
        int vid = s->name ? fr_graph_find_value(g, s->name) : -1;
        if (vid < 0 || !(g->values[vid].flags & FR_VAL_INPUT)) {
            list_inputs(g, names, sizeof names);
            return fr_error(FR_ERR_INVALID_ARG, "the model has no input named '%s' (its inputs: %s)",
                            s->name ? s->name : "(null)", names);
        }
        for (int j = 0; j < i; j++)
            if (strcmp(opt->input_shapes[j].name, s->name) == 0)
                return fr_error(FR_ERR_INVALID_ARG, "input '%s' is given twice", s->name);
        if (s->rank < 0 || s->rank > FR_MAX_RANK)
            return fr_error(FR_ERR_INVALID_ARG, "input '%s': rank %d is outside 0..%d", s->name,
                            s->rank, FR_MAX_RANK);
        fr_value *v = &g->values[vid];
        fr_shape_str(s->rank, s->dims, got, sizeof got);
        if (v->rank < 0) { /* the model declares no shape: take the caller's */
            fr_value_set_shape(v, v->dtype, s->rank, s->dims);
            continue;
        }
        fr_value_shape_text(v, want, sizeof want);
        if (v->rank != s->rank)
            return fr_error(FR_ERR_SHAPE, "input '%s': the model expects shape %s (rank %d), got %s",
                            s->name, want, v->rank, got);
        for (int d = 0; d < v->rank; d++) {
            if (s->dims[d] < 0)
                return fr_error(FR_ERR_INVALID_ARG, "input '%s': shape %s has a negative dim",
                                s->name, got);
            if (v->dims[d] >= 0) {
                if (v->dims[d] != s->dims[d])
                    return fr_error(FR_ERR_SHAPE,
                                    "input '%s': the model expects shape %s, got %s (dim %d "
                                    "differs%s%s%s)",
                                    s->name, want, got, d,
                                    v->dim_params[d] ? ": '" : "",
                                    v->dim_params[d] ? v->dim_params[d] : "",
                                    v->dim_params[d] ? "' was fixed by --dim or another input" : "");
            } else if (v->dim_params[d]) {
                FR_TRY(fr_graph_fix_dim(g, v->dim_params[d], s->dims[d]));
            } else {
                v->dims[d] = s->dims[d];
            }
        }
    }
    return FR_OK;
}

/* Every graph input must now have a dtype and a full static shape, of a size memory holds. */
static fr_status check_inputs_static(const fr_graph *g)
{
    for (int i = 0; i < g->n_inputs; i++) {
        const fr_value *v = &g->values[g->inputs[i]];
        char shp[512];
        if (v->dtype == FR_UNDEFINED || fr_dtype_size(v->dtype) == 0)
            return fr_error(FR_ERR_UNSUPPORTED, "graph input '%s' has element type %s, which fp8run cannot feed",
                            v->name, fr_dtype_name(v->dtype));
        if (v->rank < 0)
            return fr_error(FR_ERR_SHAPE,
                            "graph input '%s' has no shape in the model: give its array "
                            "(fp8run run --input %s=FILE.npy)",
                            v->name, v->name);
        fr_value_shape_text(v, shp, sizeof shp);
        for (int d = 0; d < v->rank; d++) {
            if (v->dims[d] >= 0) continue;
            if (v->dim_params[d])
                return fr_error(FR_ERR_SHAPE,
                                "graph input '%s' %s: symbolic dimension '%s' (dim %d) has no "
                                "value; fix it with --dim %s=VALUE",
                                v->name, shp, v->dim_params[d], d, v->dim_params[d]);
            return fr_error(FR_ERR_SHAPE,
                            "graph input '%s' %s: dim %d has no size and no name in the model; "
                            "give the input's array (fp8run run --input %s=FILE.npy) so its "
                            "shape is known",
                            v->name, shp, d, v->name);
        }
        size_t bytes;
        char what[600];
        snprintf(what, sizeof what, "graph input '%s'", v->name);
        FR_TRY(fr_shape_bytes(v->dtype, v->rank, v->dims, what, &bytes));
    }
    return FR_OK;
}

typedef struct declared {
    fr_dtype dtype;
    int rank;
    int64_t dims[FR_MAX_RANK];
} declared;

/* Inference replaces the shapes the model declares for its outputs; compare them afterwards
 * so a wrong infer() (or a model that disagrees with itself) is an error, not a surprise. */
static fr_status check_declared(const fr_graph *g, const declared *decl)
{
    for (int i = 0; i < g->n_outputs; i++) {
        const declared *d = &decl[i];
        const fr_value *v = &g->values[g->outputs[i]];
        char a[256], b[256];
        if (d->dtype != FR_UNDEFINED && d->dtype != v->dtype)
            return fr_error(FR_ERR_SHAPE, "graph output '%s': the model declares %s, inference gives %s",
                            v->name, fr_dtype_name(d->dtype), fr_dtype_name(v->dtype));
        if (d->rank < 0) continue;
        int bad = d->rank != v->rank;
        for (int k = 0; !bad && k < d->rank; k++) bad = d->dims[k] >= 0 && d->dims[k] != v->dims[k];
        if (bad) {
            /* unknown declared dims print as -1 */
            return fr_error(FR_ERR_SHAPE,
                            "graph output '%s': the model declares shape %s, inference gives %s",
                            v->name, fr_shape_str(d->rank, d->dims, a, sizeof a),
                            fr_shape_str(v->rank, v->dims, b, sizeof b));
        }
    }
    return FR_OK;
}

static fr_status dce_and_compact(fr_graph *g, int *removed)
{
    int n = 0;
    FR_TRY(fr_dce(g, &n));
    if (removed) *removed += n;
    return n ? fr_graph_compact(g) : FR_OK;
}

fr_status fr_prepare_forward(fr_graph *g, const fr_prepare_options *opt, fr_prepare_stats *stats)
{
    fr_prepare_options dflt;
    fr_prepare_stats local;
    if (!g) return fr_error(FR_ERR_INVALID_ARG, "fr_prepare_forward: no graph");
    if (!opt) {
        fr_prepare_options_default(&dflt);
        opt = &dflt;
    }
    if (!stats) stats = &local;
    memset(stats, 0, sizeof *stats);
    if (opt->n_dims < 0 || (opt->n_dims > 0 && !opt->dims) || opt->n_input_shapes < 0 ||
        (opt->n_input_shapes > 0 && !opt->input_shapes))
        return fr_error(FR_ERR_INVALID_ARG, "fr_prepare_forward: inconsistent dims/input_shapes");

    FR_TRY(fr_graph_toposort(g));
    FR_TRY(check_outputs_exist(g));
    FR_TRY(fr_lower_rotary_embedding(g, NULL)); /* opset 23's RoPE onto ai.fp8run::Rotary */
    FR_TRY(fr_remove_identities(g, &stats->identities_removed));
    /* drop unused branches before resolving ops: an unsupported op nothing needs is harmless */
    FR_TRY(dce_and_compact(g, &stats->nodes_removed));
    FR_TRY(fr_graph_resolve_ops(g));

    FR_TRY(bind_named_dims(g, opt));
    FR_TRY(bind_input_shapes(g, opt));
    FR_TRY(check_inputs_static(g));

    declared *decl = fr_calloc((size_t)(g->n_outputs ? g->n_outputs : 1), sizeof *decl,
                               "declared output shapes");
    if (!decl) return FR_ERR_OOM;
    for (int i = 0; i < g->n_outputs; i++) {
        const fr_value *v = &g->values[g->outputs[i]];
        decl[i].dtype = v->dtype;
        decl[i].rank = v->rank;
        memcpy(decl[i].dims, v->dims, sizeof v->dims);
    }
    int64_t cap = opt->fold_max_elements > 0 ? opt->fold_max_elements : FR_FOLD_MAX_ELEMENTS_DEFAULT;
    fr_status st = fr_infer_graph(g, opt->fold, cap, &stats->nodes_folded);
    int n_lowered; /* ONNX Attention has no kernel of its own: always onto the fused op */
    if (st == FR_OK) st = fr_lower_onnx_attention(g, &n_lowered);
    if (st == FR_OK) st = check_declared(g, decl);
    free(decl);
    FR_TRY(st);
    return dce_and_compact(g, &stats->nodes_removed);
}
