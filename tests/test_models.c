/* End to end on the fixture models exported from PyTorch (tests/fixtures/NAME/: model.onnx,
 * input_<name>.npy, output_<name>.npy): import, prepare with the inputs' shapes, run on the
 * CPU executor and compare every output with PyTorch's within 1e-4 relative L2 (integer and
 * bool outputs exactly). Also the broken fixtures in tests/fixtures/bad/: an out-of-range
 * Gather index must be FR_ERR_RANGE naming the node, an unsupported op FR_ERR_UNSUPPORTED
 * naming op, node and opset. */
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "graph/onnx_io.h"
#include "tests/harness.h"
#include "ops/op.h"
#include "passes/passes.h"
#include "runtime/exec/executor.h"
#include "runtime/io/npy.h"

/* The fixtures the generator writes; a missing one is a failure (a fixture dir found beyond
 * these is tested too). */
static const char *const expected_models[] = {"gpt2_tiny", "gpt2_tiny_op13", "llama_tiny",
                                              "llama_tiny_op14", "bert_tiny", NULL};

#define TOL_REL_L2 1e-4

typedef struct npy_file {
    char *name; /* the part between the prefix and ".npy" */
    fr_tensor *t;
} npy_file;

static void free_files(npy_file *f, int n)
{
    for (int i = 0; i < n; i++) {
        free(f[i].name);
        fr_tensor_free(f[i].t);
    }
    free(f);
}

/* Load every DIR/<prefix><name>.npy. Returns 0 and prints on failure. */
static int load_prefixed(const char *dir, const char *prefix, npy_file **out, int *n_out)
{
    DIR *d = opendir(dir);
    *out = NULL;
    *n_out = 0;
    if (!d) return 0;
    struct dirent *de;
    size_t pl = strlen(prefix);
    int ok = 1;
    while ((de = readdir(d)) && ok) {
        size_t len = strlen(de->d_name);
        if (len <= pl + 4 || strncmp(de->d_name, prefix, pl) != 0 || strcmp(de->d_name + len - 4, ".npy") != 0)
            continue;
        npy_file *nf = realloc(*out, (size_t)(*n_out + 1) * sizeof *nf);
        if (!nf) {
            ok = 0;
            break;
        }
        *out = nf;
        npy_file *f = &nf[(*n_out)++];
        f->name = strndup(de->d_name + pl, len - pl - 4);
        f->t = NULL;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        if (fr_npy_load(path, &f->t) != FR_OK) {
            fprintf(stderr, "\n  %s\n", fr_last_error());
            ok = 0;
        }
    }
    closedir(d);
    return ok;
}

/* The graph input/output a fixture file stands for: same name, or the name with characters
 * unsafe in file names replaced by '_'. */
static int name_matches(const char *value_name, const char *file_name)
{
    if (strcmp(value_name, file_name) == 0) return 1;
    size_t n = strlen(value_name);
    if (strlen(file_name) != n) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = value_name[i];
        int safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                   c == '_' || c == '-' || c == '.';
        if ((safe ? c : '_') != file_name[i]) return 0;
    }
    return 1;
}

static double to_double(const fr_tensor *t, int64_t i) { return fr_tensor_get_f64(t, i); }

/* Returns NULL when `got` matches `want`, else a description (static buffer). */
static const char *compare(const fr_tensor *got, const fr_tensor *want, double *rel_out)
{
    static char why[512];
    char a[128], b[128];
    int same_shape = got->rank == want->rank;
    for (int d = 0; same_shape && d < got->rank; d++) same_shape = got->dims[d] == want->dims[d];
    if (!same_shape || got->dtype != want->dtype) {
        snprintf(why, sizeof why, "got %s %s, expected %s %s", fr_dtype_name(got->dtype),
                 fr_shape_str(got->rank, got->dims, a, sizeof a), fr_dtype_name(want->dtype),
                 fr_shape_str(want->rank, want->dims, b, sizeof b));
        return why;
    }
    int64_t n = fr_tensor_numel(want);
    if (!fr_dtype_is_float(want->dtype)) {
        for (int64_t i = 0; i < n; i++)
            if (fr_tensor_get_i64(got, i) != fr_tensor_get_i64(want, i)) {
                snprintf(why, sizeof why, "element %lld is %lld, expected %lld", (long long)i,
                         (long long)fr_tensor_get_i64(got, i), (long long)fr_tensor_get_i64(want, i));
                return why;
            }
        return NULL;
    }
    double num = 0, den = 0, worst = 0;
    int64_t worst_i = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = to_double(got, i), y = to_double(want, i), d = x - y;
        if (isnan(x) != isnan(y)) {
            snprintf(why, sizeof why, "element %lld is %g, expected %g", (long long)i, x, y);
            return why;
        }
        if (isnan(x)) continue;
        num += d * d;
        den += y * y;
        if (fabs(d) > worst) {
            worst = fabs(d);
            worst_i = i;
        }
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    if (rel > *rel_out) *rel_out = rel;
    if (!(rel <= TOL_REL_L2)) {
        snprintf(why, sizeof why, "relative L2 error %.3g > %.0e (worst element %lld: %g vs %g)",
                 rel, TOL_REL_L2, (long long)worst_i, to_double(got, worst_i), to_double(want, worst_i));
        return why;
    }
    return NULL;
}

/* Runs one fixture dir; returns 1 when everything matched (prints the reason otherwise). */
static int run_fixture(const char *name)
{
    char dir[1024], path[1200];
    fr_fixture(dir, sizeof dir, name);
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    npy_file *ins = NULL, *outs = NULL;
    int n_in = 0, n_out = 0, ok = 0;
    fr_graph *g = NULL;
    fr_exec *e = NULL;
    fr_input_shape *shapes = NULL;
    if (!load_prefixed(dir, "input_", &ins, &n_in) || !load_prefixed(dir, "output_", &outs, &n_out)) {
        fprintf(stderr, "\n  model %s: cannot read its .npy files\n", name);
        goto done;
    }
    if (n_in == 0 || n_out == 0) {
        fprintf(stderr, "\n  model %s: no input_*.npy or output_*.npy files in %s\n", name, dir);
        goto done;
    }
    if (fr_onnx_load_file(path, &g) != FR_OK) {
        fprintf(stderr, "\n  model %s: load: %s\n", name, fr_last_error());
        goto done;
    }
    shapes = calloc((size_t)n_in, sizeof *shapes);
    for (int i = 0; i < n_in; i++) {
        /* map the file to the graph input it names */
        shapes[i].name = NULL;
        for (int k = 0; k < g->n_inputs; k++)
            if (name_matches(g->values[g->inputs[k]].name, ins[i].name))
                shapes[i].name = g->values[g->inputs[k]].name;
        if (!shapes[i].name) {
            fprintf(stderr, "\n  model %s: input_%s.npy matches no graph input\n", name, ins[i].name);
            goto done;
        }
        shapes[i].rank = ins[i].t->rank;
        memcpy(shapes[i].dims, ins[i].t->dims, sizeof shapes[i].dims);
    }
    fr_prepare_options opt;
    fr_prepare_options_default(&opt);
    opt.input_shapes = shapes;
    opt.n_input_shapes = n_in;
    if (fr_prepare_forward(g, &opt, NULL) != FR_OK || fr_exec_new(g, &e) != FR_OK) {
        fprintf(stderr, "\n  model %s: prepare: %s\n", name, fr_last_error());
        goto done;
    }
    for (int i = 0; i < n_in; i++)
        if (fr_exec_set_input(e, shapes[i].name, ins[i].t) != FR_OK) {
            fprintf(stderr, "\n  model %s: %s\n", name, fr_last_error());
            goto done;
        }
    if (fr_exec_run(e) != FR_OK) {
        fprintf(stderr, "\n  model %s: run: %s\n", name, fr_last_error());
        goto done;
    }
    ok = 1;
    double worst = 0;
    for (int i = 0; i < n_out; i++) {
        const fr_tensor *got = NULL;
        for (int k = 0; k < fr_exec_n_outputs(e) && !got; k++)
            if (name_matches(fr_exec_output_name(e, k), outs[i].name)) got = fr_exec_output_at(e, k);
        const char *why = got ? compare(got, outs[i].t, &worst) : "no graph output has this name";
        if (why) {
            fprintf(stderr, "\n  model %s: output '%s': %s\n", name, outs[i].name, why);
            ok = 0;
        }
    }
    if (ok) printf("\n    %s: %d outputs match (worst relative L2 %.2g) ", name, n_out, worst);
done:
    fr_exec_free(e);
    fr_graph_free(g);
    free(shapes);
    free_files(ins, n_in);
    free_files(outs, n_out);
    return ok;
}

static int is_model_dir(const char *name)
{
    char path[1200], rel[600];
    struct stat sb;
    snprintf(rel, sizeof rel, "%s/model.onnx", name);
    fr_fixture(path, sizeof path, rel);
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

static void test_fixture_models(void)
{
    int tested = 0;
    for (int i = 0; expected_models[i]; i++) {
        if (!is_model_dir(expected_models[i])) {
            fprintf(stderr, "\n  model %s: fixture missing (tests/fixtures/%s/model.onnx)\n",
                    expected_models[i], expected_models[i]);
            CU_FAIL("fixture missing");
            continue;
        }
        int ok = run_fixture(expected_models[i]);
        if (!ok) fprintf(stderr, "  (model %s failed)\n", expected_models[i]);
        CU_ASSERT(ok);
        tested++;
    }
    /* any other fixture model dir */
    char root[1024];
    fr_fixture(root, sizeof root, "");
    DIR *d = opendir(root);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        int known = de->d_name[0] == '.';
        for (int i = 0; expected_models[i] && !known; i++) known = strcmp(de->d_name, expected_models[i]) == 0;
        if (known || !is_model_dir(de->d_name)) continue;
        int ok = run_fixture(de->d_name);
        if (!ok) fprintf(stderr, "  (model %s failed)\n", de->d_name);
        CU_ASSERT(ok);
        tested++;
    }
    if (d) closedir(d);
    CU_ASSERT(tested >= 5);
}

/* Load a bad fixture, feed its input (if any) and run; returns the first failing status. */
static fr_status run_bad(const char *model_rel, const char *input_rel, fr_graph **gout)
{
    char path[1024];
    fr_graph *g = NULL;
    fr_exec *e = NULL;
    fr_tensor *in = NULL;
    *gout = NULL;
    fr_status st = fr_onnx_load_file(fr_fixture(path, sizeof path, model_rel), &g);
    if (st != FR_OK) return st;
    *gout = g;
    fr_input_shape shp = {0};
    fr_prepare_options opt;
    fr_prepare_options_default(&opt);
    if (input_rel) {
        st = fr_npy_load(fr_fixture(path, sizeof path, input_rel), &in);
        if (st != FR_OK) return st;
        if (g->n_inputs != 1) return fr_error(FR_ERR_INTERNAL, "test expects one graph input");
        shp.name = g->values[g->inputs[0]].name;
        shp.rank = in->rank;
        memcpy(shp.dims, in->dims, sizeof shp.dims);
        opt.input_shapes = &shp;
        opt.n_input_shapes = 1;
    }
    st = fr_prepare_forward(g, &opt, NULL);
    if (st == FR_OK) st = fr_exec_new(g, &e);
    if (st == FR_OK && in) st = fr_exec_set_input(e, shp.name, in);
    if (st == FR_OK) st = fr_exec_run(e);
    fr_exec_free(e);
    fr_tensor_free(in);
    return st;
}

static void test_gather_out_of_range(void)
{
    char path[1024];
    fr_graph *orig = NULL;
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(path, sizeof path, "bad/gather_oob.onnx"), &orig));
    const char *gather = NULL;
    for (int i = 0; i < orig->n_nodes; i++)
        if (strcmp(orig->nodes[i].op_type, "Gather") == 0) gather = orig->nodes[i].name;
    CU_ASSERT_PTR_NOT_NULL_FATAL(gather);
    fr_graph *g;
    fr_status st = run_bad("bad/gather_oob.onnx", "bad/gather_oob_input.npy", &g);
    if (st != FR_ERR_RANGE || !strstr(fr_last_error(), gather))
        fprintf(stderr, "\n  gather_oob: status %d: %s\n", (int)st, fr_last_error());
    CU_ASSERT_EQUAL(st, FR_ERR_RANGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(fr_last_error(), gather));
    fr_graph_free(g);
    fr_graph_free(orig);
}

static void test_unsupported_op(void)
{
    char path[1024];
    fr_graph *orig = NULL;
    FR_ASSERT_OK(fr_onnx_load_file(fr_fixture(path, sizeof path, "bad/unsupported_op.onnx"), &orig));
    const fr_node *bad = NULL;
    for (int i = 0; i < orig->n_nodes && !bad; i++)
        if (!fr_op_find(orig->nodes[i].domain, orig->nodes[i].op_type)) bad = &orig->nodes[i];
    CU_ASSERT_PTR_NOT_NULL_FATAL(bad);
    char opset[32];
    snprintf(opset, sizeof opset, "%lld", (long long)fr_graph_opset(orig, bad->domain));
    fr_graph *g;
    fr_status st = run_bad("bad/unsupported_op.onnx", NULL, &g);
    const char *msg = fr_last_error();
    if (st != FR_ERR_UNSUPPORTED || !strstr(msg, bad->op_type) || !strstr(msg, bad->name) || !strstr(msg, opset))
        fprintf(stderr, "\n  unsupported_op (op %s, node %s, opset %s): status %d: %s\n", bad->op_type,
                bad->name, opset, (int)st, msg);
    CU_ASSERT_EQUAL(st, FR_ERR_UNSUPPORTED);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, bad->op_type));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, bad->name));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, opset));
    fr_graph_free(g);
    fr_graph_free(orig);
}

static CU_TestInfo model_tests[] = {
    {"fixture_models", test_fixture_models},
    {"gather_out_of_range", test_gather_out_of_range},
    {"unsupported_op", test_unsupported_op},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"models", NULL, NULL, NULL, NULL, model_tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
