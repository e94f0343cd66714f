/* Hostile and broken model files: each must fail with the right status and a message naming
 * the culprit (file, tensor, node, value, function), never crash or allocate what the file
 * does not hold. Covers decode failures (empty, truncated, garbage, every prefix and random
 * corruptions of a valid model, nesting and memory bombs, > 2 GiB), tensor data (lengths,
 * shapes, dtypes, typed fields), external data (.., absolute, symlinks in or out of the folder, offsets and
 * lengths past the end), graph structure (cycle, dangling input/output, duplicates) and
 * unsupported features (subgraphs, local functions, sparse initializers). */
#define _XOPEN_SOURCE 700 /* nftw */
#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph/onnx_io.h"
#include "ops/op.h"
#include "tests/harness.h"
#include "tests/onnx_test_util.h"

/* mb_init as these models always were (IR 8, graph "bad", no producer): the prefix and
 * corruption tests walk every byte of one. */
static void bad_init(mbuild *b)
{
    mb_init(b, 17);
    b->m.ir_version = 8;
    b->m.producer_name = NULL;
    b->g.name = "bad";
}

/* A valid model: y = Identity(w) with a [2,3] float initializer w (raw_data). */
static Onnx__TensorProto *mb_weight_model(mbuild *b)
{
    bad_init(b);
    int64_t d[2] = {2, 3};
    Onnx__TensorProto *w = mk_tensor("w", FR_F32, 2, d);
    set_raw(w, NULL, 24);
    b->init[b->g.n_initializer++] = w;
    mb_node(b, "Identity", "id", "w", "y");
    b->out[b->g.n_output++] = mk_vi_dims("y", FR_F32, 2, d);
    return w;
}

static char tmp[400];

/* Assert status and that the message names the file and every given culprit string. */
static void expect_msg(fr_status st, fr_status want, const char *path, const char *s1, const char *s2)
{
    const char *msg = fr_last_error();
    int ok = st == want && (!path || strstr(msg, path)) && (!s1 || strstr(msg, s1)) &&
             (!s2 || strstr(msg, s2));
    if (!ok)
        fprintf(stderr, "\n  expected %s naming [%s] [%s] [%s]\n  got %s: %s\n", fr_status_name(want),
                path ? path : "", s1 ? s1 : "", s2 ? s2 : "", fr_status_name(st), msg);
    CU_ASSERT_EQUAL(st, want);
    if (path) CU_ASSERT_PTR_NOT_NULL(strstr(msg, path));
    if (s1) CU_ASSERT_PTR_NOT_NULL(strstr(msg, s1));
    if (s2) CU_ASSERT_PTR_NOT_NULL(strstr(msg, s2));
}

/* Save the built model as dir/file and load it: must fail as described. */
static void expect_fail_in(const char *dir, mbuild *b, const char *file, fr_status want,
                           const char *s1, const char *s2)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    mb_save(b, path);
    fr_graph *g = (fr_graph *)&g; /* must be reset to NULL */
    fr_status st = fr_onnx_load_file(path, &g);
    expect_msg(st, want, path, s1, s2);
    CU_ASSERT_PTR_NULL(g);
    if (st == FR_OK) fr_graph_free(g);
}

static void expect_fail(mbuild *b, const char *file, fr_status want, const char *s1, const char *s2)
{
    expect_fail_in(tmp, b, file, want, s1, s2);
}

static int suite_init(void)
{
    fr_test_tmpdir(tmp, sizeof tmp);
    return tmp[0] ? 0 : 1;
}

static int suite_clean(void)
{
    rm_rf(tmp);
    free_kept();
    return 0;
}

/* ---- files that are not models ---- */

static void test_not_models(void)
{
    char p[700];
    fr_graph *g;
    snprintf(p, sizeof p, "%s/empty.onnx", tmp);
    write_bytes(p, "", 0);
    expect_msg(fr_onnx_load_file(p, &g), FR_ERR_PARSE, p, "empty", NULL);
    snprintf(p, sizeof p, "%s/does_not_exist.onnx", tmp);
    expect_msg(fr_onnx_load_file(p, &g), FR_ERR_IO, p, "No such file", NULL);
    expect_msg(fr_onnx_load_file(tmp, &g), FR_ERR_IO, tmp, "not a regular file", NULL);
    snprintf(p, sizeof p, "%s/fifo.onnx", tmp); /* must not block waiting for a writer */
    CU_ASSERT_EQUAL_FATAL(mkfifo(p, 0644), 0);
    expect_msg(fr_onnx_load_file(p, &g), FR_ERR_IO, p, "not a regular file", NULL);
    /* text: 't' = field 14 with wire type 4 (end group) */
    snprintf(p, sizeof p, "%s/garbage.onnx", tmp);
    const char *text = "this is not an onnx model, just some text\n";
    write_bytes(p, text, strlen(text));
    expect_msg(fr_onnx_load_file(p, &g), FR_ERR_PARSE, p, "not a valid ONNX model (protobuf decode failed)", NULL);
    /* a valid protobuf that is no model: no graph */
    mbuild b;
    bad_init(&b);
    b.m.graph = NULL;
    expect_fail(&b, "nograph.onnx", FR_ERR_PARSE, "no graph", NULL);
    /* truncated in the middle of the graph message */
    mb_weight_model(&b);
    size_t len;
    unsigned char *buf = mb_pack(&b, &len);
    snprintf(p, sizeof p, "%s/truncated.onnx", tmp);
    write_bytes(p, buf, len / 2);
    expect_msg(fr_onnx_load_file(p, &g), FR_ERR_PARSE, p, "protobuf decode failed", NULL);
    CU_ASSERT_EQUAL(fr_onnx_load_buffer(buf, len / 2, NULL, "half", &g), FR_ERR_PARSE);
    /* API misuse */
    CU_ASSERT_EQUAL(fr_onnx_load_file(NULL, &g), FR_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(fr_onnx_load_buffer(NULL, 10, NULL, "x", &g), FR_ERR_INVALID_ARG);
    free_kept();
}

/* More than protobuf can hold: refused from the size alone (a sparse file, nothing read). */
static void test_over_2gib(void)
{
    char p[700];
    snprintf(p, sizeof p, "%s/huge.onnx", tmp);
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CU_ASSERT_FATAL(fd >= 0);
    int rc = ftruncate(fd, (off_t)1 << 31);
    close(fd);
    if (rc != 0) {
        printf("SKIP: cannot create a sparse 2 GiB file here\n");
        unlink(p);
        return;
    }
    fr_graph *g;
    expect_msg(fr_onnx_load_file(p, &g), FR_ERR_UNSUPPORTED, p, "2 GiB", NULL);
    unlink(p);
}

/* Every prefix and random corruptions of a model exercising most of the schema: no crash,
 * no leak (ASan), and every failure has a message. */
static void test_prefixes_and_corruption(void)
{
    mbuild b;
    mb_weight_model(&b);
    int64_t d4[1] = {4};
    Onnx__TensorProto *t = mk_tensor("t", FR_I8, 1, d4);
    int32_t iv[4] = {1, -2, 3, -4};
    t->int32_data = iv;
    t->n_int32_data = 4;
    b.init[b.g.n_initializer++] = t;
    b.in[b.g.n_input++] = mk_vi_dims("x", FR_F32, 1, d4);
    Onnx__NodeProto *n = mb_node(&b, "Cast", NULL, "x,,t", "c,");
    Onnx__AttributeProto *a = node_attr(n, "to", FR_ATTR_INT);
    a->has_i = 1;
    a->i = 1;
    a = node_attr(n, "vals", FR_ATTR_TENSOR);
    a->t = mk_tensor(NULL, FR_F16, 1, d4);
    set_raw(a->t, NULL, 8);
    a = node_attr(n, "names", FR_ATTR_STRINGS);
    ProtobufCBinaryData ss[2] = {{1, (uint8_t *)"a"}, {2, (uint8_t *)"bc"}};
    a->strings = ss;
    a->n_strings = 2;
    b.vi[b.g.n_value_info++] = mk_vi_dims("c", FR_F32, 1, d4);
    b.out[b.g.n_output++] = mk_vi_dims("c", FR_F32, 1, d4);
    size_t len;
    unsigned char *buf = mb_pack(&b, &len);
    fr_graph *g;
    FR_ASSERT_OK(fr_onnx_load_buffer(buf, len, NULL, "seed", &g));
    fr_graph_free(g);
    int failures = 0;
    for (size_t cut = 0; cut < len; cut++) {
        fr_status st = fr_onnx_load_buffer(buf, cut, NULL, "prefix", &g);
        if (st == FR_OK) {
            fr_graph_free(g);
        } else {
            failures++;
            CU_ASSERT(strstr(fr_last_error(), "prefix") != NULL);
        }
    }
    CU_ASSERT(failures > (int)len / 2); /* most prefixes are not models */
    fr_rng r = fr_test_rng("prefixes_and_corruption");
    unsigned char *m = keep(malloc(len));
    for (int it = 0; it < 3000; it++) {
        memcpy(m, buf, len);
        int flips = 1 + (int)(fr_rng_uniform(&r) * 4);
        for (int k = 0; k < flips; k++)
            m[(size_t)(fr_rng_uniform(&r) * (double)len)] = (unsigned char)(fr_rng_uniform(&r) * 256);
        fr_status st = fr_onnx_load_buffer(m, len, NULL, "mutant", &g);
        if (st == FR_OK) fr_graph_free(g);
        else CU_ASSERT(fr_last_error()[0] != '\0');
    }
    free_kept();
}

/* Messages nested a million deep would overflow protobuf-c's recursion: refused up front. */
static void test_nesting_bomb(void)
{
    const int levels = 300000;
    size_t cap = (size_t)levels * 5 + 16, start = cap;
    unsigned char *buf = keep(malloc(cap));
    /* inside out: Graph.node(1) -> Node.attribute(5) -> Attribute.g(6) -> Graph ... */
    static const unsigned char tags[3] = {0x32 /* k%3==0 */, 0x0a, 0x2a};
    for (int k = levels - 1; k >= 0; k--) {
        size_t inner = cap - start;
        unsigned char vb[10];
        int nv = 0;
        do {
            vb[nv++] = (unsigned char)((inner & 0x7f) | (inner > 0x7f ? 0x80 : 0));
            inner >>= 7;
        } while (inner);
        start -= (size_t)nv;
        memcpy(buf + start, vb, (size_t)nv);
        buf[--start] = k == 0 ? 0x3a /* Model.graph */ : tags[k % 3];
    }
    fr_graph *g;
    expect_msg(fr_onnx_load_buffer(buf + start, cap - start, NULL, "deep.onnx", &g), FR_ERR_PARSE,
               "deep.onnx", "nested deeper", NULL);
    free_kept();
}

static size_t put_varint(unsigned char *p, uint64_t v)
{
    size_t n = 0;
    do {
        p[n++] = (unsigned char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

/* A million two-byte empty attributes would make protobuf-c allocate ~150x the file. */
static void test_memory_bomb(void)
{
    const size_t n_attr = (size_t)1 << 20;
    unsigned char *buf = keep(malloc(n_attr * 2 + 64));
    unsigned char vb[10];
    size_t node_len = n_attr * 2, nv = put_varint(vb, node_len);
    /* Model.graph { Graph.node { attribute {} x n_attr } } */
    size_t p = 0;
    buf[p++] = 0x3a;
    p += put_varint(buf + p, 1 + nv + node_len);
    buf[p++] = 0x0a;
    p += put_varint(buf + p, node_len);
    for (size_t i = 0; i < n_attr; i++) {
        buf[p++] = 0x2a;
        buf[p++] = 0x00;
    }
    fr_graph *g;
    expect_msg(fr_onnx_load_buffer(buf, p, NULL, "bomb.onnx", &g), FR_ERR_PARSE, "bomb.onnx",
               "memory", NULL);
    free_kept();
}

/* ---- tensor data ---- */

static void test_tensor_data(void)
{
    mbuild b;
    Onnx__TensorProto *w;

    w = mb_weight_model(&b);
    w->raw_data.len = 20; /* 2x3 float needs 24 */
    expect_fail(&b, "raw_len.onnx", FR_ERR_PARSE, "initializer 'w'", "raw_data holds 20 bytes");

    w = mb_weight_model(&b);
    w->has_raw_data = 0;
    float fd[5] = {0};
    w->float_data = fd;
    w->n_float_data = 5;
    expect_fail(&b, "typed_count.onnx", FR_ERR_PARSE, "initializer 'w'", "float_data holds 5");

    w = mb_weight_model(&b);
    w->has_raw_data = 0;
    int64_t i64[6] = {0};
    w->int64_data = i64;
    w->n_int64_data = 6;
    expect_fail(&b, "typed_field.onnx", FR_ERR_PARSE, "initializer 'w'", "int64_data");

    w = mb_weight_model(&b);
    w->has_raw_data = 0;
    expect_fail(&b, "no_data.onnx", FR_ERR_PARSE, "initializer 'w'", "float_data holds 0");

    w = mb_weight_model(&b);
    w->float_data = fd;
    w->n_float_data = 5;
    expect_fail(&b, "raw_and_typed.onnx", FR_ERR_PARSE, "initializer 'w'", "besides raw_data");

    int64_t huge[3] = {(int64_t)1 << 40, (int64_t)1 << 40, 16};
    w = mb_weight_model(&b);
    w->n_dims = 3;
    w->dims = huge;
    expect_fail(&b, "shape_overflow.onnx", FR_ERR_OOM, "initializer 'w'", "overflow");

    int64_t big[1] = {(int64_t)1 << 40}; /* 4 TiB claimed, 24 bytes held: no allocation */
    w = mb_weight_model(&b);
    w->n_dims = 1;
    w->dims = big;
    expect_fail(&b, "shape_big.onnx", FR_ERR_PARSE, "initializer 'w'", "needs 4398046511104");

    int64_t neg[2] = {2, -3};
    w = mb_weight_model(&b);
    w->dims = neg;
    expect_fail(&b, "shape_negative.onnx", FR_ERR_SHAPE, "initializer 'w'", "negative");

    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 6};
    w = mb_weight_model(&b);
    w->n_dims = 9;
    w->dims = nine;
    expect_fail(&b, "rank9.onnx", FR_ERR_UNSUPPORTED, "initializer 'w'", "rank 9");

    w = mb_weight_model(&b);
    w->data_type = FR_STRING;
    w->has_raw_data = 0;
    ProtobufCBinaryData sd[6] = {{1, (uint8_t *)"a"}};
    w->string_data = sd;
    w->n_string_data = 6;
    expect_fail(&b, "string.onnx", FR_ERR_UNSUPPORTED, "initializer 'w'", "STRING");

    w = mb_weight_model(&b);
    w->data_type = 14; /* COMPLEX64 */
    expect_fail(&b, "complex.onnx", FR_ERR_UNSUPPORTED, "initializer 'w'", "data type 14");

    w = mb_weight_model(&b);
    w->has_data_type = 0;
    expect_fail(&b, "no_dtype.onnx", FR_ERR_PARSE, "initializer 'w'", "no data_type");

    w = mb_weight_model(&b);
    Onnx__TensorProto__Segment seg = ONNX__TENSOR_PROTO__SEGMENT__INIT;
    seg.has_begin = seg.has_end = 1;
    seg.end = 6;
    w->segment = &seg;
    expect_fail(&b, "segment.onnx", FR_ERR_UNSUPPORTED, "initializer 'w'", "segment");

    w = mb_weight_model(&b);
    w->data_type = FR_I8;
    w->has_raw_data = 0;
    int32_t i8[6] = {1, 2, 300, 4, 5, 6};
    w->int32_data = i8;
    w->n_int32_data = 6;
    expect_fail(&b, "int8_range.onnx", FR_ERR_PARSE, "initializer 'w'", "int32_data[2] = 300");

    w = mb_weight_model(&b);
    w->name = "";
    expect_fail(&b, "noname.onnx", FR_ERR_PARSE, "initializer #0 has no name", NULL);

    w = mb_weight_model(&b);
    b.init[b.g.n_initializer++] = w;
    expect_fail(&b, "dup_init.onnx", FR_ERR_GRAPH, "initializer 'w'", "twice");

    mb_weight_model(&b);
    Onnx__SparseTensorProto sp = ONNX__SPARSE_TENSOR_PROTO__INIT, *spp[1] = {&sp};
    int64_t d1[1] = {4};
    sp.values = mk_tensor("sparse_w", FR_F32, 1, d1);
    b.g.sparse_initializer = spp;
    b.g.n_sparse_initializer = 1;
    expect_fail(&b, "sparse.onnx", FR_ERR_UNSUPPORTED, "sparse initializer 'sparse_w'", NULL);

    /* a bad tensor inside a node attribute names the node and attribute */
    mb_weight_model(&b);
    Onnx__AttributeProto *a = node_attr(b.node[0], "value", FR_ATTR_TENSOR);
    a->t = mk_tensor(NULL, FR_F32, 1, d1);
    set_raw(a->t, NULL, 3);
    expect_fail(&b, "attr_tensor.onnx", FR_ERR_PARSE, "node 'id' (Identity) attribute 'value'", "raw_data");
    free_kept();
}

/* ---- external data ---- */

static char models[sizeof tmp + 16];

static void ext_case(const char *file, const char *loc, const char *off, const char *len,
                     fr_status want, const char *s1, const char *s2)
{
    mbuild b;
    Onnx__TensorProto *w = mb_weight_model(&b);
    w->has_raw_data = 0;
    set_external(w, loc, off, len);
    expect_fail_in(models, &b, file, want, s1, s2);
}

static void test_external_refused(void)
{
    char p[600], outside[600];
    /* models live in tmp/models; a secret file lives next to that folder */
    snprintf(models, sizeof models, "%s/models", tmp);
    CU_ASSERT_EQUAL_FATAL(mkdir(models, 0755), 0);
    snprintf(outside, sizeof outside, "%s/secret.bin", tmp);
    unsigned char zeros[64] = {0};
    write_bytes(outside, zeros, sizeof zeros);
    snprintf(p, sizeof p, "%s/w.bin", models);
    write_bytes(p, zeros, 30);
    snprintf(p, sizeof p, "%s/escape.bin", models);
    CU_ASSERT_EQUAL_FATAL(symlink(outside, p), 0); /* file symlink out of the folder */
    snprintf(p, sizeof p, "%s/up", models);
    CU_ASSERT_EQUAL_FATAL(symlink(tmp, p), 0); /* folder symlink out of the folder */
    snprintf(p, sizeof p, "%s/inner.bin", models);
    CU_ASSERT_EQUAL_FATAL(symlink("w.bin", p), 0); /* file symlink that stays inside */
    snprintf(p, sizeof p, "%s/sub", models);
    CU_ASSERT_EQUAL_FATAL(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/sub/in", models);
    CU_ASSERT_EQUAL_FATAL(symlink("..", p), 0); /* folder symlink that stays inside */

    ext_case("dotdot.onnx", "../secret.bin", "0", "24", FR_ERR_PARSE, "initializer 'w'", "'../secret.bin'");
    ext_case("dotdot2.onnx", "sub/../../secret.bin", NULL, NULL, FR_ERR_PARSE, "initializer 'w'", "'..'");
    ext_case("absolute.onnx", outside, "0", "24", FR_ERR_PARSE, "initializer 'w'", "absolute");
    /* symlinks are refused wherever they point, naming the link */
    ext_case("symlink_file.onnx", "escape.bin", "0", "24", FR_ERR_IO, "initializer 'w'",
             "location 'escape.bin': 'escape.bin' is a symbolic link");
    ext_case("symlink_dir.onnx", "up/secret.bin", "0", "24", FR_ERR_IO, "initializer 'w'", "'up' is a symbolic link");
    ext_case("symlink_in.onnx", "inner.bin", "0", "24", FR_ERR_IO, "initializer 'w'", "'inner.bin' is a symbolic link");
    ext_case("symlink_in_dir.onnx", "sub/in/w.bin", "0", "24", FR_ERR_IO, "initializer 'w'",
             "'sub/in' is a symbolic link");
    ext_case("real_dir.onnx", "./sub", NULL, NULL, FR_ERR_IO, "initializer 'w'", "is a folder");
    ext_case("offset_past_end.onnx", "w.bin", "31", NULL, FR_ERR_PARSE, "initializer 'w'", "offset 31 is past the end");
    ext_case("length_past_end.onnx", "w.bin", "8", "24", FR_ERR_PARSE, "initializer 'w'", "past the end");
    ext_case("too_small.onnx", "w.bin", "10", NULL, FR_ERR_PARSE, "initializer 'w'", "holds only 20");
    ext_case("length_mismatch.onnx", "w.bin", "0", "16", FR_ERR_PARSE, "initializer 'w'", "length 16");
    ext_case("missing.onnx", "nope.bin", NULL, NULL, FR_ERR_IO, "initializer 'w'", "'nope.bin'");
    ext_case("no_location.onnx", NULL, "0", "24", FR_ERR_PARSE, "initializer 'w'", "location");
    ext_case("bad_offset.onnx", "w.bin", "12abc", NULL, FR_ERR_PARSE, "initializer 'w'", "12abc");
    ext_case("neg_offset.onnx", "w.bin", "-1", NULL, FR_ERR_PARSE, "initializer 'w'", "-1");
    ext_case("folder.onnx", ".", NULL, NULL, FR_ERR_IO, "initializer 'w'", "itself, not a file");
    ext_case("folder2.onnx", "sub/./", NULL, NULL, FR_ERR_IO, "initializer 'w'", "is a folder");
    ext_case("subfolder.onnx", "up", NULL, NULL, FR_ERR_IO, "initializer 'w'", "'up' is a symbolic link");
    /* a correct reference in the same setting loads: the refusals above are not blanket ones */
    mbuild b;
    Onnx__TensorProto *w = mb_weight_model(&b);
    w->has_raw_data = 0;
    set_external(w, "w.bin", "6", "24");
    snprintf(p, sizeof p, "%s/ok.onnx", models);
    size_t len;
    void *buf = mb_pack(&b, &len);
    write_bytes(p, buf, len);
    fr_graph *g;
    FR_ASSERT_OK(fr_onnx_load_file(p, &g));
    fr_graph_free(g);
    /* from memory without a folder: refused, naming the tensor */
    expect_msg(fr_onnx_load_buffer(buf, len, NULL, "<mem>", &g), FR_ERR_INVALID_ARG, "<mem>",
               "initializer 'w'", NULL);
    free_kept();
}

/* ---- graph structure and unsupported features ---- */

static void test_graph_structure(void)
{
    mbuild b;
    int64_t d[1] = {2};

    bad_init(&b);
    b.in[b.g.n_input++] = mk_vi_dims("x", FR_F32, 1, d);
    mb_node(&b, "Add", "a1", "x,q", "p");
    mb_node(&b, "Relu", "r1", "p", "q");
    b.out[b.g.n_output++] = mk_vi_dims("q", FR_F32, 1, d);
    expect_fail(&b, "cycle.onnx", FR_ERR_GRAPH, "cycle", "node 'a1'");

    bad_init(&b);
    b.in[b.g.n_input++] = mk_vi_dims("x", FR_F32, 1, d);
    mb_node(&b, "Add", "adder", "x,ghost", "y");
    b.out[b.g.n_output++] = mk_vi_dims("y", FR_F32, 1, d);
    expect_fail(&b, "dangling.onnx", FR_ERR_GRAPH, "node 'adder'", "'ghost'");

    bad_init(&b);
    b.in[b.g.n_input++] = mk_vi_dims("x", FR_F32, 1, d);
    mb_node(&b, "Relu", "r", "x", "y");
    b.out[b.g.n_output++] = mk_vi_dims("nobody", FR_F32, 1, d);
    expect_fail(&b, "dangling_out.onnx", FR_ERR_GRAPH, "graph output 'nobody'", NULL);

    bad_init(&b);
    b.in[b.g.n_input++] = mk_vi_dims("x", FR_F32, 1, d);
    mb_node(&b, "Relu", "r1", "x", "y");
    mb_node(&b, "Relu", "r2", "x", "y");
    b.out[b.g.n_output++] = mk_vi_dims("y", FR_F32, 1, d);
    expect_fail(&b, "twice.onnx", FR_ERR_GRAPH, "'y'", "'r2'");

    mb_weight_model(&b);
    mb_node(&b, "Relu", "overwrite", "y", "w");
    expect_fail(&b, "writes_init.onnx", FR_ERR_GRAPH, "node 'overwrite'", "'w'");

    bad_init(&b);
    b.in[b.g.n_input++] = mk_vi_dims("x", FR_F32, 1, d);
    b.in[b.g.n_input++] = mk_vi_dims("x", FR_F32, 1, d);
    expect_fail(&b, "dup_input.onnx", FR_ERR_GRAPH, "graph input 'x'", "twice");

    bad_init(&b);
    b.in[b.g.n_input++] = mk_vi_dims("x", FR_F32, 1, d);
    mb_node(&b, "", "noop", "x", "y");
    expect_fail(&b, "no_op_type.onnx", FR_ERR_PARSE, "node 'noop'", "no op_type");

    /* subgraph attributes: typed (If) and IR-v1 untyped (Loop body) */
    bad_init(&b);
    b.in[b.g.n_input++] = mk_vi_dims("c", FR_BOOL, 0, NULL);
    Onnx__NodeProto *n = mb_node(&b, "If", "branchy", "c", "y");
    Onnx__GraphProto sub = ONNX__GRAPH_PROTO__INIT;
    node_attr(n, "then_branch", FR_ATTR_GRAPH)->g = &sub;
    b.out[b.g.n_output++] = mk_vi_dims("y", FR_F32, 1, d);
    expect_fail(&b, "subgraph.onnx", FR_ERR_UNSUPPORTED, "node 'branchy' (If)", "'then_branch'");
    n->attribute[0]->has_type = 0;
    n->op_type = "Loop";
    expect_fail(&b, "subgraph_untyped.onnx", FR_ERR_UNSUPPORTED, "node 'branchy' (Loop)", "subgraph");

    /* model-local function */
    bad_init(&b);
    b.in[b.g.n_input++] = mk_vi_dims("x", FR_F32, 1, d);
    mb_node(&b, "MyGelu", "g1", "x", "y")->domain = "custom.fn";
    b.out[b.g.n_output++] = mk_vi_dims("y", FR_F32, 1, d);
    Onnx__FunctionProto fn = ONNX__FUNCTION_PROTO__INIT, *fnp[1] = {&fn};
    fn.name = "MyGelu";
    fn.domain = "custom.fn";
    b.m.functions = fnp;
    b.m.n_functions = 1;
    expect_fail(&b, "function.onnx", FR_ERR_UNSUPPORTED, "function 'MyGelu'", "node 'g1'");

    /* attributes */
    bad_init(&b);
    b.in[b.g.n_input++] = mk_vi_dims("x", FR_F32, 1, d);
    n = mb_node(&b, "Custom", "attrs", "x", "y");
    node_attr(n, "untyped", 0);
    expect_fail(&b, "attr_notype.onnx", FR_ERR_PARSE, "node 'attrs'", "'untyped' has no type");
    n->n_attribute = 0;
    node_attr(n, "k", FR_ATTR_INT);
    node_attr(n, "k", FR_ATTR_INT);
    expect_fail(&b, "attr_twice.onnx", FR_ERR_PARSE, "node 'attrs'", "'k' is given twice");
    n->n_attribute = 0;
    node_attr(n, "ref", FR_ATTR_INT)->ref_attr_name = "outer";
    expect_fail(&b, "attr_ref.onnx", FR_ERR_UNSUPPORTED, "node 'attrs'", "'outer'");
    n->n_attribute = 0;
    node_attr(n, "tensors", 9 /* TENSORS */);
    expect_fail(&b, "attr_tensors.onnx", FR_ERR_UNSUPPORTED, "node 'attrs'", "'tensors'");
    n->n_attribute = 0;
    Onnx__AttributeProto *a = node_attr(n, "strs", FR_ATTR_STRINGS);
    ProtobufCBinaryData nul[1] = {{3, (uint8_t *)"a\0b"}};
    a->strings = nul;
    a->n_strings = 1;
    expect_fail(&b, "attr_nul.onnx", FR_ERR_UNSUPPORTED, "node 'attrs'", "NUL");

    /* non-tensor graph input, unholdable input dtype, conflicting opsets */
    bad_init(&b);
    Onnx__ValueInfoProto *vi = mk_vi_dims("seq", FR_F32, 1, d);
    Onnx__TypeProto__Sequence sq = ONNX__TYPE_PROTO__SEQUENCE__INIT;
    vi->type->value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
    vi->type->sequence_type = &sq;
    b.in[b.g.n_input++] = vi;
    expect_fail(&b, "seq_input.onnx", FR_ERR_UNSUPPORTED, "graph input 'seq'", "not a tensor");
    bad_init(&b);
    b.in[b.g.n_input++] = mk_vi_dims("s", FR_STRING, 1, d);
    expect_fail(&b, "string_input.onnx", FR_ERR_UNSUPPORTED, "graph input 's'", "string");
    bad_init(&b);
    b.os[1].domain = "ai.onnx";
    b.os[1].has_version = 1;
    b.os[1].version = 13;
    b.m.n_opset_import = 2;
    expect_fail(&b, "opsets.onnx", FR_ERR_PARSE, "ai.onnx", "13");
    free_kept();
}

/* An op fp8run does not implement is not an import error (tools show such models); resolving
 * the ops reports it. */
static void test_unknown_op_loads(void)
{
    mbuild b;
    int64_t d[1] = {2};
    bad_init(&b);
    b.in[b.g.n_input++] = mk_vi_dims("x", FR_F32, 1, d);
    mb_node(&b, "NoSuchOp", "mystery", "x", "y");
    b.out[b.g.n_output++] = mk_vi_dims("y", FR_F32, 1, d);
    size_t len;
    void *buf = mb_pack(&b, &len);
    fr_graph *g;
    FR_ASSERT_OK(fr_onnx_load_buffer(buf, len, NULL, "unknown", &g));
    expect_msg(fr_graph_resolve_ops(g), FR_ERR_UNSUPPORTED, NULL, "NoSuchOp", "'mystery'");
    fr_graph_free(g);
    free_kept();
}

/* ---- committed broken fixtures (tests/fixtures/README.md says how each was made) ---- */

typedef struct bad_fixture {
    const char *file;
    fr_status want;
    const char *s1, *s2;
} bad_fixture;

/* float32 payload of a little-endian .npy v1.0 file (the fixtures' format) */
static float *npy_f32(const char *path, size_t *count)
{
    FILE *f = fopen(path, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    unsigned char *buf = keep(malloc(4096));
    size_t n = fread(buf, 1, 4096, f);
    fclose(f);
    CU_ASSERT_FATAL(n > 10 && memcmp(buf, "\x93NUMPY\x01", 7) == 0);
    size_t off = 10 + (size_t)buf[8] + ((size_t)buf[9] << 8);
    CU_ASSERT_FATAL(off <= n && strstr((char *)buf + 10, "'<f4'") != NULL);
    *count = (n - off) / 4;
    float *v = keep(malloc(*count * 4 + 4));
    memcpy(v, buf + off, *count * 4);
    return v;
}

static void test_bad_fixtures(void)
{
    static const bad_fixture cases[] = {
        {"truncated.onnx", FR_ERR_PARSE, "is not a valid ONNX model (protobuf decode failed)", NULL},
        {"garbage.onnx", FR_ERR_PARSE, "is not a valid ONNX model (protobuf decode failed)", NULL},
        {"raw_data_wrong_length.onnx", FR_ERR_PARSE, "initializer 'W'", "raw_data holds 77 bytes"},
        {"cycle.onnx", FR_ERR_GRAPH, "cycle", "node 'add_"},
        {"dangling_input.onnx", FR_ERR_GRAPH, "node 'add_dangling'", "'nowhere'"},
        {"extdata_dotdot.onnx", FR_ERR_PARSE, "initializer 'W'", "'../secret.bin'"},
        {"extdata_absolute.onnx", FR_ERR_PARSE, "initializer 'W'", "'/etc/passwd' is an absolute path"},
        {"extdata_past_end.onnx", FR_ERR_PARSE, "initializer 'B'", "past the end of 'extdata_ok.bin'"},
        {"shape_overflow.onnx", FR_ERR_OOM, "initializer 'huge'", "overflow"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char rel[200], p[700];
        snprintf(rel, sizeof rel, "bad/%s", cases[i].file);
        fr_fixture(p, sizeof p, rel);
        fr_graph *g = (fr_graph *)&g;
        expect_msg(fr_onnx_load_file(p, &g), cases[i].want, p, cases[i].s1, cases[i].s2);
        CU_ASSERT_PTR_NULL(g);
    }
    char p[700];
    fr_graph *g;
    /* an unknown op loads; resolving names op and node */
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(p, sizeof p, "bad/unsupported_op.onnx"), &g));
    expect_msg(fr_graph_resolve_ops(g), FR_ERR_UNSUPPORTED, NULL, "'FancyOp'", "'fancy_node'");
    fr_graph_free(g);
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(p, sizeof p, "bad/gather_oob.onnx"), &g));
    fr_graph_free(g);
    /* valid external data: Y = X W + B from the bytes read, against PyTorch's Y */
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(p, sizeof p, "bad/extdata_ok.onnx"), &g));
    const fr_value *w = &g->values[fr_graph_find_value(g, "W")];
    const fr_value *bv = &g->values[fr_graph_find_value(g, "B")];
    CU_ASSERT_STRING_EQUAL(w->external_location, "extdata_ok.bin");
    CU_ASSERT_EQUAL_FATAL(w->constant->nbytes, 80);
    CU_ASSERT_EQUAL_FATAL(bv->constant->nbytes, 20);
    size_t nx, ny;
    const float *x = npy_f32(fr_fixture(p, sizeof p, "bad/extdata_ok_input_X.npy"), &nx);
    const float *y = npy_f32(fr_fixture(p, sizeof p, "bad/extdata_ok_output_Y.npy"), &ny);
    CU_ASSERT_EQUAL_FATAL(nx, 12);
    CU_ASSERT_EQUAL_FATAL(ny, 15);
    const float *wd = w->constant->data, *bd = bv->constant->data;
    double ref[15];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 5; j++) {
            double s = bd[j];
            for (int k = 0; k < 4; k++) s += (double)x[i * 4 + k] * wd[k * 5 + j];
            ref[i * 5 + j] = s;
        }
    CU_ASSERT(fr_rel_l2_d(y, ref, 15) < 1e-6); /* float32 result of a length-4 dot product */
    fr_graph_free(g);
    free_kept();
}

static CU_TestInfo bad_tests[] = {
    {"not_models", test_not_models},
    {"over_2gib", test_over_2gib},
    {"prefixes_and_corruption", test_prefixes_and_corruption},
    {"nesting_bomb", test_nesting_bomb},
    {"memory_bomb", test_memory_bomb},
    {"tensor_data", test_tensor_data},
    {"external_refused", test_external_refused},
    {"graph_structure", test_graph_structure},
    {"unknown_op_loads", test_unknown_op_loads},
    {"bad_fixtures", test_bad_fixtures},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"onnx_bad_input", suite_init, suite_clean, NULL, NULL, bad_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
