/* Hostile ONNX and .npy files at the library level, beyond test_onnx_bad_input:
 * opsets no release has (99, 2^40, 0), NUL bytes inside names and external-data locations
 * (protobuf-c would cut the string there), external data that is a hard or symbolic link or a FIFO, and
 * files whose size bombs were quadratic in the importer (2x10^5 attributes, opset imports and
 * graph inputs: each must load within seconds, under alarm()); .npy headers holding a
 * NUL, and a FIFO given as .npy. */
#define _GNU_SOURCE /* memmem */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "graph/onnx_io.h"
#include "tests/harness.h"
#include "tests/onnx_test_util.h"
#include "runtime/io/npy.h"

static char tmp[400];

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

static const char *T(const char *name)
{
    static char buf[4][700];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmp, name);
    return buf[k];
}

/* st is a refusal with `want` whose message holds both needles. */
static void expect_refusal(fr_status st, fr_status want, const char *n1, const char *n2)
{
    const char *m = fr_last_error();
    int ok = st == want && (!n1 || strstr(m, n1)) && (!n2 || strstr(m, n2));
    if (!ok)
        fprintf(stderr, "\n  expected %s naming [%s] [%s]\n  got %s: %s\n", fr_status_name(want), n1 ? n1 : "",
                n2 ? n2 : "", fr_status_name(st), m);
    CU_ASSERT(ok);
}

/* y = Identity(w), w a [2,3] float initializer (raw data unless external is set). */
static Onnx__TensorProto *identity_model(mbuild *b, int64_t opset)
{
    mb_init(b, opset);
    int64_t d[2] = {2, 3};
    Onnx__TensorProto *w = mk_tensor("w", FR_F32, 2, d);
    set_raw(w, NULL, 24);
    b->init[b->g.n_initializer++] = w;
    mb_node(b, "Identity", "id", "w", "y");
    b->out[b->g.n_output++] = mk_vi_dims("y", FR_F32, 2, d);
    return w;
}

static fr_status load_built(mbuild *b, const char *file)
{
    fr_graph *g = NULL;
    mb_save(b, T(file));
    fr_status st = fr_onnx_load_file(T(file), &g);
    fr_graph_free(g);
    return st;
}

static void test_opsets(void)
{
    mbuild b;
    const int64_t bad[] = {99, (int64_t)1 << 40, 0, -5};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        identity_model(&b, bad[i]);
        char want[64];
        snprintf(want, sizeof want, "opset %lld of ai.onnx", (long long)bad[i]);
        expect_refusal(load_built(&b, "opset.onnx"), FR_ERR_UNSUPPORTED, "opset.onnx", want);
    }
    /* the same model at the newest real opset, and a custom domain at any version, load */
    identity_model(&b, 28); /* the newest opset (ONNX 1.23) */
    b.os[1].domain = "com.example";
    b.os[1].version = 99;
    b.m.n_opset_import = 2;
    FR_ASSERT_OK(load_built(&b, "opset_ok.onnx"));
    free_kept();
}

static void test_nul_in_strings(void)
{
    mbuild b;
    char p[700];
    unsigned char zeros[24] = {0};
    snprintf(p, sizeof p, "%s/w.bin", tmp);
    write_bytes(p, zeros, sizeof zeros);
    /* "w.bin\0../../etc/passwd": protobuf-c sees "w.bin", another reader the whole string */
    const char tail[] = "\0../../etc/passwd";
    size_t len;
    unsigned char *buf, *loc;
    /* a location as long as the crafted one, patched in the packed bytes */
    Onnx__TensorProto *w = identity_model(&b, 17);
    w->has_raw_data = 0;
    char longer[32];
    memset(longer, 'x', sizeof tail - 1 + 5);
    longer[sizeof tail - 1 + 5] = '\0';
    set_external(w, longer, "0", "24");
    buf = mb_pack(&b, &len);
    loc = memmem(buf, len, longer, strlen(longer));
    CU_ASSERT_PTR_NOT_NULL_FATAL(loc);
    memcpy(loc, "w.bin", 5);
    memcpy(loc + 5, tail, sizeof tail - 1);
    fr_graph *g = NULL;
    snprintf(p, sizeof p, "%s/nul.onnx", tmp);
    write_bytes(p, buf, len);
    expect_refusal(fr_onnx_load_file(p, &g), FR_ERR_PARSE, "nul.onnx", "StringStringEntryProto.value");
    /* a NUL in a node name too; one in a doc string is only text */
    identity_model(&b, 17);
    b.node[0]->name = kstr("idXYZ");
    buf = mb_pack(&b, &len);
    loc = memmem(buf, len, "idXYZ", 5);
    CU_ASSERT_PTR_NOT_NULL_FATAL(loc);
    loc[2] = '\0';
    expect_refusal(fr_onnx_load_buffer(buf, len, NULL, "nul-name", &g), FR_ERR_PARSE, "nul-name", "NodeProto.name");
    identity_model(&b, 17);
    b.node[0]->doc_string = kstr("docXYZ");
    buf = mb_pack(&b, &len);
    loc = memmem(buf, len, "docXYZ", 6);
    loc[3] = '\0';
    FR_ASSERT_OK(fr_onnx_load_buffer(buf, len, NULL, "nul-doc", &g));
    fr_graph_free(g);
    free_kept();
}

/* External data that is a hard link (its other name may be anywhere), a symbolic link (even
 * one that stays in the folder), a FIFO or a sparse file of holes is refused; the same bytes
 * as a plain file load. */
static void test_external_links_and_fifos(void)
{
    mbuild b;
    char p[700], q[700];
    unsigned char zeros[24] = {0};
    mkdir(T("outside"), 0755);
    mkdir(T("model"), 0755);
    snprintf(p, sizeof p, "%s/outside/secret.bin", tmp);
    write_bytes(p, zeros, sizeof zeros);
    snprintf(q, sizeof q, "%s/model/linked.bin", tmp);
    CU_ASSERT_EQUAL_FATAL(link(p, q), 0);
    snprintf(q, sizeof q, "%s/model/fifo.bin", tmp);
    CU_ASSERT_EQUAL_FATAL(mkfifo(q, 0644), 0);
    snprintf(q, sizeof q, "%s/model/plain.bin", tmp);
    write_bytes(q, zeros, sizeof zeros);
    /* 1 GiB of holes for a [2^28] float tensor: refused before anything is allocated */
    snprintf(q, sizeof q, "%s/model/sparse.bin", tmp);
    int fd = open(q, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL_FATAL(ftruncate(fd, (off_t)1 << 30), 0);
    close(fd);
    /* symbolic links, to the plain file beside them and to a folder inside: refused too */
    CU_ASSERT_EQUAL_FATAL(symlink("plain.bin", T("model/sym.bin")), 0);
    CU_ASSERT_EQUAL_FATAL(symlink(".", T("model/here")), 0);
    const struct {
        const char *loc, *length, *needle;
    } cases[] = {{"linked.bin", "24", "hard links"}, {"fifo.bin", "24", "FIFO"},
                 {"sym.bin", "24", "location 'sym.bin': 'sym.bin' is a symbolic link"},
                 {"here/plain.bin", "24", "location 'here/plain.bin': 'here' is a symbolic link"},
                 {"sparse.bin", "1073741824", "sparse file"}, {"plain.bin", "24", NULL}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        Onnx__TensorProto *w = identity_model(&b, 17);
        w->has_raw_data = 0;
        if (strcmp(cases[i].loc, "sparse.bin") == 0) {
            w->dims[0] = (int64_t)1 << 27;
            w->dims[1] = 2;
        }
        set_external(w, cases[i].loc, "0", cases[i].length);
        alarm(20);
        fr_status st = load_built(&b, "model/m.onnx");
        alarm(0);
        if (cases[i].needle)
            expect_refusal(st, strcmp(cases[i].loc, "sparse.bin") ? FR_ERR_IO : FR_ERR_PARSE, "initializer 'w'",
                           cases[i].needle);
        else
            FR_ASSERT_OK(st);
    }
    free_kept();
}

/* Sizes that made the importer quadratic (300k attributes took more than 300 s): each load
 * must end within 30 s (alarm: a regression kills the test instead of hanging it). */
static void test_quadratic_bombs(void)
{
    /* under the sanitizers (FR_TEST_SANITIZE) a smaller bomb: memory errors, not speed */
    const int N = getenv("FR_TEST_SANITIZE") ? 30000 : 200000;
    mbuild b;
    identity_model(&b, 17);
    Onnx__NodeProto *nd = b.node[0];
    nd->attribute = keep(calloc((size_t)N, sizeof *nd->attribute));
    for (int i = 0; i < N; i++) {
        Onnx__AttributeProto *a = keep(malloc(sizeof *a));
        onnx__attribute_proto__init(a);
        char name[32];
        snprintf(name, sizeof name, "a%d", i);
        a->name = kstr(name);
        a->has_type = 1;
        a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
        a->has_i = 1;
        a->i = i;
        nd->attribute[i] = a;
    }
    nd->n_attribute = (size_t)N;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    alarm(30);
    FR_ASSERT_OK(load_built(&b, "attrs.onnx"));
    /* the same name twice, far apart: found */
    nd->attribute[N - 1]->name = nd->attribute[1]->name;
    expect_refusal(load_built(&b, "attrs_dup.onnx"), FR_ERR_PARSE, "attrs_dup.onnx", "attribute 'a1' is given twice");
    nd->n_attribute = 0;

    /* as many opset imports of distinct domains, then graph inputs */
    Onnx__OperatorSetIdProto **os = keep(calloc((size_t)N, sizeof *os));
    for (int i = 0; i < N; i++) {
        os[i] = keep(malloc(sizeof **os));
        onnx__operator_set_id_proto__init(os[i]);
        char dom[32];
        snprintf(dom, sizeof dom, "d%d", i);
        os[i]->domain = i ? kstr(dom) : "";
        os[i]->has_version = 1;
        os[i]->version = 17;
    }
    b.m.opset_import = os;
    b.m.n_opset_import = (size_t)N;
    alarm(30);
    FR_ASSERT_OK(load_built(&b, "opsets.onnx"));
    Onnx__ValueInfoProto **in = keep(calloc((size_t)N, sizeof *in));
    for (int i = 0; i < N; i++) {
        char name[32];
        snprintf(name, sizeof name, "x%d", i);
        in[i] = mk_vi(name, FR_F32, "2");
    }
    b.g.input = in;
    b.g.n_input = (size_t)N;
    alarm(30);
    FR_ASSERT_OK(load_built(&b, "inputs.onnx"));
    alarm(0);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    fprintf(stderr, "(%.2f s) ", s);
    free_kept();
}

static void test_npy(void)
{
    fr_tensor *t = NULL;
    int64_t d[1] = {3};
    FR_ASSERT_OK(fr_tensor_new(FR_F32, 1, d, "x", &t));
    FR_ASSERT_OK(fr_npy_save(T("x.npy"), t));
    fr_tensor_free(t);
    size_t len;
    char *s = NULL;
    FILE *f = fopen(T("x.npy"), "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    s = malloc(4096);
    len = fread(s, 1, 4096, f);
    fclose(f);
    /* a NUL inside the header's padding, then inside the dict */
    char *nl = memchr(s, '\n', len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(nl);
    nl[-1] = '\0';
    write_bytes(T("nul.npy"), s, len);
    t = NULL;
    expect_refusal(fr_npy_load(T("nul.npy"), &t), FR_ERR_PARSE, "nul.npy", "NUL");
    CU_ASSERT_PTR_NULL(t);
    char *descr = memmem(s, len, "'descr'", 7);
    descr[2] = '\0';
    write_bytes(T("nul2.npy"), s, len);
    expect_refusal(fr_npy_load(T("nul2.npy"), &t), FR_ERR_PARSE, "nul2.npy", "NUL");
    free(s);
    CU_ASSERT_EQUAL_FATAL(mkfifo(T("fifo.npy"), 0644), 0);
    alarm(20);
    expect_refusal(fr_npy_load(T("fifo.npy"), &t), FR_ERR_IO, "fifo.npy", "FIFO");
    alarm(0);
}

static CU_TestInfo tests[] = {
    {"opsets no release has are refused", test_opsets},
    {"NUL bytes in names and external-data locations", test_nul_in_strings},
    {"external data: hard links, FIFOs, sparse files refused", test_external_links_and_fifos},
    {"2x10^5 attributes, opset imports, graph inputs: linear", test_quadratic_bombs},
    {".npy: NUL in the header, FIFO", test_npy},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"hostile_onnx", suite_init, suite_clean, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
