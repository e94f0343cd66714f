/* ONNX import/export: every tensor encoding and dtype, external data, graph features
 * (symbolic dims, optional inputs, attributes, value_info, metadata), structural round trips
 * of C-built graphs and of every fixture model (inline and external data), atomic and
 * symlink-safe saving, and a load of the exported files in onnxruntime when it is installed. */
#define _XOPEN_SOURCE 700 /* nftw */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph/onnx_io.h"
#include "ops/op.h"
#include "tests/harness.h"
#include "tests/onnx_test_util.h"

/* ---- small test utilities ---- */

static long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

static int streq0(const char *a, const char *b)
{
    if (!a || !b) return a == b || (!a && b && !b[0]) || (!b && a && !a[0]);
    return strcmp(a, b) == 0;
}

/* ---- dtypes ---- */

static const fr_dtype all_dtypes[] = {FR_F32, FR_U8, FR_I8, FR_U16, FR_I16, FR_I32,
                                      FR_I64, FR_BOOL, FR_F16, FR_F64, FR_U32, FR_U64,
                                      FR_BF16, FR_F8E4M3, FR_F8E4M3FNUZ, FR_F8E5M2, FR_F8E5M2FNUZ};
#define N_DTYPES ((int)(sizeof all_dtypes / sizeof all_dtypes[0]))

static void random_bytes(fr_rng *r, fr_dtype dt, unsigned char *b, size_t nbytes)
{
    for (size_t i = 0; i < nbytes; i++) b[i] = (unsigned char)(fr_rng_uniform(r) * 256.0);
    if (dt == FR_BOOL)
        for (size_t i = 0; i < nbytes; i++) b[i] &= 1;
}

/* the element values as ONNX's typed fields carry them */
static void set_typed(Onnx__TensorProto *t, fr_dtype dt, const unsigned char *b, int64_t n)
{
    size_t es = fr_dtype_size(dt);
    switch (dt) {
    case FR_F32:
        t->float_data = keep(malloc((size_t)n * 4 + 1));
        memcpy(t->float_data, b, (size_t)n * 4);
        t->n_float_data = (size_t)n;
        return;
    case FR_I64:
        t->int64_data = keep(malloc((size_t)n * 8 + 1));
        memcpy(t->int64_data, b, (size_t)n * 8);
        t->n_int64_data = (size_t)n;
        return;
    case FR_F64:
        t->double_data = keep(malloc((size_t)n * 8 + 1));
        memcpy(t->double_data, b, (size_t)n * 8);
        t->n_double_data = (size_t)n;
        return;
    case FR_U64:
    case FR_U32:
        t->uint64_data = keep(malloc((size_t)n * 8 + 1));
        for (int64_t i = 0; i < n; i++) {
            uint32_t u32;
            memcpy(&u32, b + i * 4, 4);
            if (dt == FR_U64) memcpy(&t->uint64_data[i], b + i * 8, 8);
            else t->uint64_data[i] = u32;
        }
        t->n_uint64_data = (size_t)n;
        return;
    default:
        break;
    }
    t->int32_data = keep(malloc((size_t)n * 4 + 1));
    for (int64_t i = 0; i < n; i++) {
        int32_t v;
        if (es == 4) {
            memcpy(&v, b + i * 4, 4);
        } else if (es == 2) {
            uint16_t u;
            int16_t s;
            memcpy(&u, b + i * 2, 2);
            memcpy(&s, b + i * 2, 2);
            v = dt == FR_I16 ? s : u; /* float16/bfloat16: the bit pattern as uint16 */
        } else {
            v = dt == FR_I8 ? (int32_t)(int8_t)b[i] : (int32_t)b[i];
        }
        t->int32_data[i] = v;
    }
    t->n_int32_data = (size_t)n;
}

static const int64_t dt_dims[2] = {3, 5};
#define DT_NUMEL 15

/* One model with an initializer per dtype in the given encoding (0 raw, 1 typed, 2 external,
 * all in one data file at increasing offsets); y_<i> = Identity(w_<i>). */
static void build_dtype_model(mbuild *b, int enc, unsigned char data[][DT_NUMEL * 8],
                              const char *dir)
{
    mb_init(b, 19);
    FILE *f = NULL;
    long off = 0;
    if (enc == 2) {
        char p[600];
        snprintf(p, sizeof p, "%s/weights.bin", dir);
        f = fopen(p, "wb");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        fwrite("pad", 1, 3, f); /* first tensor at a non-zero offset */
        off = 3;
    }
    for (int i = 0; i < N_DTYPES; i++) {
        fr_dtype dt = all_dtypes[i];
        size_t nb = DT_NUMEL * fr_dtype_size(dt);
        char wn[32], yn[32];
        snprintf(wn, sizeof wn, "w_%s", fr_dtype_name(dt));
        snprintf(yn, sizeof yn, "y_%s", fr_dtype_name(dt));
        Onnx__TensorProto *t = mk_tensor(wn, dt, 2, dt_dims);
        if (enc == 0) set_raw(t, data[i], nb);
        if (enc == 1) set_typed(t, dt, data[i], DT_NUMEL);
        if (enc == 2) {
            char so[32], sl[32];
            snprintf(so, sizeof so, "%ld", off);
            snprintf(sl, sizeof sl, "%zu", nb);
            set_external(t, "weights.bin", so, i % 2 ? sl : NULL); /* length optional */
            CU_ASSERT_EQUAL(fwrite(data[i], 1, nb, f), nb);
            off += (long)nb;
        }
        b->init[b->g.n_initializer++] = t;
        mb_node(b, "Identity", NULL, wn, yn);
        b->out[b->g.n_output++] = mk_vi(yn, dt, "3,5");
    }
    if (f) fclose(f);
}

static void check_dtype_graph(const fr_graph *g, unsigned char data[][DT_NUMEL * 8], int external)
{
    CU_ASSERT_EQUAL_FATAL(g->n_initializers, N_DTYPES);
    for (int i = 0; i < N_DTYPES; i++) {
        const fr_value *v = &g->values[g->initializers[i]];
        const fr_tensor *t = v->constant;
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        CU_ASSERT_EQUAL(t->dtype, all_dtypes[i]);
        CU_ASSERT_EQUAL(t->rank, 2);
        CU_ASSERT_EQUAL(t->dims[0], 3);
        CU_ASSERT_EQUAL(t->dims[1], 5);
        CU_ASSERT_EQUAL(t->nbytes, DT_NUMEL * fr_dtype_size(all_dtypes[i]));
        if (memcmp(t->data, data[i], t->nbytes) != 0) {
            fprintf(stderr, "\n  bytes differ for dtype %s\n", fr_dtype_name(all_dtypes[i]));
            CU_FAIL("initializer bytes differ");
        }
        if (external) CU_ASSERT(v->external_location && strcmp(v->external_location, "weights.bin") == 0);
        if (!external) CU_ASSERT_PTR_NULL(v->external_location);
    }
}

/* Every encoding and every dtype: same bytes in; export writes them back as identical
 * raw_data; re-import gives them again. */
static void test_encodings_all_dtypes(void)
{
    fr_rng r = fr_test_rng("encodings_all_dtypes");
    static unsigned char data[N_DTYPES][DT_NUMEL * 8];
    for (int i = 0; i < N_DTYPES; i++) random_bytes(&r, all_dtypes[i], data[i], sizeof data[i]);
    char dir[512];
    fr_test_tmpdir(dir, sizeof dir);
    CU_ASSERT_FATAL(dir[0] != 0);
    for (int enc = 0; enc < 3; enc++) {
        mbuild b;
        build_dtype_model(&b, enc, data, dir);
        char path[600];
        snprintf(path, sizeof path, "%s/model_%d.onnx", dir, enc);
        mb_save(&b, path);
        fr_graph *g;
        FR_ASSERT_OK(fr_onnx_load_file(path, &g));
        check_dtype_graph(g, data, enc == 2);
        /* export: all initializers inline as raw_data holding the same bytes */
        void *buf;
        size_t len;
        FR_ASSERT_OK(fr_onnx_save_buffer(g, &buf, &len));
        Onnx__ModelProto *m = onnx__model_proto__unpack(NULL, len, buf);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        CU_ASSERT_EQUAL_FATAL(m->graph->n_initializer, (size_t)N_DTYPES);
        for (int i = 0; i < N_DTYPES; i++) {
            const Onnx__TensorProto *t = m->graph->initializer[i];
            CU_ASSERT(t->has_raw_data);
            CU_ASSERT_EQUAL(t->n_float_data + t->n_int32_data + t->n_int64_data, 0);
            CU_ASSERT_EQUAL(t->data_type, (int)all_dtypes[i]);
            CU_ASSERT_EQUAL_FATAL(t->raw_data.len, DT_NUMEL * fr_dtype_size(all_dtypes[i]));
            CU_ASSERT(memcmp(t->raw_data.data, data[i], t->raw_data.len) == 0);
        }
        CU_ASSERT(m->ir_version >= 9); /* float8 types need IR 9 */
        onnx__model_proto__free_unpacked(m, NULL);
        fr_graph *g2;
        FR_ASSERT_OK(fr_onnx_load_buffer(buf, len, NULL, "<exported>", &g2));
        check_dtype_graph(g2, data, 0);
        free(buf);
        fr_graph_free(g2);
        fr_graph_free(g);
    }
    rm_rf(dir);
    free_kept();
}

/* The ONNX spec's typed-field conventions: bool nonzero, sign-extended 16-bit float bits,
 * empty tensors with no data, scalars. */
static void test_typed_field_details(void)
{
    mbuild b;
    mb_init(&b, 17);
    int64_t d4[1] = {4}, d0[2] = {0, 3};
    Onnx__TensorProto *h = mk_tensor("half", FR_F16, 1, d4);
    int32_t hv[4] = {0x3c00, -16384 /* 0xc000 sign-extended = -2.0 */, 0x7bff, 0};
    h->int32_data = hv;
    h->n_int32_data = 4;
    Onnx__TensorProto *e = mk_tensor("empty", FR_F32, 2, d0); /* no data at all */
    Onnx__TensorProto *s = mk_tensor("scalar", FR_I64, 0, NULL);
    int64_t sv = -1234567890123LL;
    s->int64_data = &sv;
    s->n_int64_data = 1;
    Onnx__TensorProto *u = mk_tensor("u32", FR_U32, 1, d4);
    uint64_t uv[4] = {0, 1, 4294967295ull, 7};
    u->uint64_data = uv;
    u->n_uint64_data = 4;
    b.init[b.g.n_initializer++] = h;
    b.init[b.g.n_initializer++] = e;
    b.init[b.g.n_initializer++] = s;
    b.init[b.g.n_initializer++] = u;
    b.out[b.g.n_output++] = mk_vi("half", FR_F16, "4");
    size_t len;
    void *buf = mb_pack(&b, &len);
    fr_graph *g;
    FR_ASSERT_OK(fr_onnx_load_buffer(buf, len, NULL, "typed", &g));
    const fr_tensor *th = g->values[fr_graph_find_value(g, "half")].constant;
    const uint16_t *hb = th->data;
    CU_ASSERT_EQUAL(hb[0], 0x3c00);
    CU_ASSERT_EQUAL(hb[1], 0xc000);
    CU_ASSERT_EQUAL(fr_f16_to_f32(hb[1]), -2.0f);
    CU_ASSERT_EQUAL(hb[2], 0x7bff);
    const fr_tensor *te = g->values[fr_graph_find_value(g, "empty")].constant;
    CU_ASSERT_EQUAL(te->rank, 2);
    CU_ASSERT_EQUAL(te->nbytes, 0);
    const fr_tensor *ts = g->values[fr_graph_find_value(g, "scalar")].constant;
    CU_ASSERT_EQUAL(ts->rank, 0);
    CU_ASSERT_EQUAL(((int64_t *)ts->data)[0], sv);
    const fr_tensor *tu = g->values[fr_graph_find_value(g, "u32")].constant;
    CU_ASSERT_EQUAL(((uint32_t *)tu->data)[2], 4294967295u);
    /* the graph output is an initializer: it is still an output, with the initializer's type */
    CU_ASSERT_EQUAL(g->n_outputs, 1);
    CU_ASSERT_EQUAL(g->values[g->outputs[0]].dtype, FR_F16);
    fr_graph_free(g);
    free_kept();
}

/* ---- structural graph comparison ---- */

static int attr_equal(const fr_attr *a, const fr_attr *b)
{
    if (strcmp(a->name, b->name) != 0 || a->type != b->type) return 0;
    switch (a->type) {
    case FR_ATTR_FLOAT: return memcmp(&a->f, &b->f, sizeof a->f) == 0;
    case FR_ATTR_INT: return a->i == b->i;
    case FR_ATTR_STRING: return a->s_len == b->s_len && memcmp(a->s, b->s, a->s_len) == 0;
    case FR_ATTR_TENSOR:
        return a->t->dtype == b->t->dtype && a->t->rank == b->t->rank &&
               memcmp(a->t->dims, b->t->dims, sizeof(int64_t) * (size_t)a->t->rank) == 0 &&
               a->t->nbytes == b->t->nbytes && (a->t->nbytes == 0 || memcmp(a->t->data, b->t->data, a->t->nbytes) == 0);
    case FR_ATTR_FLOATS:
        return a->n == b->n && (a->n == 0 || memcmp(a->floats, b->floats, sizeof(float) * (size_t)a->n) == 0);
    case FR_ATTR_INTS:
        return a->n == b->n && (a->n == 0 || memcmp(a->ints, b->ints, sizeof(int64_t) * (size_t)a->n) == 0);
    case FR_ATTR_STRINGS:
        if (a->n != b->n) return 0;
        for (int i = 0; i < a->n; i++)
            if (strcmp(a->strings[i], b->strings[i]) != 0) return 0;
        return 1;
    default: return 0;
    }
}

static const char *vname(const fr_graph *g, int vid) { return vid >= 0 ? g->values[vid].name : ""; }

static int value_type_equal(const fr_value *a, const fr_value *b)
{
    if (a->dtype != b->dtype || a->rank != b->rank) return 0;
    for (int d = 0; d < a->rank; d++) {
        if (!streq0(a->dim_params[d], b->dim_params[d])) return 0;
        if (!a->dim_params[d] && a->dims[d] != b->dims[d]) return 0;
    }
    return 1;
}

#define GCHECK(cond, ...)                                      \
    do {                                                       \
        if (!(cond)) {                                         \
            fprintf(stderr, "\n  graph mismatch: " __VA_ARGS__); \
            fprintf(stderr, "\n");                             \
            bad++;                                             \
        }                                                      \
    } while (0)

/* Same nodes (order, names, op types, domains, inputs/outputs, attributes), graph inputs and
 * outputs with types, initializers with identical bytes, opsets and metadata. */
static int graph_diff(const fr_graph *a, const fr_graph *b)
{
    int bad = 0;
    GCHECK(a->n_nodes == b->n_nodes, "node count %d vs %d", a->n_nodes, b->n_nodes);
    for (int i = 0; i < a->n_nodes && i < b->n_nodes && bad < 10; i++) {
        const fr_node *x = &a->nodes[i], *y = &b->nodes[i];
        GCHECK(strcmp(x->name, y->name) == 0, "node %d name '%s' vs '%s'", i, x->name, y->name);
        GCHECK(strcmp(x->op_type, y->op_type) == 0, "node '%s' op", x->name);
        GCHECK(strcmp(x->domain, y->domain) == 0, "node '%s' domain", x->name);
        GCHECK(streq0(x->doc_string, y->doc_string), "node '%s' doc_string", x->name);
        GCHECK(x->n_inputs == y->n_inputs && x->n_outputs == y->n_outputs, "node '%s' arity", x->name);
        for (int k = 0; k < x->n_inputs && k < y->n_inputs; k++)
            GCHECK(strcmp(vname(a, x->inputs[k]), vname(b, y->inputs[k])) == 0, "node '%s' input %d",
                   x->name, k);
        for (int k = 0; k < x->n_outputs && k < y->n_outputs; k++)
            GCHECK(strcmp(vname(a, x->outputs[k]), vname(b, y->outputs[k])) == 0,
                   "node '%s' output %d", x->name, k);
        GCHECK(x->n_attrs == y->n_attrs, "node '%s' attribute count", x->name);
        for (int k = 0; k < x->n_attrs; k++) {
            const fr_attr *ya = fr_node_attr(y, x->attrs[k].name);
            GCHECK(ya && attr_equal(&x->attrs[k], ya), "node '%s' attribute '%s'", x->name,
                   x->attrs[k].name);
        }
    }
    GCHECK(a->n_inputs == b->n_inputs, "graph input count %d vs %d", a->n_inputs, b->n_inputs);
    for (int i = 0; i < a->n_inputs && i < b->n_inputs; i++) {
        const fr_value *x = &a->values[a->inputs[i]], *y = &b->values[b->inputs[i]];
        GCHECK(strcmp(x->name, y->name) == 0 && value_type_equal(x, y), "graph input '%s'", x->name);
    }
    GCHECK(a->n_outputs == b->n_outputs, "graph output count");
    for (int i = 0; i < a->n_outputs && i < b->n_outputs; i++) {
        const fr_value *x = &a->values[a->outputs[i]], *y = &b->values[b->outputs[i]];
        GCHECK(strcmp(x->name, y->name) == 0 && value_type_equal(x, y), "graph output '%s'", x->name);
    }
    GCHECK(a->n_initializers == b->n_initializers, "initializer count %d vs %d", a->n_initializers,
           b->n_initializers);
    for (int i = 0; i < a->n_initializers && i < b->n_initializers; i++) {
        const fr_value *x = &a->values[a->initializers[i]], *y = &b->values[b->initializers[i]];
        const fr_tensor *s = x->constant, *t = y->constant;
        GCHECK(strcmp(x->name, y->name) == 0, "initializer %d name '%s' vs '%s'", i, x->name, y->name);
        GCHECK(s && t && s->dtype == t->dtype && s->rank == t->rank && s->nbytes == t->nbytes &&
                   memcmp(s->dims, t->dims, sizeof(int64_t) * (size_t)s->rank) == 0 &&
                   (s->nbytes == 0 || memcmp(s->data, t->data, s->nbytes) == 0),
               "initializer '%s' type/shape/bytes", x->name);
    }
    GCHECK(a->n_opsets == b->n_opsets, "opset count");
    for (int i = 0; i < a->n_opsets && i < b->n_opsets; i++)
        GCHECK(strcmp(a->opsets[i].domain, b->opsets[i].domain) == 0 &&
                   a->opsets[i].version == b->opsets[i].version, "opset %d", i);
    GCHECK(a->ir_version == b->ir_version && a->model_version == b->model_version, "versions");
    GCHECK(streq0(a->producer_name, b->producer_name) && streq0(a->producer_version, b->producer_version),
           "producer");
    GCHECK(streq0(a->domain, b->domain) && streq0(a->doc_string, b->doc_string) &&
               streq0(a->graph_doc_string, b->graph_doc_string), "domain/doc strings");
    GCHECK(!a->name || streq0(a->name, b->name), "graph name '%s' vs '%s'", a->name, b->name);
    GCHECK(a->n_metadata == b->n_metadata, "metadata count");
    for (int i = 0; i < a->n_metadata && i < b->n_metadata; i++)
        GCHECK(strcmp(a->metadata[i].key, b->metadata[i].key) == 0 &&
                   strcmp(a->metadata[i].value, b->metadata[i].value) == 0, "metadata %d", i);
    return bad;
}

/* No temporary files left behind by an atomic save. */
static int count_temp_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strstr(e->d_name, ".tmp.")) n++;
    closedir(d);
    return n;
}

/* save (inline and with external data), reload, compare with g */
static void roundtrip_check(const fr_graph *g, const char *dir, const char *tag, size_t ext_min)
{
    char p1[700], p2[700], data[700];
    snprintf(p1, sizeof p1, "%s/%s_inline.onnx", dir, tag);
    snprintf(p2, sizeof p2, "%s/%s_ext.onnx", dir, tag);
    snprintf(data, sizeof data, "%s/%s_ext.data", dir, tag);
    FR_ASSERT_OK(fr_onnx_save_file(g, p1, NULL));
    fr_graph *a;
    FR_ASSERT_OK(fr_onnx_load_file(p1, &a));
    CU_ASSERT_EQUAL(graph_diff(g, a), 0);
    for (int i = 0; i < a->n_initializers; i++)
        CU_ASSERT_PTR_NULL(a->values[a->initializers[i]].external_location);
    fr_graph_free(a);

    char dname[100];
    snprintf(dname, sizeof dname, "%s_ext.data", tag);
    fr_onnx_save_options opt = {dname, ext_min};
    FR_ASSERT_OK(fr_onnx_save_file(g, p2, &opt));
    fr_graph *b;
    FR_ASSERT_OK(fr_onnx_load_file(p2, &b));
    CU_ASSERT_EQUAL(graph_diff(g, b), 0);
    /* exactly the large initializers went to the data file, back to back */
    long expect = 0;
    int n_ext = 0;
    for (int i = 0; i < b->n_initializers; i++) {
        const fr_value *v = &b->values[b->initializers[i]];
        int big = v->constant->nbytes > 0 && v->constant->nbytes >= ext_min;
        if (big) {
            expect += (long)v->constant->nbytes;
            n_ext++;
            CU_ASSERT(v->external_location && strcmp(v->external_location, dname) == 0);
        } else {
            CU_ASSERT_PTR_NULL(v->external_location);
        }
    }
    CU_ASSERT_EQUAL(file_size(data), n_ext ? expect : -1);
    fr_graph_free(b);
    CU_ASSERT_EQUAL(count_temp_files(dir), 0);
}

/* ---- graph features ---- */

static void test_graph_features(void)
{
    mbuild b;
    mb_init(&b, 17);
    /* "" and "ai.onnx" both name the default domain; a custom domain too */
    b.os[1].domain = "ai.onnx";
    b.os[1].has_version = 1;
    b.os[1].version = 17;
    b.os[2].domain = "com.example";
    b.os[2].has_version = 1;
    b.os[2].version = 3;
    b.m.n_opset_import = 3;
    b.m.model_version = 42;
    b.m.has_model_version = 1;
    b.m.producer_version = "1.2.3";
    b.m.domain = "org.test";
    b.m.doc_string = "model doc";
    b.g.doc_string = "graph doc";
    Onnx__StringStringEntryProto kv1 = ONNX__STRING_STRING_ENTRY_PROTO__INIT, *kvp[1] = {&kv1};
    kv1.key = "author";
    kv1.value = "tests";
    b.m.n_metadata_props = 1;
    b.m.metadata_props = kvp;
    int64_t wd[2] = {4, 3};
    float w[12];
    for (int i = 0; i < 12; i++) w[i] = (float)i * 0.5f;
    Onnx__TensorProto *wt = mk_tensor("W", FR_F32, 2, wd);
    set_raw(wt, w, sizeof w);
    wt->doc_string = "weights";
    b.init[b.g.n_initializer++] = wt;
    /* old exporters list initializers among the inputs: the initializer wins */
    b.in[b.g.n_input++] = mk_vi("x", FR_F32, "batch,?,4");
    b.in[b.g.n_input++] = mk_vi("W", FR_F32, "4,3");
    /* nodes out of order (toposort fixes that), anonymous, with omitted optional input/output */
    mb_node(&b, "Relu", NULL, "h", "r");
    Onnx__NodeProto *mm = mb_node(&b, "MatMul", "mm", "x,W", "h");
    mm->domain = "ai.onnx";
    mm->doc_string = "node doc";
    mb_node(&b, "Clip", NULL, "r,,", "c");
    mb_node(&b, "Dropout", "drop", "c", "d,");
    mb_node(&b, "Custom", "cu", "d", "z")->domain = "com.example";
    b.out[b.g.n_output++] = mk_vi("z", FR_F32, "batch,?,3");
    b.vi[b.g.n_value_info++] = mk_vi("h", FR_F32, "batch,?,3");
    b.vi[b.g.n_value_info++] = mk_vi("not_in_graph", FR_F32, "1");
    size_t len;
    void *buf = mb_pack(&b, &len);
    fr_graph *g;
    FR_ASSERT_OK(fr_onnx_load_buffer(buf, len, NULL, "features", &g));

    CU_ASSERT_EQUAL(g->n_opsets, 2);
    CU_ASSERT_EQUAL(fr_graph_opset(g, ""), 17);
    CU_ASSERT_EQUAL(fr_graph_opset(g, "com.example"), 3);
    CU_ASSERT_EQUAL(g->n_inputs, 1);
    const fr_value *x = &g->values[g->inputs[0]];
    CU_ASSERT_STRING_EQUAL(x->name, "x");
    CU_ASSERT_EQUAL(x->flags & FR_VAL_INPUT, FR_VAL_INPUT);
    CU_ASSERT_EQUAL(x->rank, 3);
    CU_ASSERT_EQUAL(x->dims[0], -1);
    CU_ASSERT_STRING_EQUAL(x->dim_params[0], "batch");
    CU_ASSERT_EQUAL(x->dims[1], -1);
    CU_ASSERT_PTR_NULL(x->dim_params[1]);
    CU_ASSERT_EQUAL(x->dims[2], 4);
    int wid = fr_graph_find_value(g, "W");
    CU_ASSERT_EQUAL(g->values[wid].flags & (FR_VAL_INPUT | FR_VAL_INITIALIZER), FR_VAL_INITIALIZER);
    CU_ASSERT_STRING_EQUAL(g->values[wid].doc_string, "weights");
    const fr_value *h = &g->values[fr_graph_find_value(g, "h")];
    CU_ASSERT_EQUAL(h->dtype, FR_F32);
    CU_ASSERT_EQUAL(h->rank, 3);
    CU_ASSERT_STRING_EQUAL(h->dim_params[0], "batch");
    CU_ASSERT_EQUAL(h->dims[2], 3);
    CU_ASSERT_EQUAL(fr_graph_find_value(g, "not_in_graph"), -1);
    /* toposorted: MatMul first; anonymous nodes are named by model index */
    CU_ASSERT_EQUAL_FATAL(g->n_nodes, 5);
    CU_ASSERT_STRING_EQUAL(g->nodes[0].name, "mm");
    CU_ASSERT_STRING_EQUAL(g->nodes[0].domain, "");
    CU_ASSERT_STRING_EQUAL(g->nodes[0].doc_string, "node doc");
    CU_ASSERT_STRING_EQUAL(g->nodes[1].name, "Relu_0");
    CU_ASSERT_STRING_EQUAL(g->nodes[2].name, "Clip_2");
    CU_ASSERT_EQUAL(g->nodes[2].n_inputs, 3);
    CU_ASSERT_EQUAL(g->nodes[2].inputs[1], -1);
    CU_ASSERT_EQUAL(g->nodes[2].inputs[2], -1);
    CU_ASSERT_EQUAL(g->nodes[3].n_outputs, 2);
    CU_ASSERT_EQUAL(g->nodes[3].outputs[1], -1);
    CU_ASSERT_STRING_EQUAL(g->nodes[4].domain, "com.example");
    CU_ASSERT_PTR_NULL(g->nodes[0].op); /* ops are not resolved at import */
    CU_ASSERT_EQUAL(g->ir_version, 9);
    CU_ASSERT_EQUAL(g->model_version, 42);
    CU_ASSERT_STRING_EQUAL(g->producer_name, "fp8run-test");
    CU_ASSERT_STRING_EQUAL(g->producer_version, "1.2.3");
    CU_ASSERT_STRING_EQUAL(g->domain, "org.test");
    CU_ASSERT_STRING_EQUAL(g->doc_string, "model doc");
    CU_ASSERT_STRING_EQUAL(g->graph_doc_string, "graph doc");
    CU_ASSERT_STRING_EQUAL(g->name, "test_graph");
    CU_ASSERT_EQUAL_FATAL(g->n_metadata, 1);
    CU_ASSERT_STRING_EQUAL(g->metadata[0].value, "tests");

    /* the custom op is unknown to fp8run: import works, resolving reports it */
    CU_ASSERT_EQUAL(fr_graph_resolve_ops(g), FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "Custom"));

    char dir[512];
    fr_test_tmpdir(dir, sizeof dir);
    roundtrip_check(g, dir, "features", 16);
    /* the exported file lists the intermediate type hint and the symbolic dims */
    char p[700];
    snprintf(p, sizeof p, "%s/features_inline.onnx", dir);
    fr_graph *g2;
    FR_ASSERT_OK(fr_onnx_load_file(p, &g2));
    const fr_value *h2 = &g2->values[fr_graph_find_value(g2, "h")];
    CU_ASSERT(value_type_equal(h, h2));
    CU_ASSERT_STRING_EQUAL(g2->source_path, p);
    CU_ASSERT_STRING_EQUAL(g2->model_dir, dir);
    fr_graph_free(g2);
    fr_graph_free(g);
    rm_rf(dir);
    free_kept();
}

/* Every attribute type, including IR-v1 style attributes without a type field. */
static void test_attributes(void)
{
    mbuild b;
    mb_init(&b, 17);
    b.in[b.g.n_input++] = mk_vi("x", FR_F32, "2");
    Onnx__NodeProto *n = mb_node(&b, "Custom", "n", "x", "y");
    n->domain = "com.example";
    b.os[1].domain = "com.example";
    b.os[1].has_version = 1;
    b.os[1].version = 1;
    b.m.n_opset_import = 2;
    Onnx__AttributeProto *a;
    a = node_attr(n, "f", FR_ATTR_FLOAT);
    a->has_f = 1;
    a->f = -1.25f;
    a = node_attr(n, "i", FR_ATTR_INT);
    a->has_i = 1;
    a->i = -(1LL << 40);
    a = node_attr(n, "s", FR_ATTR_STRING);
    a->has_s = 1;
    a->s.data = (uint8_t *)"ab\0cd";
    a->s.len = 5; /* bytes with a NUL inside survive */
    a = node_attr(n, "t", FR_ATTR_TENSOR);
    int64_t td[1] = {3};
    a->t = mk_tensor(NULL, FR_BF16, 1, td);
    uint16_t bf[3] = {0x3f80, 0xc000, 0x7fc0};
    set_raw(a->t, bf, sizeof bf);
    a = node_attr(n, "fs", FR_ATTR_FLOATS);
    float fs[3] = {1.5f, -0.0f, 3e38f};
    a->floats = fs;
    a->n_floats = 3;
    a = node_attr(n, "is", FR_ATTR_INTS);
    int64_t is[4] = {0, -1, INT64_MAX, INT64_MIN};
    a->ints = is;
    a->n_ints = 4;
    a = node_attr(n, "ss", FR_ATTR_STRINGS);
    ProtobufCBinaryData ss[2] = {{3, (uint8_t *)"abc"}, {0, (uint8_t *)""}};
    a->strings = ss;
    a->n_strings = 2;
    a = node_attr(n, "empty_ints", FR_ATTR_INTS);
    a = node_attr(n, "old_int", 0); /* no type field: inferred */
    a->has_i = 1;
    a->i = 7;
    a = node_attr(n, "old_floats", 0);
    a->floats = fs;
    a->n_floats = 2;
    b.out[b.g.n_output++] = mk_vi("y", FR_F32, "2");
    size_t len;
    void *buf = mb_pack(&b, &len);
    fr_graph *g;
    FR_ASSERT_OK(fr_onnx_load_buffer(buf, len, NULL, "attrs", &g));
    const fr_node *nd = &g->nodes[0];
    CU_ASSERT_EQUAL_FATAL(nd->n_attrs, 10);
    float f;
    FR_ASSERT_OK(fr_node_attr_float(nd, "f", 0, &f));
    CU_ASSERT_EQUAL(f, -1.25f);
    int64_t iv;
    FR_ASSERT_OK(fr_node_attr_int(nd, "i", 0, &iv));
    CU_ASSERT_EQUAL(iv, -(1LL << 40));
    const fr_attr *as = fr_node_attr(nd, "s");
    CU_ASSERT_EQUAL(as->s_len, 5);
    CU_ASSERT(memcmp(as->s, "ab\0cd", 5) == 0);
    const fr_attr *at = fr_node_attr(nd, "t");
    CU_ASSERT_EQUAL(at->t->dtype, FR_BF16);
    CU_ASSERT(memcmp(at->t->data, bf, sizeof bf) == 0);
    const fr_attr *af = fr_node_attr(nd, "fs");
    CU_ASSERT_EQUAL(af->n, 3);
    CU_ASSERT(memcmp(af->floats, fs, sizeof fs) == 0);
    int cnt;
    const int64_t *vals;
    FR_ASSERT_OK(fr_node_attr_ints(nd, "is", &cnt, &vals));
    CU_ASSERT_EQUAL(cnt, 4);
    CU_ASSERT_EQUAL(vals[2], INT64_MAX);
    CU_ASSERT_EQUAL(vals[3], INT64_MIN);
    const fr_attr *astr = fr_node_attr(nd, "ss");
    CU_ASSERT_EQUAL(astr->type, FR_ATTR_STRINGS);
    CU_ASSERT_EQUAL(astr->n, 2);
    CU_ASSERT_STRING_EQUAL(astr->strings[0], "abc");
    CU_ASSERT_STRING_EQUAL(astr->strings[1], "");
    FR_ASSERT_OK(fr_node_attr_ints(nd, "empty_ints", &cnt, &vals));
    CU_ASSERT_EQUAL(cnt, 0);
    FR_ASSERT_OK(fr_node_attr_int(nd, "old_int", 0, &iv));
    CU_ASSERT_EQUAL(iv, 7);
    CU_ASSERT_EQUAL(fr_node_attr(nd, "old_floats")->type, FR_ATTR_FLOATS);
    char dir[512];
    fr_test_tmpdir(dir, sizeof dir);
    roundtrip_check(g, dir, "attrs", 1);
    fr_graph_free(g);
    rm_rf(dir);
    free_kept();
}

/* A graph built with the IR builders (as passes build them) saves and reloads the same,
 * including pass-created constants that are not listed initializers. */
static fr_graph *build_ir_graph(fr_rng *r, int64_t rows, int64_t cols)
{
    fr_graph *g;
    CU_ASSERT_EQUAL_FATAL(fr_graph_new(&g), FR_OK);
    g->name = strdup("ir_built");
    g->opsets = calloc(1, sizeof *g->opsets);
    g->opsets[0].domain = strdup("");
    g->opsets[0].version = 17;
    g->n_opsets = 1;
    int x, w, bias, mm, y;
    FR_ASSERT_OK(fr_graph_add_value(g, "x", &x));
    FR_ASSERT_OK(fr_graph_add_value(g, "W", &w));
    FR_ASSERT_OK(fr_graph_add_value(g, "B", &bias));
    FR_ASSERT_OK(fr_graph_add_value(g, "mm", &mm));
    FR_ASSERT_OK(fr_graph_add_value(g, "y", &y));
    int64_t xd[2] = {-1, rows};
    fr_value_set_shape(&g->values[x], FR_F32, 2, xd);
    g->values[x].dim_params[0] = strdup("batch");
    FR_ASSERT_OK(fr_graph_mark_input(g, x));
    fr_tensor *tw, *tb;
    int64_t wd[2] = {rows, cols};
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 2, wd, "W", &tw));
    fr_rng_fill_normal(r, tw->data, rows * cols, 1.0f);
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 1, &cols, "B", &tb));
    fr_rng_fill(r, tb->data, cols, -1.0f, 1.0f);
    FR_ASSERT_OK(fr_graph_set_initializer(g, w, tw));
    FR_ASSERT_OK(fr_graph_set_initializer(g, bias, tb));
    int mi[2] = {x, w}, ai[2] = {mm, bias};
    FR_ASSERT_OK(fr_graph_add_node(g, "MatMul", "", "matmul", 2, mi, 1, &mm, NULL));
    FR_ASSERT_OK(fr_graph_add_node(g, "Add", "", NULL, 2, ai, 1, &y, NULL));
    FR_ASSERT_OK(fr_graph_mark_output(g, y));
    int64_t yd[2] = {-1, cols};
    fr_value_set_shape(&g->values[y], FR_F32, 2, yd);
    g->values[y].dim_params[0] = strdup("batch");
    return g;
}

static void test_ir_built_roundtrip(void)
{
    fr_rng r = fr_test_rng("ir_built_roundtrip");
    fr_graph *g = build_ir_graph(&r, 8, 5);
    /* a pass-created constant (not a listed initializer) read by a node: exported too */
    int c, z, dead_out;
    FR_ASSERT_OK(fr_graph_add_value(g, "folded_two", &c));
    FR_ASSERT_OK(fr_graph_add_value(g, "z", &z));
    FR_ASSERT_OK(fr_graph_add_value(g, "dead_out", &dead_out));
    fr_tensor *tc;
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 0, NULL, "two", &tc));
    ((float *)tc->data)[0] = 2.0f;
    g->values[c].constant = tc;
    g->values[c].flags |= FR_VAL_FOLDED;
    fr_value_set_shape(&g->values[c], FR_F32, 0, NULL);
    int y = g->outputs[0];
    int in[2] = {y, c};
    int nid;
    FR_ASSERT_OK(fr_graph_add_node(g, "Mul", "", "scale", 2, in, 1, &z, NULL));
    FR_ASSERT_OK(fr_graph_add_node(g, "Neg", "", "gone", 1, &z, 1, &dead_out, &nid));
    g->nodes[nid].dead = 1; /* dead nodes are not exported */
    g->outputs[0] = z;
    g->values[y].flags &= ~FR_VAL_OUTPUT;
    g->values[z].flags |= FR_VAL_OUTPUT;
    void *buf;
    size_t len;
    FR_ASSERT_OK(fr_onnx_save_buffer(g, &buf, &len));
    fr_graph *g2;
    FR_ASSERT_OK(fr_onnx_load_buffer(buf, len, NULL, "ir", &g2));
    CU_ASSERT_EQUAL(g2->n_nodes, 3);
    CU_ASSERT_EQUAL(g2->n_initializers, 3); /* W, B, then the folded constant */
    CU_ASSERT_STRING_EQUAL(g2->values[g2->initializers[2]].name, "folded_two");
    CU_ASSERT_STRING_EQUAL(g2->nodes[1].name, "Add_1");
    CU_ASSERT_EQUAL(fr_graph_find_value(g2, "dead_out"), -1);
    /* the intermediate y keeps its shape via value_info */
    const fr_value *y2 = &g2->values[fr_graph_find_value(g2, "y")];
    CU_ASSERT_EQUAL(y2->rank, 2);
    CU_ASSERT_STRING_EQUAL(y2->dim_params[0], "batch");
    free(buf);
    char dir[512];
    fr_test_tmpdir(dir, sizeof dir);
    roundtrip_check(g2, dir, "ir", 64);
    fr_graph_free(g2);
    fr_graph_free(g);
    rm_rf(dir);
}

/* ---- external data ---- */

static void test_external_data_ok(void)
{
    char dir[512], sub[600], p[700];
    fr_test_tmpdir(dir, sizeof dir);
    snprintf(sub, sizeof sub, "%s/data", dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(sub, 0755), 0);
    fr_rng r = fr_test_rng("external_data_ok");
    float a[6], bb[4], c[2];
    fr_rng_fill(&r, a, 6, -1, 1);
    fr_rng_fill(&r, bb, 4, -1, 1);
    fr_rng_fill(&r, c, 2, -1, 1);
    /* one file holding two tensors; one in a subfolder; a symlink that stays inside the folder
     * is refused all the same (tests/test_onnx_bad_input.c has the other refusals) */
    unsigned char blob[64] = {0};
    memcpy(blob + 8, a, sizeof a);
    memcpy(blob + 40, bb, sizeof bb);
    snprintf(p, sizeof p, "%s/blob.bin", dir);
    write_bytes(p, blob, sizeof blob);
    snprintf(p, sizeof p, "%s/c.bin", sub);
    write_bytes(p, c, sizeof c);
    char p2[700];
    snprintf(p2, sizeof p2, "%s/link.bin", dir);
    CU_ASSERT_EQUAL_FATAL(symlink("data/c.bin", p2), 0);
    mbuild b;
    mb_init(&b, 17);
    int64_t d6[1] = {6}, d4[1] = {4}, d2[1] = {2};
    Onnx__TensorProto *ta = mk_tensor("a", FR_F32, 1, d6), *tb = mk_tensor("b", FR_F32, 1, d4),
                      *tc = mk_tensor("c", FR_F32, 1, d2), *tl = mk_tensor("l", FR_F32, 1, d2);
    set_external(ta, "blob.bin", "8", "24");
    set_external(tb, "./blob.bin", "40", NULL);
    set_external(tc, "data/c.bin", NULL, NULL);
    set_external(tl, "link.bin", "0", "8");
    b.init[b.g.n_initializer++] = ta;
    b.init[b.g.n_initializer++] = tb;
    b.init[b.g.n_initializer++] = tc;
    b.init[b.g.n_initializer++] = tl;
    mb_node(&b, "Concat", "cat", "a,b,c,l", "y");
    b.out[b.g.n_output++] = mk_vi("y", FR_F32, "14");
    snprintf(p, sizeof p, "%s/model.onnx", dir);
    mb_save(&b, p);
    fr_graph *g;
    CU_ASSERT_EQUAL(fr_onnx_load_file(p, &g), FR_ERR_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "initializer 'l'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "'link.bin' is a symbolic link"));
    /* l's data as a plain file: the model loads */
    CU_ASSERT_EQUAL_FATAL(unlink(p2), 0);
    write_bytes(p2, c, sizeof c);
    FR_ASSERT_OK(fr_onnx_load_file(p, &g));
    const fr_value *va = &g->values[fr_graph_find_value(g, "a")];
    const fr_value *vb = &g->values[fr_graph_find_value(g, "b")];
    const fr_value *vc = &g->values[fr_graph_find_value(g, "c")];
    const fr_value *vl = &g->values[fr_graph_find_value(g, "l")];
    CU_ASSERT(memcmp(va->constant->data, a, sizeof a) == 0);
    CU_ASSERT(memcmp(vb->constant->data, bb, sizeof bb) == 0);
    CU_ASSERT(memcmp(vc->constant->data, c, sizeof c) == 0);
    CU_ASSERT(memcmp(vl->constant->data, c, sizeof c) == 0);
    CU_ASSERT_STRING_EQUAL(va->external_location, "blob.bin");
    CU_ASSERT_STRING_EQUAL(vc->external_location, "data/c.bin");
    /* the same model from memory: without a folder external data is refused, with one it loads */
    size_t len;
    void *buf = mb_pack(&b, &len);
    fr_graph *gm;
    CU_ASSERT_EQUAL(fr_onnx_load_buffer(buf, len, NULL, "<mem>", &gm), FR_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "'a'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), "<mem>"));
    FR_ASSERT_OK(fr_onnx_load_buffer(buf, len, dir, "<mem>", &gm));
    CU_ASSERT_EQUAL(graph_diff(g, gm), 0);
    fr_graph_free(gm);
    /* re-saving into another folder with external data */
    char out[600];
    snprintf(out, sizeof out, "%s/out", dir);
    CU_ASSERT_EQUAL_FATAL(mkdir(out, 0755), 0);
    roundtrip_check(g, out, "ext", 16);
    fr_graph_free(g);
    rm_rf(dir);
    free_kept();
}

/* ---- saving safely ---- */

static void test_save_safety(void)
{
    fr_rng r = fr_test_rng("save_safety");
    fr_graph *g = build_ir_graph(&r, 16, 4);
    char dir[512], p[700], victim[700], data[700];
    fr_test_tmpdir(dir, sizeof dir);
    snprintf(p, sizeof p, "%s/m.onnx", dir);
    /* external data names must be plain names in the output folder */
    const char *bad_names[] = {"../w.bin", "sub/w.bin", "/tmp/w.bin", "..", "", "m.onnx"};
    for (int i = 0; i < 6; i++) {
        fr_onnx_save_options opt = {bad_names[i], 0};
        CU_ASSERT_EQUAL(fr_onnx_save_file(g, p, &opt), FR_ERR_INVALID_ARG);
        if (bad_names[i][0]) CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), bad_names[i]));
    }
    CU_ASSERT_EQUAL(file_size(p), -1); /* nothing written */
    /* a folder that does not exist: IO error naming the path */
    char nodir[700];
    snprintf(nodir, sizeof nodir, "%s/missing/m.onnx", dir);
    CU_ASSERT_EQUAL(fr_onnx_save_file(g, nodir, NULL), FR_ERR_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), nodir));
    /* the model path and the data path are symlinks to files outside: they are replaced, the
     * targets are never written through */
    snprintf(victim, sizeof victim, "%s/victim.txt", dir);
    write_bytes(victim, "keep me", 7);
    CU_ASSERT_EQUAL_FATAL(symlink(victim, p), 0);
    snprintf(data, sizeof data, "%s/w.bin", dir);
    CU_ASSERT_EQUAL_FATAL(symlink(victim, data), 0);
    fr_onnx_save_options opt = {"w.bin", 1};
    FR_ASSERT_OK(fr_onnx_save_file(g, p, &opt));
    CU_ASSERT_EQUAL(file_size(victim), 7);
    struct stat sb;
    CU_ASSERT(lstat(p, &sb) == 0 && S_ISREG(sb.st_mode));
    CU_ASSERT(lstat(data, &sb) == 0 && S_ISREG(sb.st_mode));
    CU_ASSERT_EQUAL(file_size(data), (long)(16 * 4 + 4) * 4);
    fr_graph *g2;
    FR_ASSERT_OK(fr_onnx_load_file(p, &g2));
    CU_ASSERT_EQUAL(graph_diff(g, g2), 0);
    fr_graph_free(g2);
    /* saving over an existing model replaces it whole */
    FR_ASSERT_OK(fr_onnx_save_file(g, p, NULL));
    FR_ASSERT_OK(fr_onnx_load_file(p, &g2));
    CU_ASSERT_PTR_NULL(g2->values[g2->initializers[0]].external_location);
    fr_graph_free(g2);
    CU_ASSERT_EQUAL(count_temp_files(dir), 0);
    fr_graph_free(g);
    rm_rf(dir);
}

/* ---- fixtures ---- */

static const char *fixture_models[] = {"gpt2_tiny", "llama_tiny", "llama_tiny_op14", "bert_tiny",
                                       "gpt2_tiny_op13"};
#define N_FIXTURES 5

static void test_fixture_roundtrips(void)
{
    char dir[512];
    fr_test_tmpdir(dir, sizeof dir);
    for (int i = 0; i < N_FIXTURES; i++) {
        char rel[200], p[700];
        snprintf(rel, sizeof rel, "%s/model.onnx", fixture_models[i]);
        fr_fixture(p, sizeof p, rel);
        fr_graph *g;
        fr_status st = fr_onnx_load_file(p, &g);
        if (st != FR_OK) fprintf(stderr, "\n  %s: %s\n", p, fr_last_error());
        CU_ASSERT_EQUAL(st, FR_OK);
        if (st != FR_OK) continue;
        CU_ASSERT(g->n_nodes > 0);
        CU_ASSERT(g->n_initializers > 0);
        CU_ASSERT(g->n_inputs > 0 && g->n_outputs > 0);
        CU_ASSERT(fr_graph_opset(g, "") > 0);
        roundtrip_check(g, dir, fixture_models[i], 1024);
        fr_graph_free(g);
    }
    rm_rf(dir);
}

/* ---- onnxruntime ---- */

static int have_onnxruntime(void)
{
    return system("python3 -c 'import onnxruntime' >/dev/null 2>&1") == 0;
}

static const char *ort_script =
    "import sys\n"
    "import numpy as np\n"
    "import onnxruntime as ort\n"
    "s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])\n"
    "if len(sys.argv) == 3:\n" /* a fixture folder: feed its inputs, compare with PyTorch */
    "    d = sys.argv[2]\n"
    "    feeds = {i.name: np.load(d + '/input_' + i.name + '.npy') for i in s.get_inputs()}\n"
    "    y = s.run(None, feeds)[0]\n"
    "    ref = np.load(d + '/output_logits.npy')\n"
    "    if y.shape != ref.shape or not np.allclose(y, ref, rtol=1e-3, atol=1e-4):\n"
    "        print('MISMATCH', y.shape, ref.shape, float(np.abs(y - ref).max()))\n"
    "        sys.exit(1)\n"
    "if len(sys.argv) > 3:\n"
    "    x = np.fromfile(sys.argv[2], dtype=np.float32).reshape(int(sys.argv[4]), -1)\n"
    "    y = s.run(None, {s.get_inputs()[0].name: x})[0]\n"
    "    np.asarray(y, dtype=np.float32).tofile(sys.argv[3])\n"
    "print('OK')\n";

/* run the script; 1 when it printed OK */
static int run_ort(const char *dir, const char *args)
{
    char script[700], cmd[3000], line[256];
    snprintf(script, sizeof script, "%s/ort_check.py", dir);
    write_bytes(script, ort_script, strlen(ort_script));
    snprintf(cmd, sizeof cmd, "python3 '%s' %s 2>&1", script, args);
    FILE *f = popen(cmd, "r");
    if (!f) return 0;
    int ok = 0;
    while (fgets(line, sizeof line, f)) {
        if (strcmp(line, "OK\n") == 0) ok = 1;
        else fprintf(stderr, "  python: %s", line);
    }
    return pclose(f) == 0 && ok;
}

static void test_onnxruntime_loads_exports(void)
{
    if (!have_onnxruntime()) {
        printf("SKIP: onnxruntime not installed\n");
        return;
    }
    char dir[512], p[700], xin[700], yout[700], args[2400];
    fr_test_tmpdir(dir, sizeof dir);
    /* a C-built model with a symbolic batch dim and external weights: onnxruntime must compute
     * y = x W + b from our bytes */
    fr_rng r = fr_test_rng("onnxruntime_loads_exports");
    const int64_t rows = 12, cols = 7, batch = 3;
    fr_graph *g = build_ir_graph(&r, rows, cols);
    snprintf(p, sizeof p, "%s/ir.onnx", dir);
    fr_onnx_save_options opt = {"ir.data", 64};
    FR_ASSERT_OK(fr_onnx_save_file(g, p, &opt));
    float x[36];
    fr_rng_fill(&r, x, batch * rows, -2, 2);
    snprintf(xin, sizeof xin, "%s/x.f32", dir);
    snprintf(yout, sizeof yout, "%s/y.f32", dir);
    write_bytes(xin, x, sizeof(float) * (size_t)(batch * rows));
    snprintf(args, sizeof args, "'%s' '%s' '%s' %lld", p, xin, yout, (long long)batch);
    int ran = run_ort(dir, args);
    CU_ASSERT(ran);
    float y[21] = {0};
    FILE *f = ran ? fopen(yout, "rb") : NULL;
    CU_ASSERT_PTR_NOT_NULL(f);
    if (f) {
        CU_ASSERT_EQUAL(fread(y, sizeof(float), (size_t)(batch * cols), f), (size_t)(batch * cols));
        fclose(f);
    }
    const float *w = g->values[fr_graph_find_value(g, "W")].constant->data;
    const float *bias = g->values[fr_graph_find_value(g, "B")].constant->data;
    double ref[21];
    for (int64_t i = 0; i < batch; i++)
        for (int64_t j = 0; j < cols; j++) {
            double s = bias[j];
            for (int64_t k = 0; k < rows; k++) s += (double)x[i * rows + k] * (double)w[k * cols + j];
            ref[i * cols + j] = s;
        }
    double err = fr_rel_l2_d(y, ref, batch * cols);
    CU_ASSERT(err < 1e-5); /* float32 GEMM of length 12 vs double */
    fr_graph_free(g);
    /* every fixture, exported inline and with external data, gives PyTorch's logits */
    for (int i = 0; i < N_FIXTURES; i++) {
        char rel[200], src[700];
        snprintf(rel, sizeof rel, "%s/model.onnx", fixture_models[i]);
        fr_fixture(src, sizeof src, rel);
        fr_graph *fg;
        fr_status st = fr_onnx_load_file(src, &fg);
        CU_ASSERT_EQUAL(st, FR_OK);
        if (st != FR_OK) continue;
        char pi[700], pe[700], dn[200];
        snprintf(pi, sizeof pi, "%s/%s.onnx", dir, fixture_models[i]);
        snprintf(pe, sizeof pe, "%s/%s_ext.onnx", dir, fixture_models[i]);
        snprintf(dn, sizeof dn, "%s.data", fixture_models[i]);
        fr_onnx_save_options o = {dn, 1024};
        CU_ASSERT_EQUAL(fr_onnx_save_file(fg, pi, NULL), FR_OK);
        CU_ASSERT_EQUAL(fr_onnx_save_file(fg, pe, &o), FR_OK);
        char fdir[700];
        fr_fixture(fdir, sizeof fdir, fixture_models[i]);
        snprintf(args, sizeof args, "'%s' '%s'", pi, fdir);
        CU_ASSERT(run_ort(dir, args));
        snprintf(args, sizeof args, "'%s' '%s'", pe, fdir);
        CU_ASSERT(run_ort(dir, args));
        fr_graph_free(fg);
    }
    rm_rf(dir);
}

static CU_TestInfo io_tests[] = {
    {"encodings_all_dtypes", test_encodings_all_dtypes},
    {"typed_field_details", test_typed_field_details},
    {"graph_features", test_graph_features},
    {"attributes", test_attributes},
    {"ir_built_roundtrip", test_ir_built_roundtrip},
    {"external_data_ok", test_external_data_ok},
    {"save_safety", test_save_safety},
    {"fixture_roundtrips", test_fixture_roundtrips},
    {"onnxruntime_loads_exports", test_onnxruntime_loads_exports},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"onnx_io", NULL, NULL, NULL, NULL, io_tests},
    CU_SUITE_INFO_NULL,
};

int main(void)
{
    int rc = fr_test_main(suites);
    free_kept();
    return rc;
}
