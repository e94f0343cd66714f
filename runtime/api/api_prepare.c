/* Public API: preparing a model for static shapes (passes/passes.h: fr_prepare_forward) and
 * running its forward pass on host tensors with the CPU executor (runtime/exec/executor.h). Both
 * work on a deep copy, so the model stays as it was and may be destroyed afterwards. */
#include <stdlib.h>
#include <string.h>

#include "runtime/api/api_internal.h"
#include "runtime/exec/executor.h"

#define PREPARE_V1_SIZE sizeof(fp8run_prepare_config)
#define PSTATS_V1_SIZE sizeof(fp8run_prepare_stats)
#define INFO_V1_SIZE sizeof(fp8run_value_info)
#define TENSOR_V1_SIZE sizeof(fp8run_tensor)

struct fp8run_forward {
    api_err err;
    fr_graph *g;   /* the prepared copy the executor borrows */
    fr_exec *e;
    int ran;       /* the last run succeeded and no input changed since */
};

FP8RUN_API fp8run_status fp8run_prepare_config_init(fp8run_prepare_config *cfg, size_t size)
{
    fp8run_prepare_config d;
    memset(&d, 0, sizeof d); /* every default is zero: nothing fixed */
    return fr_api_struct_init(__func__, "fp8run_prepare_config", cfg, size, PREPARE_V1_SIZE, &d, sizeof d);
}

/* A config turned into preparation options; the arrays are owned here, the names borrowed. */
typedef struct prep_opts {
    fr_prepare_options o;
    fr_dim_binding *dims;
    fr_input_shape *shapes;
} prep_opts;

static void prep_free(prep_opts *p)
{
    free(p->dims);
    free(p->shapes);
}

static fp8run_status to_prep(api_err *slot, const char *fn, const fp8run_prepare_config *cfg, prep_opts *out)
{
    memset(out, 0, sizeof *out);
    fr_prepare_options_default(&out->o);
    if (!cfg) return FP8RUN_OK;
    fp8run_prepare_config c;
    memset(&c, 0, sizeof c);
    fp8run_status ps = fr_api_read_in(slot, fn, "config", cfg, PREPARE_V1_SIZE, &c, sizeof c);
    if (ps != FP8RUN_OK) return ps;
    ps = fr_api_dims(slot, fn, c.dim_names, c.dim_values, c.n_dims, 0, &out->dims);
    if (ps != FP8RUN_OK) return ps;
    out->o.dims = out->dims;
    out->o.n_dims = c.n_dims;
    if (c.n_inputs < 0 || (c.n_inputs > 0 && (!c.input_names || !c.input_ranks || !c.input_dims))) {
        prep_free(out);
        return fr_api_error(slot, FP8RUN_ERR_INVALID_ARG,
                            "%s: config.n_inputs is %d but input_names, input_ranks or input_dims is NULL", fn,
                            c.n_inputs);
    }
    if (c.n_inputs == 0) return FP8RUN_OK;
    out->shapes = calloc((size_t)c.n_inputs, sizeof *out->shapes);
    if (!out->shapes) {
        prep_free(out);
        return fr_api_error(slot, FP8RUN_ERR_OOM, "%s: out of memory for %d input shapes", fn, c.n_inputs);
    }
    for (int i = 0; i < c.n_inputs; i++) {
        const char *name = c.input_names[i];
        int rank = c.input_ranks[i];
        const char *bad = !name || !name[0]                      ? "has no name"
                          : rank < 0 || rank > FP8RUN_MAX_RANK   ? "has a rank outside 0..8"
                          : rank > 0 && !c.input_dims[i]         ? "has no dims"
                                                                 : NULL;
        if (bad) {
            prep_free(out);
            return fr_api_error(slot, FP8RUN_ERR_INVALID_ARG, "%s: config input %d ('%s') %s", fn, i,
                                name ? name : "(null)", bad);
        }
        out->shapes[i].name = name;
        out->shapes[i].rank = rank;
        for (int d = 0; d < rank; d++) out->shapes[i].dims[d] = c.input_dims[i][d];
    }
    out->o.input_shapes = out->shapes;
    out->o.n_input_shapes = c.n_inputs;
    return FP8RUN_OK;
}

/* A prepared deep copy of m; the error recorded (with fn) on failure. */
static fp8run_status prepared_copy(const fp8run_model *m, const char *fn, const fp8run_prepare_config *cfg,
                                   fr_graph **out, fr_prepare_stats *stats)
{
    api_err *slot = (api_err *)&m->err;
    *out = NULL;
    prep_opts p;
    fp8run_status ps = to_prep(slot, fn, cfg, &p);
    if (ps != FP8RUN_OK) return ps;
    fr_graph *g = NULL;
    fr_status st = fr_train_clone_graph(m->g, 0, &g);
    if (st == FR_OK) st = fr_prepare_forward(g, &p.o, stats);
    if (st != FR_OK && m->g->source_path) st = fr_error_context(st, "model '%s'", m->g->source_path);
    prep_free(&p);
    if (st != FR_OK) {
        fr_graph_free(g);
        return fr_api_fail(slot, fn, st);
    }
    *out = g;
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_model_prepare(const fp8run_model *m, const fp8run_prepare_config *cfg,
                                              fp8run_model **out, fp8run_prepare_stats *stats)
{
    const char *fn = __func__;
    api_err *slot = m ? (api_err *)&m->err : NULL;
    if (!out) return fr_api_error(slot, FP8RUN_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!m) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: model is NULL", fn);
    size_t use = 0;
    fp8run_status ps;
    if (stats && (ps = fr_api_check_out(slot, fn, "stats", stats, PSTATS_V1_SIZE, sizeof *stats, &use)) != FP8RUN_OK)
        return ps;
    fr_graph *g;
    fr_prepare_stats st;
    memset(&st, 0, sizeof st);
    ps = prepared_copy(m, fn, cfg, &g, &st);
    if (ps != FP8RUN_OK) return ps;
    ps = fr_api_model_wrap(g, out);
    if (ps != FP8RUN_OK || !stats) return ps;
    fp8run_prepare_stats o;
    memset(&o, 0, sizeof o);
    o.struct_size = stats->struct_size;
    o.identities_removed = st.identities_removed;
    o.nodes_folded = st.nodes_folded;
    o.nodes_removed = st.nodes_removed;
    memcpy(stats, &o, use);
    return FP8RUN_OK;
}

/* ---- the forward pass ---- */

FP8RUN_API fp8run_status fp8run_forward_create(const fp8run_model *m, const fp8run_prepare_config *cfg,
                                               fp8run_forward **out)
{
    const char *fn = __func__;
    if (!out) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    if (!m) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: model is NULL", fn);
    fp8run_forward *f = calloc(1, sizeof *f);
    if (!f) return fr_api_error(NULL, FP8RUN_ERR_OOM, "%s: out of memory", fn);
    fp8run_status ps = prepared_copy(m, fn, cfg, &f->g, NULL);
    if (ps == FP8RUN_OK) {
        fr_status st = fr_exec_new(f->g, &f->e);
        if (st != FR_OK) ps = fr_api_fail((api_err *)&m->err, fn, st);
    }
    if (ps != FP8RUN_OK) {
        fp8run_forward_destroy(f);
        return ps;
    }
    *out = f;
    return FP8RUN_OK;
}

FP8RUN_API void fp8run_forward_destroy(fp8run_forward *f)
{
    if (!f) return;
    fr_exec_free(f->e);
    fr_graph_free(f->g);
    free(f);
}

FP8RUN_API const char *fp8run_forward_error(const fp8run_forward *f) { return f ? f->err.msg : "no forward (NULL)"; }

FP8RUN_API int fp8run_forward_input_count(const fp8run_forward *f) { return f ? fr_exec_n_inputs(f->e) : 0; }

FP8RUN_API fp8run_status fp8run_forward_input(const fp8run_forward *f, int i, fp8run_value_info *info)
{
    const char *fn = __func__;
    if (!f) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: forward is NULL", fn);
    api_err *slot = (api_err *)&f->err;
    size_t use;
    fp8run_status ps = fr_api_check_out(slot, fn, "info", info, INFO_V1_SIZE, sizeof *info, &use);
    if (ps != FP8RUN_OK) return ps;
    int n = fr_exec_n_inputs(f->e);
    if (i < 0 || i >= n)
        return fr_api_error(slot, FP8RUN_ERR_RANGE, "%s: input index %d is outside [0, %d)", fn, i, n);
    fr_api_value_info(fr_exec_input(f->e, i), info, use);
    return FP8RUN_OK;
}

FP8RUN_API fp8run_status fp8run_forward_set_input(fp8run_forward *f, const fp8run_tensor *t)
{
    const char *fn = __func__;
    if (!f) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: forward is NULL", fn);
    fp8run_tensor c;
    memset(&c, 0, sizeof c);
    fp8run_status ps = fr_api_read_in(&f->err, fn, "tensor", t, TENSOR_V1_SIZE, &c, sizeof c);
    if (ps != FP8RUN_OK) return ps;
    if (!c.name) return fr_api_error(&f->err, FP8RUN_ERR_INVALID_ARG, "%s: tensor.name is NULL", fn);
    if (c.rank < 0 || c.rank > FP8RUN_MAX_RANK)
        return fr_api_error(&f->err, FP8RUN_ERR_INVALID_ARG, "%s: input '%s': rank %d is outside 0..%d", fn, c.name,
                            c.rank, FP8RUN_MAX_RANK);
    /* a header over the caller's memory: the executor copies the data */
    fr_tensor h = fr_api_tensor_view(&c);
    f->ran = 0;
    return fr_api_fail(&f->err, fn, fr_exec_set_input(f->e, c.name, &h));
}

FP8RUN_API fp8run_status fp8run_forward_run(fp8run_forward *f)
{
    const char *fn = __func__;
    if (!f) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: forward is NULL", fn);
    f->ran = 0;
    fr_status st = fr_exec_run(f->e);
    f->ran = st == FR_OK;
    return fr_api_fail(&f->err, fn, st);
}

FP8RUN_API int fp8run_forward_output_count(const fp8run_forward *f) { return f ? f->g->n_outputs : 0; }

FP8RUN_API fp8run_status fp8run_forward_output(const fp8run_forward *f, int i, fp8run_tensor *out)
{
    const char *fn = __func__;
    if (!f) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: forward is NULL", fn);
    api_err *slot = (api_err *)&f->err;
    size_t use;
    fp8run_status ps = fr_api_check_out(slot, fn, "out", out, TENSOR_V1_SIZE, sizeof *out, &use);
    if (ps != FP8RUN_OK) return ps;
    int n = f->g->n_outputs;
    if (i < 0 || i >= n)
        return fr_api_error(slot, FP8RUN_ERR_RANGE, "%s: output index %d is outside [0, %d)", fn, i, n);
    const fr_tensor *t = f->ran ? fr_exec_output_at(f->e, i) : NULL;
    if (!t)
        return fr_api_error(slot, FP8RUN_ERR_STATE, "%s: no successful run since the inputs were set (output '%s')",
                            fn, fr_exec_output_name(f->e, i));
    fp8run_tensor o;
    memset(&o, 0, sizeof o);
    o.struct_size = out->struct_size;
    o.name = fr_exec_output_name(f->e, i);
    o.dtype = (fp8run_dtype)t->dtype;
    o.rank = t->rank;
    memcpy(o.dims, t->dims, sizeof o.dims);
    o.data = t->data;
    o.nbytes = t->nbytes;
    memcpy(out, &o, use);
    return FP8RUN_OK;
}
