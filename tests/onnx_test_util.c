/* Helpers shared by the ONNX import/export tests (see onnx_test_util.h). */
#define _XOPEN_SOURCE 700 /* nftw */
#include "tests/onnx_test_util.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/harness.h"

static void **kept;
static int n_kept, cap_kept;

void *keep(void *p)
{
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    if (n_kept == cap_kept) {
        cap_kept = cap_kept ? cap_kept * 2 : 256;
        kept = realloc(kept, (size_t)cap_kept * sizeof *kept);
        CU_ASSERT_PTR_NOT_NULL_FATAL(kept);
    }
    kept[n_kept++] = p;
    return p;
}

void free_kept(void) /* also releases the arena itself */
{
    for (int i = 0; i < n_kept; i++) free(kept[i]);
    free(kept);
    kept = NULL;
    n_kept = cap_kept = 0;
}

char *kstr(const char *s) { return keep(strdup(s)); }

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

void rm_rf(const char *dir)
{
    if (dir && dir[0]) nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

void write_bytes(const char *path, const void *d, size_t n)
{
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(fwrite(d, 1, n, f), n);
    fclose(f);
}

/* ---- protobuf model builder ---- */

void mb_init(mbuild *b, int64_t opset)
{
    memset(b, 0, sizeof *b);
    onnx__model_proto__init(&b->m);
    onnx__graph_proto__init(&b->g);
    b->m.graph = &b->g;
    b->m.has_ir_version = 1;
    b->m.ir_version = 9;
    b->m.producer_name = "fp8run-test";
    for (int i = 0; i < 4; i++) {
        onnx__operator_set_id_proto__init(&b->os[i]);
        b->osp[i] = &b->os[i];
    }
    b->os[0].domain = "";
    b->os[0].has_version = 1;
    b->os[0].version = opset;
    b->m.n_opset_import = 1;
    b->m.opset_import = b->osp;
    b->g.name = "test_graph";
    b->g.node = b->node;
    b->g.initializer = b->init;
    b->g.input = b->in;
    b->g.output = b->out;
    b->g.value_info = b->vi;
}

char **split_names(const char *s, size_t *n)
{
    *n = 0;
    if (!s || !s[0]) return NULL;
    char **v = keep(calloc(32, sizeof *v));
    const char *p = s;
    for (;;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char *x = keep(calloc(len + 1, 1));
        memcpy(x, p, len);
        v[(*n)++] = x;
        if (!e) break;
        p = e + 1;
    }
    return v;
}

Onnx__NodeProto *mb_node(mbuild *b, const char *op, const char *name, const char *ins, const char *outs)
{
    Onnx__NodeProto *n = keep(calloc(1, sizeof *n));
    onnx__node_proto__init(n);
    n->op_type = op ? kstr(op) : NULL;
    n->name = name ? kstr(name) : NULL;
    n->input = split_names(ins, &n->n_input);
    n->output = split_names(outs, &n->n_output);
    n->attribute = keep(calloc(16, sizeof *n->attribute));
    b->node[b->g.n_node++] = n;
    return n;
}

Onnx__AttributeProto *node_attr(Onnx__NodeProto *n, const char *name, int type)
{
    Onnx__AttributeProto *a = keep(calloc(1, sizeof *a));
    onnx__attribute_proto__init(a);
    a->name = kstr(name);
    if (type) {
        a->has_type = 1;
        a->type = (Onnx__AttributeProto__AttributeType)type;
    }
    n->attribute[n->n_attribute++] = a;
    return a;
}

/* A tensor value info; *shape receives an empty shape with room for rank dims when rank >= 0. */
static Onnx__ValueInfoProto *vi_tensor(const char *name, int dt, int rank, Onnx__TensorShapeProto **shape)
{
    Onnx__ValueInfoProto *vi = keep(calloc(1, sizeof *vi));
    onnx__value_info_proto__init(vi);
    vi->name = kstr(name);
    Onnx__TypeProto *tp = keep(calloc(1, sizeof *tp));
    onnx__type_proto__init(tp);
    Onnx__TypeProto__Tensor *tt = keep(calloc(1, sizeof *tt));
    onnx__type_proto__tensor__init(tt);
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    tt->has_elem_type = 1;
    tt->elem_type = dt;
    vi->type = tp;
    if (rank < 0) return vi;
    Onnx__TensorShapeProto *sh = keep(calloc(1, sizeof *sh));
    onnx__tensor_shape_proto__init(sh);
    sh->dim = keep(calloc((size_t)rank + 1, sizeof *sh->dim));
    tt->shape = sh;
    *shape = sh;
    return vi;
}

static Onnx__TensorShapeProto__Dimension *add_dim(Onnx__TensorShapeProto *sh)
{
    Onnx__TensorShapeProto__Dimension *d = keep(calloc(1, sizeof *d));
    onnx__tensor_shape_proto__dimension__init(d);
    sh->dim[sh->n_dim++] = d;
    return d;
}

Onnx__ValueInfoProto *mk_vi(const char *name, int dt, const char *shape)
{
    size_t nd = 0;
    char **parts = shape ? split_names(shape, &nd) : NULL;
    Onnx__TensorShapeProto *sh = NULL;
    Onnx__ValueInfoProto *vi = vi_tensor(name, dt, shape ? (int)nd : -1, &sh);
    for (size_t i = 0; i < nd; i++) {
        Onnx__TensorShapeProto__Dimension *d = add_dim(sh);
        if (parts[i][0] >= '0' && parts[i][0] <= '9') {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
            d->dim_value = atoll(parts[i]);
        } else if (strcmp(parts[i], "?") != 0) {
            d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
            d->dim_param = parts[i];
        }
    }
    return vi;
}

Onnx__ValueInfoProto *mk_vi_dims(const char *name, int dt, int rank, const int64_t *dims)
{
    Onnx__TensorShapeProto *sh = NULL;
    Onnx__ValueInfoProto *vi = vi_tensor(name, dt, rank, &sh);
    for (int i = 0; i < rank; i++) {
        Onnx__TensorShapeProto__Dimension *d = add_dim(sh);
        d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        d->dim_value = dims[i];
    }
    return vi;
}

Onnx__TensorProto *mk_tensor(const char *name, int dt, int rank, const int64_t *dims)
{
    Onnx__TensorProto *t = keep(calloc(1, sizeof *t));
    onnx__tensor_proto__init(t);
    t->name = name ? kstr(name) : NULL;
    t->has_data_type = 1;
    t->data_type = dt;
    t->n_dims = (size_t)rank;
    t->dims = keep(calloc((size_t)rank + 1, sizeof(int64_t)));
    for (int i = 0; i < rank; i++) t->dims[i] = dims[i];
    return t;
}

void set_raw(Onnx__TensorProto *t, const void *d, size_t n)
{
    t->has_raw_data = 1;
    t->raw_data.len = n;
    t->raw_data.data = keep(calloc(n ? n : 1, 1));
    if (d && n) memcpy(t->raw_data.data, d, n);
}

void set_external(Onnx__TensorProto *t, const char *loc, const char *offset, const char *length)
{
    t->has_data_location = 1;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    t->external_data = keep(calloc(3, sizeof *t->external_data));
    const char *keys[3] = {"location", "offset", "length"}, *vals[3] = {loc, offset, length};
    for (int i = 0; i < 3; i++) {
        if (!vals[i]) continue;
        Onnx__StringStringEntryProto *kv = keep(calloc(1, sizeof *kv));
        onnx__string_string_entry_proto__init(kv);
        kv->key = kstr(keys[i]);
        kv->value = kstr(vals[i]);
        t->external_data[t->n_external_data++] = kv;
    }
}

void *mb_pack(mbuild *b, size_t *len)
{
    *len = onnx__model_proto__get_packed_size(&b->m);
    void *buf = keep(malloc(*len ? *len : 1));
    CU_ASSERT_EQUAL(onnx__model_proto__pack(&b->m, buf), *len);
    return buf;
}

void mb_save(mbuild *b, const char *path)
{
    size_t len;
    void *buf = mb_pack(b, &len);
    write_bytes(path, buf, len);
}
