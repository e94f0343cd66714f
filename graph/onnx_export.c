/* ONNX export: the IR graph back into a ModelProto. Initializers are written as raw_data (the
 * exact bytes held), graph inputs/outputs and known intermediate types as ValueInfo (symbolic
 * dims as dim_param), nodes with all attributes, opset imports and model metadata. The
 * protobuf-c structs borrow strings and tensor bytes from the graph; everything allocated for
 * them lives in a pool freed at the end. Files are replaced atomically, never through a
 * symlink; large initializers can go to one external data file next to the model. */
#include "graph/onnx_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/onnx_io_util.h"
#include "schema/onnx.pb-c.h"

/* ---- allocation pool ---- */

typedef struct pool {
    void **p;
    size_t n, cap;
} pool;

static void *pool_alloc(pool *pl, size_t count, size_t size, const char *what)
{
    if (pl->n == pl->cap) {
        size_t ncap = pl->cap ? pl->cap * 2 : 256;
        void **np = fr_realloc_array(pl->p, ncap, sizeof *np, "export pool");
        if (!np) return NULL;
        pl->p = np;
        pl->cap = ncap;
    }
    void *q = fr_calloc(count ? count : 1, size, what);
    if (q) pl->p[pl->n++] = q;
    return q;
}

static void pool_free(pool *pl)
{
    for (size_t i = 0; i < pl->n; i++) free(pl->p[i]);
    free(pl->p);
    pl->p = NULL;
    pl->n = pl->cap = 0;
}

typedef struct export_ctx {
    const fr_graph *g;
    pool pl;
    const char *ext_name; /* NULL: every tensor inline */
    size_t ext_min;
    const fr_tensor **ext; /* tensors for the data file, in file order */
    int n_ext;
    uint64_t ext_off;
    int uses_fp8; /* float8 element types need IR version 9 */
} export_ctx;

/* The graph is const; protobuf-c's structs are not, but packing never writes through them. */
static char *S(const char *s) { return (char *)(uintptr_t)s; }

static Onnx__StringStringEntryProto *kv_proto(export_ctx *x, const char *k, const char *v)
{
    Onnx__StringStringEntryProto *e =
        pool_alloc(&x->pl, 1, sizeof *e, "metadata entry");
    if (!e) return NULL;
    onnx__string_string_entry_proto__init(e);
    e->key = S(k);
    e->value = S(v);
    return e;
}

static char *num_str(export_ctx *x, uint64_t v)
{
    char *s = pool_alloc(&x->pl, 24, 1, "number");
    if (s) snprintf(s, 24, "%llu", (unsigned long long)v);
    return s;
}

/* ---- tensors and values ---- */

static int is_fp8(fr_dtype dt)
{
    return dt == FR_F8E4M3 || dt == FR_F8E4M3FNUZ || dt == FR_F8E5M2 || dt == FR_F8E5M2FNUZ;
}


static fr_status tensor_proto(export_ctx *x, const fr_tensor *t, const char *name, const char *doc,
                              int may_external, Onnx__TensorProto **out)
{
    Onnx__TensorProto *tp = pool_alloc(&x->pl, 1, sizeof *tp, "tensor proto");
    int64_t *dims = pool_alloc(&x->pl, (size_t)t->rank, sizeof(int64_t), "tensor dims");
    if (!tp || !dims) return FR_ERR_OOM;
    onnx__tensor_proto__init(tp);
    for (int d = 0; d < t->rank; d++) dims[d] = t->dims[d];
    tp->n_dims = (size_t)t->rank;
    tp->dims = dims;
    tp->has_data_type = 1;
    tp->data_type = (int32_t)t->dtype;
    if (is_fp8(t->dtype)) x->uses_fp8 = 1;
    tp->name = S(name);
    tp->doc_string = S(doc);
    if (may_external && x->ext_name && t->nbytes > 0 && t->nbytes >= x->ext_min) {
        const fr_tensor **ne = fr_realloc_array(x->ext, (size_t)x->n_ext + 1, sizeof *ne, "external tensors");
        Onnx__StringStringEntryProto **ed = pool_alloc(&x->pl, 3, sizeof *ed, "external data entries");
        if (!ne || !ed) return FR_ERR_OOM;
        x->ext = ne;
        x->ext[x->n_ext++] = t;
        char *off = num_str(x, x->ext_off), *len = num_str(x, t->nbytes);
        if (!off || !len) return FR_ERR_OOM;
        ed[0] = kv_proto(x, "location", x->ext_name);
        ed[1] = kv_proto(x, "offset", off);
        ed[2] = kv_proto(x, "length", len);
        if (!ed[0] || !ed[1] || !ed[2]) return FR_ERR_OOM;
        tp->n_external_data = 3;
        tp->external_data = ed;
        tp->has_data_location = 1;
        tp->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
        x->ext_off += t->nbytes;
    } else {
        tp->has_raw_data = 1;
        tp->raw_data.len = t->nbytes;
        tp->raw_data.data = (uint8_t *)(uintptr_t)t->data;
    }
    *out = tp;
    return FR_OK;
}

static fr_status value_info_proto(export_ctx *x, const fr_value *v, Onnx__ValueInfoProto **out)
{
    Onnx__ValueInfoProto *vi = pool_alloc(&x->pl, 1, sizeof *vi, "value info");
    if (!vi) return FR_ERR_OOM;
    onnx__value_info_proto__init(vi);
    vi->name = S(v->name);
    vi->doc_string = S(v->doc_string);
    *out = vi;
    if (v->dtype == FR_UNDEFINED && v->rank < 0) return FR_OK;
    Onnx__TypeProto *tp = pool_alloc(&x->pl, 1, sizeof *tp, "type proto");
    Onnx__TypeProto__Tensor *tt = pool_alloc(&x->pl, 1, sizeof *tt, "tensor type");
    if (!tp || !tt) return FR_ERR_OOM;
    onnx__type_proto__init(tp);
    onnx__type_proto__tensor__init(tt);
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    vi->type = tp;
    if (v->dtype != FR_UNDEFINED) {
        if (is_fp8(v->dtype)) x->uses_fp8 = 1;
        tt->has_elem_type = 1;
        tt->elem_type = (int32_t)v->dtype;
    }
    if (v->rank < 0) return FR_OK;
    Onnx__TensorShapeProto *sh = pool_alloc(&x->pl, 1, sizeof *sh, "shape");
    Onnx__TensorShapeProto__Dimension **dims =
        pool_alloc(&x->pl, (size_t)v->rank, sizeof *dims, "shape dims");
    if (!sh || !dims) return FR_ERR_OOM;
    onnx__tensor_shape_proto__init(sh);
    for (int d = 0; d < v->rank; d++) {
        Onnx__TensorShapeProto__Dimension *dim = pool_alloc(&x->pl, 1, sizeof *dim, "dim");
        if (!dim) return FR_ERR_OOM;
        onnx__tensor_shape_proto__dimension__init(dim);
        if (v->dim_params[d]) { /* symbolic dims stay symbolic, even once fixed for a session */
            dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            dim->dim_param = v->dim_params[d];
        } else if (v->dims[d] >= 0) {
            dim->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            dim->dim_value = v->dims[d];
        }
        dims[d] = dim;
    }
    sh->n_dim = (size_t)v->rank;
    sh->dim = dims;
    tt->shape = sh;
    return FR_OK;
}

/* ---- nodes ---- */

static fr_status attr_proto(export_ctx *x, const fr_node *n, const fr_attr *a,
                            Onnx__AttributeProto **out)
{
    Onnx__AttributeProto *ap = pool_alloc(&x->pl, 1, sizeof *ap, "attribute");
    if (!ap) return FR_ERR_OOM;
    onnx__attribute_proto__init(ap);
    ap->name = a->name;
    ap->has_type = 1;
    switch (a->type) {
    case FR_ATTR_FLOAT:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
        ap->has_f = 1;
        ap->f = a->f;
        break;
    case FR_ATTR_INT:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
        ap->has_i = 1;
        ap->i = a->i;
        break;
    case FR_ATTR_STRING:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
        ap->has_s = 1;
        ap->s.data = (uint8_t *)a->s;
        ap->s.len = a->s ? a->s_len : 0;
        break;
    case FR_ATTR_TENSOR:
        if (!a->t)
            return fr_error(FR_ERR_INTERNAL, "node '%s' (%s): TENSOR attribute '%s' holds no tensor",
                            n->name, n->op_type, a->name);
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR;
        FR_TRY(tensor_proto(x, a->t, NULL, NULL, 0, &ap->t));
        break;
    case FR_ATTR_FLOATS:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
        ap->n_floats = (size_t)a->n;
        ap->floats = a->floats;
        break;
    case FR_ATTR_INTS:
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
        ap->n_ints = (size_t)a->n;
        ap->ints = a->ints;
        break;
    case FR_ATTR_STRINGS: {
        ap->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS;
        ProtobufCBinaryData *ss = pool_alloc(&x->pl, (size_t)a->n, sizeof *ss, "attribute strings");
        if (!ss) return FR_ERR_OOM;
        for (int k = 0; k < a->n; k++) {
            const char *s = a->strings[k] ? a->strings[k] : "";
            ss[k].data = (uint8_t *)S(s);
            ss[k].len = strlen(s);
        }
        ap->n_strings = (size_t)a->n;
        ap->strings = ss;
        break;
    }
    default:
        return fr_error(FR_ERR_UNSUPPORTED, "node '%s' (%s): attribute '%s' of type %d cannot be exported",
                        n->name, n->op_type, a->name, (int)a->type);
    }
    *out = ap;
    return FR_OK;
}

static fr_status node_proto(export_ctx *x, const fr_node *n, Onnx__NodeProto **out)
{
    const fr_graph *g = x->g;
    Onnx__NodeProto *np = pool_alloc(&x->pl, 1, sizeof *np, "node");
    char **in = pool_alloc(&x->pl, (size_t)n->n_inputs, sizeof *in, "node inputs");
    char **outs = pool_alloc(&x->pl, (size_t)n->n_outputs, sizeof *outs, "node outputs");
    Onnx__AttributeProto **attrs = pool_alloc(&x->pl, (size_t)n->n_attrs, sizeof *attrs, "node attributes");
    if (!np || !in || !outs || !attrs) return FR_ERR_OOM;
    onnx__node_proto__init(np);
    /* omitted optional inputs/outputs are "" */
    for (int i = 0; i < n->n_inputs; i++) in[i] = n->inputs[i] >= 0 ? g->values[n->inputs[i]].name : "";
    for (int i = 0; i < n->n_outputs; i++)
        outs[i] = n->outputs[i] >= 0 ? g->values[n->outputs[i]].name : "";
    for (int i = 0; i < n->n_attrs; i++) FR_TRY(attr_proto(x, n, &n->attrs[i], &attrs[i]));
    np->n_input = (size_t)n->n_inputs;
    np->input = in;
    np->n_output = (size_t)n->n_outputs;
    np->output = outs;
    np->name = n->name;
    np->op_type = n->op_type;
    np->domain = n->domain && n->domain[0] ? n->domain : NULL;
    np->doc_string = n->doc_string;
    np->n_attribute = (size_t)n->n_attrs;
    np->attribute = attrs;
    *out = np;
    return FR_OK;
}

/* ---- model ---- */

static fr_status opset_protos(export_ctx *x, Onnx__ModelProto *m)
{
    const fr_graph *g = x->g;
    /* every domain a node uses must be imported: fp8run's own (ai.fp8run) at version 1 */
    size_t cap = (size_t)g->n_opsets + (size_t)g->n_nodes;
    Onnx__OperatorSetIdProto **os = pool_alloc(&x->pl, cap, sizeof *os, "opset imports");
    if (!os) return FR_ERR_OOM;
    size_t n = 0;
    for (int i = 0; i < g->n_opsets + g->n_nodes; i++) {
        const char *dom;
        int64_t ver = 1;
        if (i < g->n_opsets) {
            dom = g->opsets[i].domain ? g->opsets[i].domain : "";
            ver = g->opsets[i].version;
        } else {
            const fr_node *nd = &g->nodes[i - g->n_opsets];
            dom = nd->domain ? nd->domain : "";
            if (nd->dead || !dom[0]) continue; /* the default domain's version cannot be guessed */
        }
        int seen = 0;
        for (size_t k = 0; k < n && !seen; k++) seen = strcmp(os[k]->domain, dom) == 0;
        if (seen) continue;
        Onnx__OperatorSetIdProto *o = pool_alloc(&x->pl, 1, sizeof *o, "opset import");
        if (!o) return FR_ERR_OOM;
        onnx__operator_set_id_proto__init(o);
        o->domain = S(dom);
        o->has_version = 1;
        o->version = ver;
        os[n++] = o;
    }
    m->n_opset_import = n;
    m->opset_import = os;
    return FR_OK;
}

/* The exporter's record an initializer came with (graph/params.h), on the TensorProto, so
 * the written model trains the same set when loaded again. */
static fr_status torch_record(export_ctx *x, const fr_value *v, Onnx__TensorProto *tp)
{
    const char *keys[2] = {"pkg.torch.export.graph_signature.InputSpec.kind", "pkg.onnxscript.optimizer.folded_from"};
    const char *vals[2] = {v->torch_kind, v->folded_from};
    if (!vals[0] && !vals[1]) return FR_OK;
    tp->metadata_props = pool_alloc(&x->pl, 2, sizeof *tp->metadata_props, "metadata");
    if (!tp->metadata_props) return FR_ERR_OOM;
    for (int k = 0; k < 2; k++) {
        if (!vals[k]) continue;
        if (!(tp->metadata_props[tp->n_metadata_props++] = kv_proto(x, keys[k], vals[k]))) return FR_ERR_OOM;
    }
    return FR_OK;
}

static fr_status graph_proto(export_ctx *x, Onnx__GraphProto *gp)
{
    const fr_graph *g = x->g;
    size_t nv = (size_t)g->n_values;
    /* which values nodes read or write, and which constants are listed as initializers */
    unsigned char *used = pool_alloc(&x->pl, nv, 1, "export marks");
    if (!used) return FR_ERR_OOM;
    enum { USED = 1, LISTED = 2 };
    size_t n_live = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *nd = &g->nodes[i];
        if (nd->dead) continue;
        n_live++;
        for (int k = 0; k < nd->n_inputs; k++)
            if (nd->inputs[k] >= 0) used[nd->inputs[k]] |= USED;
        for (int k = 0; k < nd->n_outputs; k++)
            if (nd->outputs[k] >= 0) used[nd->outputs[k]] |= USED;
    }
    for (int i = 0; i < g->n_outputs; i++) used[g->outputs[i]] |= USED;

    gp->node = pool_alloc(&x->pl, n_live, sizeof *gp->node, "nodes");
    gp->initializer = pool_alloc(&x->pl, nv, sizeof *gp->initializer, "initializers");
    gp->input = pool_alloc(&x->pl, (size_t)g->n_inputs, sizeof *gp->input, "graph inputs");
    gp->output = pool_alloc(&x->pl, (size_t)g->n_outputs, sizeof *gp->output, "graph outputs");
    gp->value_info = pool_alloc(&x->pl, nv, sizeof *gp->value_info, "value infos");
    if (!gp->node || !gp->initializer || !gp->input || !gp->output || !gp->value_info) return FR_ERR_OOM;
    for (int i = 0; i < g->n_nodes; i++)
        if (!g->nodes[i].dead) FR_TRY(node_proto(x, &g->nodes[i], &gp->node[gp->n_node++]));

    /* initializers in model order, then constants created by passes (folded values, FP8
     * state) that live nodes or outputs still read, so the file stays self-contained */
    for (int pass = 0; pass < 2; pass++) {
        int count = pass == 0 ? g->n_initializers : g->n_values;
        for (int i = 0; i < count; i++) {
            int vid = pass == 0 ? g->initializers[i] : i;
            const fr_value *v = &g->values[vid];
            if (!v->constant || (used[vid] & LISTED)) continue;
            if (pass == 1 && !(used[vid] & USED)) continue;
            used[vid] |= LISTED;
            FR_TRY(tensor_proto(x, v->constant, v->name, v->doc_string, 1,
                                &gp->initializer[gp->n_initializer++]));
            FR_TRY(torch_record(x, v, gp->initializer[gp->n_initializer - 1]));
        }
    }
    for (int i = 0; i < g->n_inputs; i++) {
        const fr_value *v = &g->values[g->inputs[i]];
        FR_TRY(value_info_proto(x, v, &gp->input[gp->n_input++]));
    }
    for (int i = 0; i < g->n_outputs; i++) {
        const fr_value *v = &g->values[g->outputs[i]];
        FR_TRY(value_info_proto(x, v, &gp->output[gp->n_output++]));
    }
    /* known types of intermediate values, so other tools (and re-import) keep them */
    for (size_t i = 0; i < nv; i++) {
        const fr_value *v = &g->values[i];
        if (!(used[i] & USED) || (used[i] & LISTED) || (v->flags & (FR_VAL_INPUT | FR_VAL_OUTPUT)))
            continue;
        if (v->dtype == FR_UNDEFINED && v->rank < 0) continue;
        FR_TRY(value_info_proto(x, v, &gp->value_info[gp->n_value_info++]));
    }
    gp->name = S(g->name && g->name[0] ? g->name : "fp8run_graph");
    gp->doc_string = g->graph_doc_string;
    return FR_OK;
}

static fr_status model_proto(export_ctx *x, Onnx__ModelProto **out)
{
    const fr_graph *g = x->g;
    Onnx__ModelProto *m = pool_alloc(&x->pl, 1, sizeof *m, "model");
    Onnx__GraphProto *gp = pool_alloc(&x->pl, 1, sizeof *gp, "graph");
    if (!m || !gp) return FR_ERR_OOM;
    onnx__model_proto__init(m);
    onnx__graph_proto__init(gp);
    m->graph = gp;
    FR_TRY(graph_proto(x, gp));
    FR_TRY(opset_protos(x, m));
    if (g->ir_version > 0) {
        m->has_ir_version = 1;
        /* float8 element types exist from IR version 9 on */
        m->ir_version = x->uses_fp8 && g->ir_version < 9 ? 9 : g->ir_version;
    }
    if (g->model_version) {
        m->has_model_version = 1;
        m->model_version = g->model_version;
    }
    m->producer_name = g->producer_name;
    m->producer_version = g->producer_version;
    m->domain = g->domain;
    m->doc_string = g->doc_string;
    if (g->n_metadata) {
        m->metadata_props = pool_alloc(&x->pl, (size_t)g->n_metadata, sizeof *m->metadata_props, "metadata");
        if (!m->metadata_props) return FR_ERR_OOM;
        for (int i = 0; i < g->n_metadata; i++) {
            m->metadata_props[i] = kv_proto(x, g->metadata[i].key, g->metadata[i].value);
            if (!m->metadata_props[i]) return FR_ERR_OOM;
        }
        m->n_metadata_props = (size_t)g->n_metadata;
    }
    *out = m;
    return FR_OK;
}

static fr_status check_size(size_t size)
{
    if ((uint64_t)size > FR_ONNX_MAX_PROTO_BYTES)
        return fr_error(FR_ERR_UNSUPPORTED,
                        "the model serializes to %zu bytes, more than protobuf's 2 GiB limit; save "
                        "it with external data (fr_onnx_save_options.external_data_name)", size);
    return FR_OK;
}

static void export_done(export_ctx *x)
{
    pool_free(&x->pl);
    free(x->ext);
    x->ext = NULL;
}

fr_status fr_onnx_save_buffer(const fr_graph *g, void **data, size_t *len)
{
    if (!g || !data || !len) return fr_error(FR_ERR_INVALID_ARG, "fr_onnx_save_buffer: NULL argument");
    *data = NULL;
    *len = 0;
    export_ctx x = {.g = g};
    Onnx__ModelProto *m;
    fr_status st = model_proto(&x, &m);
    size_t size = st == FR_OK ? onnx__model_proto__get_packed_size(m) : 0;
    if (st == FR_OK) st = check_size(size);
    unsigned char *buf = NULL;
    if (st == FR_OK) {
        buf = fr_malloc(size, "serialized model");
        if (!buf) st = FR_ERR_OOM;
    }
    if (st == FR_OK && onnx__model_proto__pack(m, buf) != size)
        st = fr_error(FR_ERR_INTERNAL, "protobuf packing wrote a different size than it computed");
    export_done(&x);
    if (st != FR_OK) {
        free(buf);
        return st;
    }
    *data = buf;
    *len = size;
    return FR_OK;
}

/* Streams protobuf-c's output into the atomic file through a 1 MiB buffer, so large inline
 * initializers are written straight from the graph, not copied into one big buffer. */
typedef struct file_sink {
    ProtobufCBuffer base; /* first: protobuf-c calls base.append with &base */
    fr_atomic_file *f;
    unsigned char *buf;
    size_t n, cap;
    uint64_t total;
    fr_status st;
} file_sink;

static void sink_flush(file_sink *s)
{
    if (s->st == FR_OK && s->n) s->st = fr_atomic_write(s->f, s->buf, s->n);
    s->n = 0;
}

static void sink_append(ProtobufCBuffer *b, size_t len, const uint8_t *data)
{
    file_sink *s = (file_sink *)b;
    s->total += len;
    if (s->st != FR_OK) return;
    if (len > s->cap - s->n) sink_flush(s);
    if (len >= s->cap) {
        if (s->st == FR_OK) s->st = fr_atomic_write(s->f, data, len);
        return;
    }
    memcpy(s->buf + s->n, data, len);
    s->n += len;
}

static fr_status check_data_name(const char *path, const char *name)
{
    if (!name[0] || strchr(name, '/') || strstr(name, "..") || strcmp(name, ".") == 0)
        return fr_error(FR_ERR_INVALID_ARG,
                        "external data name '%s' must be a plain file name inside the output "
                        "folder (no '/' or '..')", name);
    if (strcmp(name, fr_onnx_basename(path)) == 0)
        return fr_error(FR_ERR_INVALID_ARG, "external data name '%s' is the model file itself", name);
    return FR_OK;
}

static fr_status write_data_file(export_ctx *x, fr_atomic_file *df)
{
    for (int i = 0; i < x->n_ext; i++) FR_TRY(fr_atomic_write(df, x->ext[i]->data, x->ext[i]->nbytes));
    return fr_atomic_finish(df);
}

static fr_status write_model_file(Onnx__ModelProto *m, size_t size, fr_atomic_file *mf)
{
    file_sink s = {.base = {.append = sink_append}, .f = mf, .cap = (size_t)1 << 20, .st = FR_OK};
    s.buf = fr_malloc(s.cap, "write buffer");
    if (!s.buf) return FR_ERR_OOM;
    onnx__model_proto__pack_to_buffer(m, &s.base);
    sink_flush(&s);
    free(s.buf);
    FR_TRY(s.st);
    if (s.total != size)
        return fr_error(FR_ERR_INTERNAL, "protobuf packing wrote %llu bytes, expected %zu",
                        (unsigned long long)s.total, size);
    return fr_atomic_finish(mf);
}

fr_status fr_onnx_save_file(const fr_graph *g, const char *path, const fr_onnx_save_options *opt)
{
    if (!g || !path || !path[0]) return fr_error(FR_ERR_INVALID_ARG, "fr_onnx_save_file: NULL argument");
    if (!fr_onnx_basename(path)[0])
        return fr_error(FR_ERR_INVALID_ARG, "cannot save a model to '%s': no file name", path);
    export_ctx x = {.g = g};
    if (opt && opt->external_data_name) {
        FR_TRY(check_data_name(path, opt->external_data_name));
        x.ext_name = opt->external_data_name;
        x.ext_min = opt->external_min_bytes;
    }
    Onnx__ModelProto *m;
    fr_atomic_file df = {NULL, NULL, -1}, mf = {NULL, NULL, -1};
    char *dir = NULL, *data_path = NULL;
    fr_status st = model_proto(&x, &m);
    size_t size = st == FR_OK ? onnx__model_proto__get_packed_size(m) : 0;
    if (st == FR_OK) st = check_size(size);
    if (st == FR_OK && x.n_ext) { /* the data file first: the model must never point at a missing one */
        dir = fr_onnx_dirname(path);
        data_path = dir ? fr_onnx_join(dir, x.ext_name) : NULL;
        st = data_path ? fr_atomic_open(data_path, &df) : FR_ERR_OOM;
        if (st == FR_OK) st = write_data_file(&x, &df);
    }
    if (st == FR_OK) st = fr_atomic_open(path, &mf);
    if (st == FR_OK) st = write_model_file(m, size, &mf);
    if (st == FR_OK && x.n_ext) st = fr_atomic_commit(&df);
    if (st == FR_OK) st = fr_atomic_commit(&mf);
    fr_atomic_abort(&df);
    fr_atomic_abort(&mf);
    free(dir);
    free(data_path);
    export_done(&x);
    if (st != FR_OK) return fr_error_context(st, "saving model '%s'", path);
    return FR_OK;
}

/* Above this much initializer data the weights go to an external data file (protobuf's 2 GiB
 * message limit must never be reached, and ONNX tools handle external data well). */
#define TR_EXTERNAL_ABOVE ((uint64_t)1 << 30)
#define TR_EXTERNAL_MIN_TENSOR 1024 /* smaller tensors stay inline, as onnx.save does */

fr_status fr_train_save_model(const fr_graph *g, const char *path)
{
    uint64_t total = 0;
    for (int i = 0; i < g->n_initializers; i++) {
        const fr_tensor *c = g->values[g->initializers[i]].constant;
        if (c) total += c->nbytes;
    }
    if (total <= TR_EXTERNAL_ABOVE) return fr_onnx_save_file(g, path, NULL);
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base) + 6;
    char *name = fr_malloc(n, "external data name");
    if (!name) return FR_ERR_OOM;
    snprintf(name, n, "%s.data", base);
    fr_onnx_save_options o = {name, TR_EXTERNAL_MIN_TENSOR};
    fr_status st = fr_onnx_save_file(g, path, &o);
    free(name);
    return st;
}
