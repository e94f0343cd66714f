/* ONNX import: build the IR graph from a decoded model (graph/onnx_decode.c decodes it,
 * graph/onnx_import_tensor.c its tensors). Ops are not resolved here (the passes do that), so
 * tools can show models with ops fp8run does not implement. */
#include "graph/onnx_io.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/name_map.h"
#include "graph/onnx_import_internal.h"
#include "graph/onnx_io_util.h"
#include "graph/onnx_record.h"
#include "graph/params.h"

static const char *norm_domain(const char *d)
{
    return (!d || strcmp(d, "ai.onnx") == 0) ? "" : d;
}

/* ---- value types ---- */

static fr_status dup_opt(const char *s, char **out)
{
    *out = NULL;
    if (!s) return FR_OK;
    *out = fr_strdup(s, "model string");
    return *out ? FR_OK : FR_ERR_OOM;
}

/* Apply a ValueInfoProto's type to a value. strict (graph inputs/outputs): a type fp8run
 * cannot represent is an error; otherwise (value_info hints) it is ignored. */
static fr_status apply_value_info(fr_value *v, const Onnx__ValueInfoProto *vi, const char *role,
                                  int strict)
{
    if (!v->doc_string && vi->doc_string) FR_TRY(dup_opt(vi->doc_string, &v->doc_string));
    const Onnx__TypeProto *tp = vi->type;
    if (!tp || tp->value_case == ONNX__TYPE_PROTO__VALUE__NOT_SET) return FR_OK;
    if (tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE) {
        if (!strict) return FR_OK;
        return fr_error(FR_ERR_UNSUPPORTED,
                        "%s '%s' is not a tensor (sequence, map, optional and sparse values are "
                        "not supported)", role, v->name);
    }
    const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
    fr_dtype dt = tt->has_elem_type ? (fr_dtype)tt->elem_type : FR_UNDEFINED;
    if (dt != FR_UNDEFINED && fr_dtype_size(dt) == 0) {
        if (!strict) return FR_OK;
        return fr_error(FR_ERR_UNSUPPORTED, "%s '%s' has element type %d (%s), not supported by fp8run",
                        role, v->name, (int)tt->elem_type, fr_dtype_name(dt));
    }
    const Onnx__TensorShapeProto *sh = tt->shape;
    if (sh && sh->n_dim > FR_MAX_RANK) {
        if (!strict) return FR_OK;
        return fr_error(FR_ERR_UNSUPPORTED, "%s '%s' has rank %zu, more than fp8run's maximum of %d",
                        role, v->name, sh->n_dim, FR_MAX_RANK);
    }
    v->dtype = dt;
    for (int d = 0; d < FR_MAX_RANK; d++) {
        free(v->dim_params[d]);
        v->dim_params[d] = NULL;
        v->dims[d] = -1;
    }
    v->rank = sh ? (int)sh->n_dim : -1;
    for (int d = 0; sh && d < (int)sh->n_dim; d++) {
        const Onnx__TensorShapeProto__Dimension *dim = sh->dim[d];
        if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
            v->dims[d] = dim->dim_value >= 0 ? dim->dim_value : -1;
        } else if (dim->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
                   dim->dim_param && dim->dim_param[0]) {
            FR_TRY(dup_opt(dim->dim_param, &v->dim_params[d]));
        }
    }
    return FR_OK;
}

/* ---- nodes ---- */

static fr_status copy_bytes_str(const ProtobufCBinaryData *b, char **out)
{
    *out = fr_malloc(b->len + 1, "attribute string");
    if (!*out) return FR_ERR_OOM;
    if (b->len) memcpy(*out, b->data, b->len);
    (*out)[b->len] = '\0';
    return FR_OK;
}

static int attr_type_of(const Onnx__AttributeProto *ap)
{
    if (ap->has_type) return (int)ap->type;
    /* IR version 1 files carry no type: infer it from the field that is set */
    if (ap->g || ap->n_graphs) return FR_ATTR_GRAPH;
    if (ap->t) return FR_ATTR_TENSOR;
    if (ap->n_floats) return FR_ATTR_FLOATS;
    if (ap->n_ints) return FR_ATTR_INTS;
    if (ap->n_strings) return FR_ATTR_STRINGS;
    if (ap->has_s) return FR_ATTR_STRING;
    if (ap->has_f) return FR_ATTR_FLOAT;
    if (ap->has_i) return FR_ATTR_INT;
    return FR_ATTR_UNDEFINED;
}

static fr_status attr_from_proto(const import_ctx *c, const char *node, const char *op,
                                 const Onnx__AttributeProto *ap, fr_attr *a)
{
    if (!ap->name || !ap->name[0])
        return fr_error(FR_ERR_PARSE, "node '%s' (%s): an attribute has no name", node, op);
    a->name = fr_strdup(ap->name, "attribute name");
    if (!a->name) return FR_ERR_OOM;
    if (ap->ref_attr_name && ap->ref_attr_name[0])
        return fr_error(FR_ERR_UNSUPPORTED,
                        "node '%s' (%s): attribute '%s' refers to function attribute '%s'; only "
                        "function bodies may do that", node, op, ap->name, ap->ref_attr_name);
    int type = attr_type_of(ap);
    switch (type) {
    case FR_ATTR_FLOAT: a->f = ap->f; break;
    case FR_ATTR_INT: a->i = ap->i; break;
    case FR_ATTR_STRING:
        FR_TRY(copy_bytes_str(&ap->s, &a->s));
        a->s_len = ap->s.len;
        break;
    case FR_ATTR_TENSOR: {
        if (!ap->t)
            return fr_error(FR_ERR_PARSE, "node '%s' (%s): TENSOR attribute '%s' holds no tensor", node,
                            op, ap->name);
        char what[512];
        snprintf(what, sizeof what, "node '%s' (%s) attribute '%s'", node, op, ap->name);
        FR_TRY(fr_onnx_tensor_from_proto(c, ap->t, what, &a->t, NULL));
        break;
    }
    case FR_ATTR_GRAPH:
    case 10: /* GRAPHS */
        return fr_error(FR_ERR_UNSUPPORTED,
                        "node '%s' (%s): attribute '%s' holds a subgraph; control flow with "
                        "subgraphs (If/Loop/Scan) is not supported", node, op, ap->name);
    case FR_ATTR_FLOATS:
    case FR_ATTR_INTS:
    case FR_ATTR_STRINGS: {
        size_t n = type == FR_ATTR_FLOATS ? ap->n_floats : type == FR_ATTR_INTS ? ap->n_ints : ap->n_strings;
        if (n > INT_MAX)
            return fr_error(FR_ERR_UNSUPPORTED, "node '%s' (%s): attribute '%s' has %zu values", node,
                            op, ap->name, n);
        if (type == FR_ATTR_FLOATS) {
            a->floats = fr_calloc(n ? n : 1, sizeof(float), "attribute floats");
            if (!a->floats) return FR_ERR_OOM;
            if (n) memcpy(a->floats, ap->floats, n * sizeof(float));
        } else if (type == FR_ATTR_INTS) {
            a->ints = fr_calloc(n ? n : 1, sizeof(int64_t), "attribute ints");
            if (!a->ints) return FR_ERR_OOM;
            if (n) memcpy(a->ints, ap->ints, n * sizeof(int64_t));
        } else {
            a->strings = fr_calloc(n ? n : 1, sizeof(char *), "attribute strings");
            if (!a->strings) return FR_ERR_OOM;
        }
        a->n = (int)n;
        a->type = (fr_attr_type)type; /* before filling strings: fr_attr_clear frees them */
        for (size_t k = 0; type == FR_ATTR_STRINGS && k < n; k++) {
            if (ap->strings[k].len && memchr(ap->strings[k].data, 0, ap->strings[k].len))
                return fr_error(FR_ERR_UNSUPPORTED,
                                "node '%s' (%s): attribute '%s' string %zu contains a NUL byte", node,
                                op, ap->name, k);
            FR_TRY(copy_bytes_str(&ap->strings[k], &a->strings[k]));
        }
        break;
    }
    case FR_ATTR_UNDEFINED:
        return fr_error(FR_ERR_PARSE, "node '%s' (%s): attribute '%s' has no type", node, op, ap->name);
    default:
        return fr_error(FR_ERR_UNSUPPORTED,
                        "node '%s' (%s): attribute '%s' has type %d (TENSORS, SPARSE_TENSOR(S) and "
                        "TYPE_PROTO(S) are not supported)", node, op, ap->name, type);
    }
    a->type = (fr_attr_type)type;
    return FR_OK;
}

static fr_status value_for(fr_graph *g, const char *name, int *vid)
{
    *vid = fr_graph_find_value(g, name);
    if (*vid >= 0) return FR_OK;
    return fr_graph_add_value(g, name, vid);
}

static fr_status import_node(import_ctx *c, const Onnx__NodeProto *np, size_t index)
{
    fr_graph *g = c->g;
    char autoname[160];
    const char *op = np->op_type ? np->op_type : "";
    const char *name = np->name;
    if (!name || !name[0]) {
        snprintf(autoname, sizeof autoname, "%s_%d", op, g->n_nodes);
        name = autoname;
    }
    if (!op[0]) return fr_error(FR_ERR_PARSE, "node '%s' (#%zu) has no op_type", name, index);
    const char *domain = norm_domain(np->domain);
    for (size_t f = 0; f < c->m->n_functions; f++) {
        const Onnx__FunctionProto *fn = c->m->functions[f];
        if (fn->name && strcmp(fn->name, op) == 0 && strcmp(norm_domain(fn->domain), domain) == 0)
            return fr_error(FR_ERR_UNSUPPORTED,
                            "node '%s' calls the model-local function '%s' (domain '%s'); local "
                            "functions are not supported (inline them when exporting)",
                            name, op, domain[0] ? domain : "ai.onnx");
    }
    if (np->n_input > INT_MAX || np->n_output > INT_MAX)
        return fr_error(FR_ERR_PARSE, "node '%s' (%s) has too many inputs or outputs", name, op);
    int *ids = fr_calloc(np->n_input + np->n_output + 1, sizeof(int), "node value ids");
    if (!ids) return FR_ERR_OOM;
    fr_status st = FR_OK;
    for (size_t i = 0; i < np->n_input + np->n_output && st == FR_OK; i++) {
        const char *vn = i < np->n_input ? np->input[i] : np->output[i - np->n_input];
        if (!vn || !vn[0])
            ids[i] = -1; /* an omitted optional input or output */
        else
            st = value_for(g, vn, &ids[i]);
    }
    int nid = -1;
    if (st == FR_OK)
        st = fr_graph_add_node(g, op, domain, name, (int)np->n_input, ids, (int)np->n_output,
                               ids + np->n_input, &nid);
    free(ids);
    if (st != FR_OK) return fr_error_context(st, "node '%s' (%s)", name, op);
    fr_node *nd = &g->nodes[nid];
    FR_TRY(dup_opt(np->doc_string, &nd->doc_string));
    FR_TRY(fr_onnx_record_node(nd, np));
    if (np->n_attribute) {
        nd->attrs = fr_calloc(np->n_attribute, sizeof(fr_attr), "node attributes");
        if (!nd->attrs) return FR_ERR_OOM;
    }
    if (np->n_attribute > INT_MAX) return fr_error(FR_ERR_PARSE, "node '%s' (%s) has too many attributes", name, op);
    /* duplicates through a hash set: a hostile node may carry millions of attributes */
    fr_name_map *seen = NULL;
    if (np->n_attribute > 1) FR_TRY(fr_name_map_new(&seen));
    for (size_t k = 0; k < np->n_attribute && st == FR_OK; k++) {
        const Onnx__AttributeProto *ap = np->attribute[k];
        if (seen && ap->name) {
            if (fr_name_map_get(seen, ap->name) >= 0) {
                st = fr_error(FR_ERR_PARSE, "node '%s' (%s): attribute '%s' is given twice", nd->name, op, ap->name);
                break;
            }
            st = fr_name_map_put(seen, ap->name, (int)k);
        }
        nd->n_attrs = (int)k + 1; /* counted first, so a half-built attribute is freed with the graph */
        if (st == FR_OK) st = attr_from_proto(c, nd->name, op, ap, &nd->attrs[k]);
    }
    fr_name_map_free(seen);
    return st;
}

/* ---- model ---- */

static fr_status import_opsets(fr_graph *g, const Onnx__ModelProto *m)
{
    if (!m->n_opset_import) return FR_OK;
    if (m->n_opset_import > INT_MAX) return fr_error(FR_ERR_PARSE, "the model imports too many opsets");
    g->opsets = fr_calloc(m->n_opset_import, sizeof(fr_opset), "opset imports");
    if (!g->opsets) return FR_ERR_OOM;
    fr_name_map *seen; /* domain -> index: linear in the number of imports */
    FR_TRY(fr_name_map_new(&seen));
    fr_status st = FR_OK;
    for (size_t i = 0; i < m->n_opset_import && st == FR_OK; i++) {
        const Onnx__OperatorSetIdProto *os = m->opset_import[i];
        const char *dom = norm_domain(os->domain);
        int64_t ver = os->has_version ? os->version : 0;
        int k = fr_name_map_get(seen, dom);
        if (k >= 0) {
            if (g->opsets[k].version != ver)
                st = fr_error(FR_ERR_PARSE, "opset of domain '%s' is imported twice, as %lld and %lld",
                              dom[0] ? dom : "ai.onnx", (long long)g->opsets[k].version, (long long)ver);
            continue; /* "" and "ai.onnx" both listed: one default domain */
        }
        /* no opset of ai.onnx is past FR_ONNX_MAX_OPSET yet: a larger one is a file we cannot
         * read as meant (its ops may mean something else) */
        if (!dom[0] && (ver < 1 || ver > FR_ONNX_MAX_OPSET)) {
            st = fr_error(FR_ERR_UNSUPPORTED, "the model imports opset %lld of ai.onnx; fp8run reads opsets 1 to %d",
                          (long long)ver, FR_ONNX_MAX_OPSET);
            break;
        }
        g->opsets[g->n_opsets].domain = fr_strdup(dom, "opset domain");
        if (!g->opsets[g->n_opsets].domain) st = FR_ERR_OOM;
        else st = fr_name_map_put(seen, g->opsets[g->n_opsets].domain, g->n_opsets);
        if (st == FR_OK) g->opsets[g->n_opsets++].version = ver;
    }
    fr_name_map_free(seen);
    return st;
}

static fr_status import_metadata(fr_graph *g, const Onnx__ModelProto *m)
{
    g->ir_version = m->has_ir_version ? m->ir_version : 0;
    g->model_version = m->has_model_version ? m->model_version : 0;
    FR_TRY(dup_opt(m->producer_name, &g->producer_name));
    FR_TRY(dup_opt(m->producer_version, &g->producer_version));
    FR_TRY(dup_opt(m->domain, &g->domain));
    FR_TRY(dup_opt(m->doc_string, &g->doc_string));
    FR_TRY(dup_opt(m->graph->name, &g->name));
    FR_TRY(dup_opt(m->graph->doc_string, &g->graph_doc_string));
    FR_TRY(fr_onnx_record_graph(g, m->graph));
    if (m->n_metadata_props) {
        g->metadata = fr_calloc(m->n_metadata_props, sizeof(fr_kv), "model metadata");
        if (!g->metadata) return FR_ERR_OOM;
    }
    for (size_t i = 0; i < m->n_metadata_props; i++) {
        const Onnx__StringStringEntryProto *kv = m->metadata_props[i];
        fr_kv *o = &g->metadata[g->n_metadata++];
        o->key = fr_strdup(kv->key ? kv->key : "", "metadata key");
        o->value = fr_strdup(kv->value ? kv->value : "", "metadata value");
        if (!o->key || !o->value) return FR_ERR_OOM;
    }
    return import_opsets(g, m);
}

static fr_status import_initializers(import_ctx *c, const Onnx__GraphProto *gp)
{
    fr_graph *g = c->g;
    if (gp->n_sparse_initializer) {
        const Onnx__SparseTensorProto *sp = gp->sparse_initializer[0];
        const char *nm = sp->values && sp->values->name ? sp->values->name : "?";
        return fr_error(FR_ERR_UNSUPPORTED, "sparse initializer '%s' is not supported", nm);
    }
    for (size_t i = 0; i < gp->n_initializer; i++) {
        const Onnx__TensorProto *tp = gp->initializer[i];
        if (!tp->name || !tp->name[0])
            return fr_error(FR_ERR_PARSE, "initializer #%zu has no name", i);
        char what[400];
        snprintf(what, sizeof what, "initializer '%s'", tp->name);
        int vid;
        if (fr_graph_find_value(g, tp->name) >= 0)
            return fr_error(FR_ERR_GRAPH, "%s is defined twice", what);
        FR_TRY(fr_graph_add_value(g, tp->name, &vid));
        fr_tensor *t;
        char *loc;
        FR_TRY(fr_onnx_tensor_from_proto(c, tp, what, &t, &loc));
        fr_status st = fr_graph_set_initializer(g, vid, t);
        if (st != FR_OK) {
            free(loc);
            return st;
        }
        fr_value *v = &g->values[vid];
        v->external_location = loc;
        FR_TRY(dup_opt(tp->doc_string, &v->doc_string));
        FR_TRY(fr_onnx_record_value(v, tp->metadata_props, tp->n_metadata_props));
    }
    return FR_OK;
}

static fr_status import_graph(import_ctx *c)
{
    fr_graph *g = c->g;
    const Onnx__GraphProto *gp = c->m->graph;
    FR_TRY(import_metadata(g, c->m));
    FR_TRY(import_initializers(c, gp));
    for (size_t i = 0; i < gp->n_input; i++) {
        const Onnx__ValueInfoProto *vi = gp->input[i];
        if (!vi->name || !vi->name[0]) return fr_error(FR_ERR_PARSE, "graph input #%zu has no name", i);
        int vid = fr_graph_find_value(g, vi->name);
        if (vid >= 0) {
            /* older exporters list initializers as inputs too: the initializer wins */
            if (g->values[vid].flags & FR_VAL_INITIALIZER) continue;
            return fr_error(FR_ERR_GRAPH, "graph input '%s' is listed twice", vi->name);
        }
        FR_TRY(fr_graph_add_value(g, vi->name, &vid));
        FR_TRY(apply_value_info(&g->values[vid], vi, "graph input", 1));
        FR_TRY(fr_graph_mark_input(g, vid));
    }
    for (size_t i = 0; i < gp->n_node; i++) FR_TRY(import_node(c, gp->node[i], i));
    for (size_t i = 0; i < gp->n_output; i++) {
        const Onnx__ValueInfoProto *vi = gp->output[i];
        if (!vi->name || !vi->name[0]) return fr_error(FR_ERR_PARSE, "graph output #%zu has no name", i);
        int vid;
        FR_TRY(value_for(g, vi->name, &vid));
        if (!g->values[vid].constant) FR_TRY(apply_value_info(&g->values[vid], vi, "graph output", 1));
        FR_TRY(fr_graph_mark_output(g, vid));
    }
    /* value_info: dtype/shape hints for values the graph uses; others are ignored */
    for (size_t i = 0; i < gp->n_value_info; i++) {
        const Onnx__ValueInfoProto *vi = gp->value_info[i];
        int vid = fr_graph_find_value(g, vi->name);
        if (vid >= 0) FR_TRY(fr_onnx_record_value(&g->values[vid], vi->metadata_props, vi->n_metadata_props));
        if (vid < 0 || g->values[vid].constant || (g->values[vid].flags & (FR_VAL_INPUT | FR_VAL_OUTPUT)))
            continue;
        FR_TRY(apply_value_info(&g->values[vid], vi, "value", 0));
    }
    /* structure is checked now, so a broken file fails at load time, not in a later pass */
    FR_TRY(fr_graph_toposort(g));
    for (int i = 0; i < g->n_outputs; i++) {
        const fr_value *v = &g->values[g->outputs[i]];
        if (v->producer < 0 && !(v->flags & (FR_VAL_INPUT | FR_VAL_INITIALIZER)))
            return fr_error(FR_ERR_GRAPH,
                            "graph output '%s' is produced by no node and is neither a graph input "
                            "nor an initializer", v->name);
    }
    return fr_params_select(g, NULL);
}

static fr_status import_bytes(const void *data, size_t len, const char *model_dir, const char *what,
                              const char *source_path, fr_graph **out)
{
    decoded_model dm;
    FR_TRY(fr_onnx_decode_model(data, len, what, &dm));
    fr_graph *g;
    fr_status st = fr_graph_new(&g);
    if (st != FR_OK) {
        fr_onnx_decoded_free(&dm);
        return st;
    }
    import_ctx c = {g, dm.m, model_dir};
    st = import_graph(&c);
    if (st == FR_OK) st = dup_opt(model_dir, &g->model_dir);
    if (st == FR_OK) st = dup_opt(source_path, &g->source_path);
    fr_onnx_decoded_free(&dm);
    if (st != FR_OK) {
        fr_graph_free(g);
        return fr_error_context(st, "model '%s'", what);
    }
    *out = g;
    return FR_OK;
}

fr_status fr_onnx_load_buffer(const void *data, size_t len, const char *model_dir,
                              const char *what, fr_graph **out)
{
    if (!out) return fr_error(FR_ERR_INVALID_ARG, "fr_onnx_load_buffer: out is NULL");
    *out = NULL;
    if (!what) what = "<memory>";
    if (!data && len) return fr_error(FR_ERR_INVALID_ARG, "fr_onnx_load_buffer: '%s' has no data", what);
    return import_bytes(data, len, model_dir, what, NULL, out);
}

fr_status fr_onnx_load_file(const char *path, fr_graph **out)
{
    if (!out) return fr_error(FR_ERR_INVALID_ARG, "fr_onnx_load_file: out is NULL");
    *out = NULL;
    if (!path || !path[0]) return fr_error(FR_ERR_INVALID_ARG, "fr_onnx_load_file: no path given");
    void *data;
    size_t len;
    FR_TRY(fr_onnx_read_file(path, &data, &len));
    char *dir = fr_onnx_dirname(path);
    if (!dir) {
        free(data);
        return FR_ERR_OOM;
    }
    fr_status st = import_bytes(data, len, dir, path, path, out);
    free(dir);
    free(data);
    return st;
}
