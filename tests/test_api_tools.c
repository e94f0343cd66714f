/* The public C API that tools are built on (the fp8run CLI uses nothing else), each call with
 * its success and error paths (NULL handles, wrong struct sizes, wrong names and shapes):
 *  - host tensors: element sizes, decoding bfloat16/FP8/integers to float32, .npy round trips
 *    and refusals (not a .npy file, no NumPy type, wrong byte count);
 *  - model inspection: what the file says (producer, opsets, counts, bytes), the op histogram
 *    (sorted, adding up to the node count);
 *  - preparation for static shapes (dims named in errors) and the forward pass on host tensors,
 *    whose logits equal an evaluation session's;
 *  - the generated Llama (presets, checks, parameter count, names usable at once);
 *  - compiled graphs: writing one, what it is for, its recorded report with scaling state and
 *    description, training it, FP8 statistics, session device/memory, checkpoints' loader
 *    state, export of the original model equal to the session's;
 *  - training FLOPs by the formula; uint8 token files.
 * Only <fp8run.h> is used, plus the test harness for folders and fixtures. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fp8run.h"
#include "tests/harness.h"

#define API_OK(expr)                                                                                 \
    do {                                                                                             \
        fp8run_status s__ = (expr);                                                                  \
        if (s__ != FP8RUN_OK) fprintf(stderr, "\n  %s -> %d: %s\n", #expr, (int)s__, fp8run_last_error()); \
        CU_ASSERT_EQUAL_FATAL(s__, FP8RUN_OK);                                                       \
    } while (0)

/* expr fails with `want` and this thread's message contains `needle` (when non-NULL). */
#define API_ERR(expr, want, needle) api_err_check((expr), (want), (needle), #expr, __LINE__)

static void api_err_check(fp8run_status got, fp8run_status want, const char *needle, const char *what, int line)
{
    const char *msg = fp8run_last_error();
    int ok = got == want && msg[0] && (!needle || strstr(msg, needle));
    if (!ok)
        fprintf(stderr, "\n  line %d: %s -> %d (%s), wanted %d with '%s': %s\n", line, what, (int)got,
                fp8run_status_name(got), (int)want, needle ? needle : "", msg);
    CU_ASSERT(ok);
}

static char tmp[512];

static const char *path_in(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", tmp, name);
    return buf;
}

static int suite_init(void)
{
    fr_test_tmpdir(tmp, sizeof tmp);
    return tmp[0] ? 0 : 1;
}

static int suite_clean(void)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    return system(cmd) == 0 ? 0 : 1;
}

/* A small generated Llama (d 16, 1 layer, 2 heads, 1 kv head, ffn 32, vocab 20). */
static fp8run_model *small_llama(void)
{
    fp8run_llama_config c;
    if (fp8run_llama_config_init(&c, sizeof c) != FP8RUN_OK) return NULL;
    c.dim = 16;
    c.layers = 1;
    c.heads = 2;
    c.kv_heads = 1;
    c.ffn = 32;
    c.vocab = 20;
    c.max_seq = 16;
    c.seed = 3;
    fp8run_model *m = NULL;
    if (fp8run_model_generate_llama(&c, &m) != FP8RUN_OK) fprintf(stderr, "%s\n", fp8run_last_error());
    return m;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    *len = 0;
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s) *len = fread(s, 1, (size_t)n, f);
    fclose(f);
    return s;
}

static int same_file(const char *a, const char *b)
{
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    int same = x && y && na > 0 && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

/* ---- host tensors and .npy ---- */

static void test_tensors_and_npy(void)
{
    CU_ASSERT_EQUAL(fp8run_dtype_size(FP8RUN_DTYPE_FLOAT32), 4);
    CU_ASSERT_EQUAL(fp8run_dtype_size(FP8RUN_DTYPE_BFLOAT16), 2);
    CU_ASSERT_EQUAL(fp8run_dtype_size(FP8RUN_DTYPE_FLOAT8E4M3FN), 1);
    CU_ASSERT_EQUAL(fp8run_dtype_size(FP8RUN_DTYPE_INT64), 8);
    CU_ASSERT_EQUAL(fp8run_dtype_size(FP8RUN_DTYPE_STRING), 0);
    CU_ASSERT_EQUAL(fp8run_dtype_size(FP8RUN_DTYPE_UNDEFINED), 0);
    CU_ASSERT_EQUAL(fp8run_dtype_size((fp8run_dtype)99), 0);

    /* 1.0 and -2.5 in bfloat16, 1.0 and -448 in e4m3, 1.0 and 57344 in e5m2 */
    const uint16_t bf[2] = {0x3f80, 0xc020};
    const uint8_t e4[2] = {0x38, 0xfe}, e5[2] = {0x3c, 0x7b};
    const int64_t i64[2] = {-3, 1 << 20};
    const uint8_t b[2] = {1, 0};
    float out[2];
    API_OK(fp8run_convert_to_float32(FP8RUN_DTYPE_BFLOAT16, bf, 2, out));
    CU_ASSERT(out[0] == 1.0f && out[1] == -2.5f);
    API_OK(fp8run_convert_to_float32(FP8RUN_DTYPE_FLOAT8E4M3FN, e4, 2, out));
    CU_ASSERT(out[0] == 1.0f && out[1] == -448.0f);
    API_OK(fp8run_convert_to_float32(FP8RUN_DTYPE_FLOAT8E5M2, e5, 2, out));
    CU_ASSERT(out[0] == 1.0f && out[1] == 57344.0f);
    API_OK(fp8run_convert_to_float32(FP8RUN_DTYPE_INT64, i64, 2, out));
    CU_ASSERT(out[0] == -3.0f && out[1] == 1048576.0f);
    API_OK(fp8run_convert_to_float32(FP8RUN_DTYPE_BOOL, b, 2, out));
    CU_ASSERT(out[0] == 1.0f && out[1] == 0.0f);
    API_OK(fp8run_convert_to_float32(FP8RUN_DTYPE_FLOAT32, NULL, 0, NULL));
    API_ERR(fp8run_convert_to_float32(FP8RUN_DTYPE_STRING, b, 1, out), FP8RUN_ERR_UNSUPPORTED, "string");
    API_ERR(fp8run_convert_to_float32(FP8RUN_DTYPE_FLOAT32, NULL, 1, out), FP8RUN_ERR_INVALID_ARG, "src is NULL");

    CU_ASSERT_EQUAL(fp8run_npy_supports(FP8RUN_DTYPE_FLOAT32), 1);
    CU_ASSERT_EQUAL(fp8run_npy_supports(FP8RUN_DTYPE_INT64), 1);
    CU_ASSERT_EQUAL(fp8run_npy_supports(FP8RUN_DTYPE_BFLOAT16), 0);
    CU_ASSERT_EQUAL(fp8run_npy_supports(FP8RUN_DTYPE_FLOAT8E5M2), 0);
    CU_ASSERT_EQUAL(fp8run_npy_supports(FP8RUN_DTYPE_UNDEFINED), 0);

    /* round trips */
    char p[700];
    float x[6] = {0.5f, -1, 2, 3.25f, -0.125f, 1e-3f};
    fp8run_tensor t = {.struct_size = sizeof t, .dtype = FP8RUN_DTYPE_FLOAT32, .rank = 2, .dims = {2, 3},
                       .data = x, .nbytes = sizeof x};
    API_OK(fp8run_npy_save(path_in(p, sizeof p, "x.npy"), &t));
    fp8run_tensor r = {.struct_size = sizeof r};
    API_OK(fp8run_npy_load(p, &r));
    CU_ASSERT(r.dtype == FP8RUN_DTYPE_FLOAT32 && r.rank == 2 && r.dims[0] == 2 && r.dims[1] == 3);
    CU_ASSERT(r.nbytes == sizeof x && memcmp(r.data, x, sizeof x) == 0);
    CU_ASSERT_PTR_NULL(r.name);
    fp8run_npy_free(&r);
    CU_ASSERT_PTR_NULL(r.data);
    CU_ASSERT_EQUAL(r.nbytes, 0);
    fp8run_npy_free(NULL);
    int64_t ids[4] = {7, -1, 0, 123456789012LL};
    fp8run_tensor ti = {.struct_size = sizeof ti, .dtype = FP8RUN_DTYPE_INT64, .rank = 1, .dims = {4},
                        .data = ids, .nbytes = sizeof ids};
    API_OK(fp8run_npy_save(path_in(p, sizeof p, "i.npy"), &ti));
    API_OK(fp8run_npy_load(p, &r));
    CU_ASSERT(r.dtype == FP8RUN_DTYPE_INT64 && r.rank == 1 && memcmp(r.data, ids, sizeof ids) == 0);
    fp8run_npy_free(&r);
    /* a scalar */
    fp8run_tensor ts = {.struct_size = sizeof ts, .dtype = FP8RUN_DTYPE_FLOAT32, .rank = 0, .data = x, .nbytes = 4};
    API_OK(fp8run_npy_save(path_in(p, sizeof p, "s.npy"), &ts));
    API_OK(fp8run_npy_load(p, &r));
    CU_ASSERT(r.rank == 0 && r.nbytes == 4 && ((float *)r.data)[0] == 0.5f);
    fp8run_npy_free(&r);

    /* refusals */
    char model[600];
    fr_fixture(model, sizeof model, "llama_tiny/model.onnx");
    API_ERR(fp8run_npy_load(model, &r), FP8RUN_ERR_PARSE, "not a .npy file");
    CU_ASSERT_PTR_NULL(r.data);
    API_ERR(fp8run_npy_load(path_in(p, sizeof p, "missing.npy"), &r), FP8RUN_ERR_IO, "missing.npy");
    API_ERR(fp8run_npy_load(NULL, &r), FP8RUN_ERR_INVALID_ARG, "no path");
    API_ERR(fp8run_npy_load(model, NULL), FP8RUN_ERR_INVALID_ARG, "out is NULL");
    fp8run_tensor small = {.struct_size = 8};
    API_ERR(fp8run_npy_load(model, &small), FP8RUN_ERR_INVALID_ARG, "struct_size");
    fp8run_tensor tb = {.struct_size = sizeof tb, .dtype = FP8RUN_DTYPE_BFLOAT16, .rank = 1, .dims = {2},
                        .data = (void *)bf, .nbytes = sizeof bf};
    API_ERR(fp8run_npy_save(path_in(p, sizeof p, "bf.npy"), &tb), FP8RUN_ERR_UNSUPPORTED, NULL);
    t.nbytes = 8;
    API_ERR(fp8run_npy_save(path_in(p, sizeof p, "x2.npy"), &t), FP8RUN_ERR_SHAPE, "holds 8 bytes");
    t.nbytes = sizeof x;
    t.rank = 9;
    API_ERR(fp8run_npy_save(p, &t), FP8RUN_ERR_INVALID_ARG, "rank 9");
    API_ERR(fp8run_npy_save(p, NULL), FP8RUN_ERR_INVALID_ARG, "tensor is NULL");
    t.rank = 2;
    API_ERR(fp8run_npy_save(NULL, &t), FP8RUN_ERR_INVALID_ARG, "no path");
}

/* ---- model inspection ---- */

static void test_model_info(void)
{
    char model[600];
    fr_fixture(model, sizeof model, "llama_tiny/model.onnx");
    fp8run_model *m = NULL;
    API_OK(fp8run_model_load(model, &m));
    fp8run_model_info mi = {.struct_size = sizeof mi};
    API_OK(fp8run_model_get_info(m, &mi));
    CU_ASSERT_PTR_NOT_NULL(mi.producer_name);
    CU_ASSERT_PTR_NOT_NULL(mi.producer_version);
    CU_ASSERT_PTR_NOT_NULL(mi.graph_name);
    CU_ASSERT(mi.ir_version > 0);
    CU_ASSERT(mi.n_opsets >= 1);
    CU_ASSERT(mi.n_nodes > 10);
    CU_ASSERT(mi.n_initializers >= fp8run_model_param_count(m));
    CU_ASSERT(mi.initializer_bytes >= 4 * (uint64_t)fp8run_model_param_elements(m));
    CU_ASSERT(mi.n_op_types > 3);
    CU_ASSERT_EQUAL(mi.compiled, 0);
    int default_domain = 0;
    for (int i = 0; i < mi.n_opsets; i++) {
        const char *d = NULL;
        int64_t v = 0;
        API_OK(fp8run_model_opset(m, i, &d, &v));
        CU_ASSERT_PTR_NOT_NULL(d);
        CU_ASSERT(v > 0);
        default_domain += d && !d[0];
    }
    CU_ASSERT_EQUAL(default_domain, 1);
    API_OK(fp8run_model_opset(m, 0, NULL, NULL));
    /* the histogram: most frequent first, equal counts by name, adding up to the nodes */
    int total = 0, prev = 1 << 30;
    const char *prev_name = "";
    int matmul = 0;
    for (int i = 0; i < mi.n_op_types; i++) {
        fp8run_op_info op = {.struct_size = sizeof op};
        API_OK(fp8run_model_op(m, i, &op));
        CU_ASSERT(op.count >= 1 && op.count <= prev);
        if (op.count == prev) CU_ASSERT(strcmp(prev_name, op.op_type) < 0);
        if (strcmp(op.op_type, "MatMul") == 0) matmul = op.count;
        total += op.count;
        prev = op.count;
        prev_name = op.op_type;
    }
    CU_ASSERT_EQUAL(total, mi.n_nodes);
    CU_ASSERT(matmul >= 15); /* 2 layers x 7 projections + LM head, attention besides */

    /* errors */
    API_ERR(fp8run_model_get_info(NULL, &mi), FP8RUN_ERR_INVALID_ARG, "model is NULL");
    API_ERR(fp8run_model_get_info(m, NULL), FP8RUN_ERR_INVALID_ARG, "info is NULL");
    fp8run_model_info small = {.struct_size = 8};
    API_ERR(fp8run_model_get_info(m, &small), FP8RUN_ERR_INVALID_ARG, "struct_size is 8");
    API_ERR(fp8run_model_opset(m, mi.n_opsets, NULL, NULL), FP8RUN_ERR_RANGE, "outside");
    API_ERR(fp8run_model_opset(NULL, 0, NULL, NULL), FP8RUN_ERR_INVALID_ARG, "model is NULL");
    fp8run_op_info op = {.struct_size = sizeof op};
    API_ERR(fp8run_model_op(m, -1, &op), FP8RUN_ERR_RANGE, "outside");
    API_ERR(fp8run_model_op(m, mi.n_op_types, &op), FP8RUN_ERR_RANGE, "outside");
    API_ERR(fp8run_model_op(NULL, 0, &op), FP8RUN_ERR_INVALID_ARG, "model is NULL");
    API_ERR(fp8run_model_op(m, 0, NULL), FP8RUN_ERR_INVALID_ARG, "info is NULL");

    /* export of an ONNX model is its save */
    char a[700], b[700];
    API_OK(fp8run_model_save(m, path_in(a, sizeof a, "saved.onnx")));
    API_OK(fp8run_model_export(m, path_in(b, sizeof b, "exported.onnx")));
    CU_ASSERT(same_file(a, b));
    API_ERR(fp8run_model_export(NULL, b), FP8RUN_ERR_INVALID_ARG, "model is NULL");
    API_ERR(fp8run_model_export(m, ""), FP8RUN_ERR_INVALID_ARG, "no path");
    fp8run_model_destroy(m);
}

/* ---- preparation and the forward pass ---- */

static void test_prepare(void)
{
    fp8run_model *m = small_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    fp8run_model *p = NULL;
    /* the model's own shapes leave batch and seq open: the error says which --dim to give */
    API_ERR(fp8run_model_prepare(m, NULL, &p, NULL), FP8RUN_ERR_SHAPE, "batch");
    CU_ASSERT_PTR_NULL(p);

    fp8run_prepare_config pc;
    API_ERR(fp8run_prepare_config_init(&pc, 4), FP8RUN_ERR_INVALID_ARG, "size 4");
    API_ERR(fp8run_prepare_config_init(NULL, sizeof pc), FP8RUN_ERR_INVALID_ARG, "cfg is NULL");
    API_OK(fp8run_prepare_config_init(&pc, sizeof pc));
    CU_ASSERT_EQUAL(pc.struct_size, sizeof pc);
    CU_ASSERT_EQUAL(pc.n_dims, 0);
    const char *names[2] = {"batch", "seq"};
    int64_t values[2] = {2, 5};
    pc.dim_names = names;
    pc.dim_values = values;
    pc.n_dims = 2;
    fp8run_prepare_stats st = {.struct_size = sizeof st};
    API_OK(fp8run_model_prepare(m, &pc, &p, &st));
    CU_ASSERT(st.nodes_folded > 0 && st.nodes_removed >= st.nodes_folded);
    fp8run_model_info a = {.struct_size = sizeof a}, b = {.struct_size = sizeof b};
    API_OK(fp8run_model_get_info(m, &a));
    API_OK(fp8run_model_get_info(p, &b));
    CU_ASSERT(b.n_nodes < a.n_nodes);
    CU_ASSERT_EQUAL(fp8run_model_param_elements(p), fp8run_model_param_elements(m));
    fp8run_value_info v = {.struct_size = sizeof v};
    API_OK(fp8run_model_output(p, 0, &v));
    CU_ASSERT_STRING_EQUAL(v.name, "logits");
    CU_ASSERT(v.rank == 3 && v.dims[0] == 2 && v.dims[1] == 5 && v.dims[2] == 20 && v.numel == 200);
    CU_ASSERT(v.dim_names[0] && strcmp(v.dim_names[0], "batch") == 0);
    fp8run_model_destroy(p);
    p = NULL;
    /* stats may be NULL; the model is unchanged by preparing a copy */
    API_OK(fp8run_model_prepare(m, &pc, &p, NULL));
    fp8run_model_destroy(p);
    API_OK(fp8run_model_input(m, 0, &v));
    CU_ASSERT(v.dims[0] == -1 && v.dims[1] == -1);

    /* errors naming what is wrong */
    names[1] = "sequence";
    API_ERR(fp8run_model_prepare(m, &pc, &p, NULL), FP8RUN_ERR_INVALID_ARG, "'sequence'");
    CU_ASSERT_STRING_EQUAL(fp8run_model_error(m), fp8run_last_error());
    names[1] = "seq";
    values[1] = -1;
    API_ERR(fp8run_model_prepare(m, &pc, &p, NULL), FP8RUN_ERR_INVALID_ARG, "dim_values[1] ('seq')");
    values[1] = 5;
    pc.dim_names = NULL;
    API_ERR(fp8run_model_prepare(m, &pc, &p, NULL), FP8RUN_ERR_INVALID_ARG, "n_dims");
    pc.dim_names = names;
    pc.struct_size = 4;
    API_ERR(fp8run_model_prepare(m, &pc, &p, NULL), FP8RUN_ERR_INVALID_ARG, "struct_size is 4");
    pc.struct_size = sizeof pc;
    pc.n_inputs = 1;
    API_ERR(fp8run_model_prepare(m, &pc, &p, NULL), FP8RUN_ERR_INVALID_ARG, "n_inputs");
    const char *in_names[1] = {"input_ids"};
    int in_ranks[1] = {9};
    const int64_t in_d[2] = {2, 5}, *in_dims[1] = {in_d};
    pc.input_names = in_names;
    pc.input_ranks = in_ranks;
    pc.input_dims = in_dims;
    API_ERR(fp8run_model_prepare(m, &pc, &p, NULL), FP8RUN_ERR_INVALID_ARG, "rank outside");
    in_ranks[0] = 2;
    in_names[0] = "tokens";
    API_ERR(fp8run_model_prepare(m, &pc, &p, NULL), FP8RUN_ERR_INVALID_ARG, "no input named 'tokens'");
    fp8run_prepare_stats bad = {.struct_size = 4};
    API_ERR(fp8run_model_prepare(m, &pc, &p, &bad), FP8RUN_ERR_INVALID_ARG, "stats.struct_size");
    API_ERR(fp8run_model_prepare(NULL, &pc, &p, NULL), FP8RUN_ERR_INVALID_ARG, "model is NULL");
    API_ERR(fp8run_model_prepare(m, &pc, NULL, NULL), FP8RUN_ERR_INVALID_ARG, "out is NULL");
    fp8run_model_destroy(m);
}

static void test_forward(void)
{
    fp8run_model *m = small_llama();
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    const int64_t B = 2, T = 5, V = 20;
    fp8run_prepare_config pc;
    API_OK(fp8run_prepare_config_init(&pc, sizeof pc));
    const char *in_names[1] = {"input_ids"};
    int in_ranks[1] = {2};
    const int64_t in_d[2] = {B, T}, *in_dims[1] = {in_d};
    pc.input_names = in_names;
    pc.input_ranks = in_ranks;
    pc.input_dims = in_dims;
    pc.n_inputs = 1;
    fp8run_forward *f = NULL;
    API_OK(fp8run_forward_create(m, &pc, &f));
    CU_ASSERT_EQUAL(fp8run_forward_input_count(f), 1);
    fp8run_value_info v = {.struct_size = sizeof v};
    API_OK(fp8run_forward_input(f, 0, &v));
    CU_ASSERT(strcmp(v.name, "input_ids") == 0 && v.rank == 2 && v.dims[0] == B && v.dims[1] == T);
    CU_ASSERT_EQUAL(fp8run_forward_output_count(f), 1);
    fp8run_tensor out = {.struct_size = sizeof out};
    API_ERR(fp8run_forward_output(f, 0, &out), FP8RUN_ERR_STATE, "no successful run");
    CU_ASSERT_STRING_EQUAL(fp8run_forward_error(f), fp8run_last_error());

    /* windows of T+1 ids for the session; the forward pass sees the first T of each */
    int64_t win[2 * 6], ids[2 * 5];
    for (int i = 0; i < B * (T + 1); i++) win[i] = (i * 7 + 3) % V;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) ids[b * T + t] = win[b * (T + 1) + t];
    fp8run_tensor in = {.struct_size = sizeof in, .name = "input_ids", .dtype = FP8RUN_DTYPE_INT64, .rank = 2,
                        .dims = {B, T}, .data = ids, .nbytes = sizeof ids};
    API_OK(fp8run_forward_set_input(f, &in));
    API_OK(fp8run_forward_run(f));
    API_OK(fp8run_forward_output(f, 0, &out));
    CU_ASSERT_STRING_EQUAL(out.name, "logits");
    CU_ASSERT(out.dtype == FP8RUN_DTYPE_FLOAT32 && out.rank == 3 && out.dims[0] == B && out.dims[1] == T &&
              out.dims[2] == V && out.nbytes == (size_t)(B * T * V) * 4);

    /* the same logits as an evaluation session's */
    fp8run_train_config c;
    API_OK(fp8run_train_config_init(&c, sizeof c));
    c.batch = B;
    c.seq_len = T;
    c.eval_only = 1;
    fp8run_session *s = NULL;
    API_OK(fp8run_session_create(m, "cpu", &c, &s));
    double loss;
    API_OK(fp8run_session_eval(s, win, FP8RUN_DTYPE_INT64, (size_t)(B * (T + 1)), &loss));
    float *ref = malloc((size_t)(B * T * V) * sizeof *ref);
    API_OK(fp8run_session_eval_output(s, "logits", NULL, ref, (size_t)(B * T * V)));
    double worst = 0;
    for (int i = 0; i < B * T * V; i++) {
        double d = fabs((double)((float *)out.data)[i] - ref[i]);
        if (d > worst) worst = d;
    }
    CU_ASSERT(worst <= 1e-5);
    if (worst > 1e-5) fprintf(stderr, "\n  forward vs session logits: max difference %g\n", worst);
    free(ref);
    fp8run_session_destroy(s);

    /* errors */
    in.dims[1] = 4;
    in.nbytes = sizeof ids - 2 * 8;
    API_ERR(fp8run_forward_set_input(f, &in), FP8RUN_ERR_SHAPE, "input 'input_ids'");
    CU_ASSERT_STRING_EQUAL(fp8run_forward_error(f), fp8run_last_error());
    /* a new input invalidates the outputs until the next run */
    API_ERR(fp8run_forward_output(f, 0, &out), FP8RUN_ERR_STATE, "no successful run");
    in.dims[1] = T;
    in.nbytes = sizeof ids;
    in.name = "tokens";
    API_ERR(fp8run_forward_set_input(f, &in), FP8RUN_ERR_INVALID_ARG, "no input named 'tokens'");
    in.name = NULL;
    API_ERR(fp8run_forward_set_input(f, &in), FP8RUN_ERR_INVALID_ARG, "name is NULL");
    in.name = "input_ids";
    in.dtype = FP8RUN_DTYPE_INT32;
    API_ERR(fp8run_forward_set_input(f, &in), FP8RUN_ERR_SHAPE, "int64");
    in.dtype = FP8RUN_DTYPE_INT64;
    in.nbytes = 8;
    API_ERR(fp8run_forward_set_input(f, &in), FP8RUN_ERR_INVALID_ARG, "bytes");
    in.nbytes = sizeof ids;
    in.rank = -1;
    API_ERR(fp8run_forward_set_input(f, &in), FP8RUN_ERR_INVALID_ARG, "rank -1");
    in.rank = 2;
    API_ERR(fp8run_forward_set_input(f, NULL), FP8RUN_ERR_INVALID_ARG, "tensor is NULL");
    API_OK(fp8run_forward_set_input(f, &in));
    API_OK(fp8run_forward_run(f));
    API_ERR(fp8run_forward_output(f, 1, &out), FP8RUN_ERR_RANGE, "outside [0, 1)");
    API_ERR(fp8run_forward_output(f, 0, NULL), FP8RUN_ERR_INVALID_ARG, "out is NULL");
    API_ERR(fp8run_forward_input(f, 1, &v), FP8RUN_ERR_RANGE, "outside [0, 1)");
    API_ERR(fp8run_forward_input(NULL, 0, &v), FP8RUN_ERR_INVALID_ARG, "forward is NULL");
    API_ERR(fp8run_forward_run(NULL), FP8RUN_ERR_INVALID_ARG, "forward is NULL");
    API_ERR(fp8run_forward_set_input(NULL, &in), FP8RUN_ERR_INVALID_ARG, "forward is NULL");
    API_ERR(fp8run_forward_output(NULL, 0, &out), FP8RUN_ERR_INVALID_ARG, "forward is NULL");
    CU_ASSERT_EQUAL(fp8run_forward_input_count(NULL), 0);
    CU_ASSERT_EQUAL(fp8run_forward_output_count(NULL), 0);
    CU_ASSERT_PTR_NOT_NULL(fp8run_forward_error(NULL));
    fp8run_forward_destroy(f);
    fp8run_forward_destroy(NULL);

    /* an input never set: the run names it */
    API_OK(fp8run_forward_create(m, &pc, &f));
    API_ERR(fp8run_forward_run(f), FP8RUN_ERR_INVALID_ARG, "input_ids");
    fp8run_forward_destroy(f);
    f = NULL;
    /* shapes left open: no forward pass */
    API_ERR(fp8run_forward_create(m, NULL, &f), FP8RUN_ERR_SHAPE, "batch");
    CU_ASSERT_PTR_NULL(f);
    API_ERR(fp8run_forward_create(NULL, &pc, &f), FP8RUN_ERR_INVALID_ARG, "model is NULL");
    API_ERR(fp8run_forward_create(m, &pc, NULL), FP8RUN_ERR_INVALID_ARG, "out is NULL");
    /* the forward pass keeps its own copy of the model */
    API_OK(fp8run_forward_create(m, &pc, &f));
    fp8run_model_destroy(m);
    API_OK(fp8run_forward_set_input(f, &in));
    API_OK(fp8run_forward_run(f));
    fp8run_forward_destroy(f);
}

/* ---- the generated Llama ---- */

static void test_generate(void)
{
    fp8run_llama_config c;
    API_ERR(fp8run_llama_config_init(&c, 8), FP8RUN_ERR_INVALID_ARG, "size 8");
    API_ERR(fp8run_llama_config_init(NULL, sizeof c), FP8RUN_ERR_INVALID_ARG, "cfg is NULL");
    API_OK(fp8run_llama_config_init(&c, sizeof c));
    CU_ASSERT(c.struct_size == sizeof c && c.dim == 64 && c.layers == 2 && c.heads == 4 && c.kv_heads == 2 &&
              c.ffn == 176 && c.vocab == 128 && c.max_seq == 256 && c.seed == 1);
    c.seed = 9;
    API_OK(fp8run_llama_config_preset(&c, "125m"));
    CU_ASSERT(c.dim == 768 && c.layers == 12 && c.heads == 12 && c.kv_heads == 4 && c.ffn == 2048 &&
              c.vocab == 32768 && c.max_seq == 2048 && c.seed == 9);
    API_OK(fp8run_llama_config_preset(&c, "1b"));
    CU_ASSERT(c.dim == 2048 && c.layers == 16 && c.ffn == 5632);
    API_OK(fp8run_llama_config_preset(&c, "8b")); /* Llama-3-8B's shape */
    CU_ASSERT(c.dim == 4096 && c.layers == 32 && c.heads == 32 && c.kv_heads == 8 && c.ffn == 14336 &&
              c.vocab == 128256 && c.max_seq == 8192);
    API_ERR(fp8run_llama_config_preset(&c, "huge"), FP8RUN_ERR_INVALID_ARG, "tiny, 125m, 1b");
    API_ERR(fp8run_llama_config_preset(&c, NULL), FP8RUN_ERR_INVALID_ARG, "NULL");
    API_ERR(fp8run_llama_config_preset(NULL, "tiny"), FP8RUN_ERR_INVALID_ARG, "cfg is NULL");
    API_OK(fp8run_llama_config_preset(&c, "tiny"));

    fp8run_model *m = NULL;
    c.layers = 3;
    c.dim = 48;
    c.heads = 6;
    c.kv_heads = 3;
    c.ffn = 96;
    API_OK(fp8run_model_generate_llama(&c, &m));
    int64_t want = 128 * 48 + 3 * (2 * 48 + 48 * 48 + 2 * 48 * 24 + 48 * 48 + 3 * 48 * 96) + 48 + 48 * 128;
    CU_ASSERT_EQUAL(fp8run_model_param_elements(m), want);
    CU_ASSERT_EQUAL(fp8run_model_param_count(m), 3 * 9 + 3);
    fp8run_value_info v = {.struct_size = sizeof v};
    API_OK(fp8run_model_input(m, 0, &v));
    CU_ASSERT(strcmp(v.name, "input_ids") == 0 && v.dtype == FP8RUN_DTYPE_INT64 && v.rank == 2);
    CU_ASSERT(v.dim_names[0] && v.dim_names[1] && strcmp(v.dim_names[1], "seq") == 0);
    API_OK(fp8run_model_output(m, 0, &v));
    CU_ASSERT(strcmp(v.name, "logits") == 0 && v.rank == 3 && v.dims[2] == 128);
    /* names work on the model in memory, before any save */
    float *w = malloc(48 * 128 * sizeof *w);
    API_OK(fp8run_model_get_param(m, "lm_head.weight", w, 48 * 128));
    double ss = 0;
    for (int i = 0; i < 48 * 128; i++) ss += (double)w[i] * w[i];
    CU_ASSERT(fabs(sqrt(ss / (48 * 128)) - 0.02) < 0.003); /* N(0, 0.02) */
    API_OK(fp8run_model_get_param(m, "norm.weight", w, 48));
    CU_ASSERT(w[0] == 1.0f && w[47] == 1.0f);
    free(w);
    fp8run_model_info mi = {.struct_size = sizeof mi};
    API_OK(fp8run_model_get_info(m, &mi));
    CU_ASSERT_STRING_EQUAL(mi.producer_name, "fp8run generate");
    int64_t ver = 0;
    API_OK(fp8run_model_opset(m, 0, NULL, &ver));
    CU_ASSERT_EQUAL(ver, 23);
    /* deterministic from the seed; saved and loaded it is the same model */
    char a[700], b[700];
    API_OK(fp8run_model_save(m, path_in(a, sizeof a, "g1.onnx")));
    fp8run_model *m2 = NULL;
    API_OK(fp8run_model_generate_llama(&c, &m2));
    API_OK(fp8run_model_save(m2, path_in(b, sizeof b, "g2.onnx")));
    CU_ASSERT(same_file(a, b));
    fp8run_model_destroy(m2);
    API_OK(fp8run_model_load(a, &m2));
    CU_ASSERT_EQUAL(fp8run_model_param_elements(m2), want);
    fp8run_model_destroy(m2);
    fp8run_model_destroy(m);
    m = NULL;

    /* checks */
    c.dim = 50;
    c.heads = 4;
    API_ERR(fp8run_model_generate_llama(&c, &m), FP8RUN_ERR_INVALID_ARG, "heads");
    CU_ASSERT_PTR_NULL(m);
    c.dim = 48;
    c.heads = 6;
    c.vocab = 0;
    API_ERR(fp8run_model_generate_llama(&c, &m), FP8RUN_ERR_INVALID_ARG, "vocab is 0");
    c.vocab = 128;
    c.struct_size = 8;
    API_ERR(fp8run_model_generate_llama(&c, &m), FP8RUN_ERR_INVALID_ARG, "struct_size is 8");
    API_ERR(fp8run_model_generate_llama(NULL, &m), FP8RUN_ERR_INVALID_ARG, "config is NULL");
    c.struct_size = sizeof c;
    API_ERR(fp8run_model_generate_llama(&c, NULL), FP8RUN_ERR_INVALID_ARG, "out is NULL");
}

/* ---- compiled graphs, sessions on them, FP8 statistics, checkpoints ---- */

static fp8run_train_config fp8_config(void)
{
    fp8run_train_config c;
    API_OK(fp8run_train_config_init(&c, sizeof c));
    c.batch = 2;
    c.seq_len = 13;
    c.precision = "fp8";
    c.amax_history_len = 16;
    c.lr = 1e-3;
    return c;
}

static void test_compiled(void)
{
    char model[600], tokens[600], fbs[700];
    fr_fixture(model, sizeof model, "llama_tiny/model.onnx");
    fr_fixture(tokens, sizeof tokens, "train/tokens.bin");
    fp8run_model *m = NULL;
    API_OK(fp8run_model_load(model, &m));
    fp8run_train_config c = fp8_config();
    fp8run_report *r = NULL;

    /* an ONNX model is not compiled */
    API_ERR(fp8run_model_report(m, &r), FP8RUN_ERR_INVALID_ARG, "not a compiled graph");
    API_ERR(fp8run_model_compiled_for(m, NULL, NULL, NULL), FP8RUN_ERR_INVALID_ARG, "not a compiled graph");
    /* the dry run's report: fresh scaling state, no compiled-graph description */
    API_OK(fp8run_model_compile(m, &c, &r));
    int n_states = fp8run_report_state_count(r);
    CU_ASSERT_EQUAL(n_states, 21); /* 7 fp8 Linear nodes x (x, w, dy) */
    fp8run_scaling_info si = {.struct_size = sizeof si};
    API_OK(fp8run_report_state(r, 0, &si));
    CU_ASSERT(si.layer && si.layer[0] && si.scale == 1.0 && si.amax == 0.0 && si.updates == 0);
    CU_ASSERT_STRING_EQUAL(si.operand, "x");
    CU_ASSERT_STRING_EQUAL(si.format, "e4m3");
    API_OK(fp8run_report_state(r, 2, &si));
    CU_ASSERT_STRING_EQUAL(si.operand, "dy");
    CU_ASSERT_STRING_EQUAL(si.format, "e5m2");
    API_ERR(fp8run_report_state(r, n_states, &si), FP8RUN_ERR_RANGE, "outside");
    API_ERR(fp8run_report_state(r, 0, NULL), FP8RUN_ERR_INVALID_ARG, "info is NULL");
    API_ERR(fp8run_report_state(NULL, 0, &si), FP8RUN_ERR_INVALID_ARG, "report is NULL");
    CU_ASSERT_EQUAL(fp8run_report_state_count(NULL), 0);
    fp8run_compiled_info ci = {.struct_size = sizeof ci};
    API_ERR(fp8run_report_compiled(r, &ci), FP8RUN_ERR_INVALID_ARG, "does not come from a compiled graph");
    fp8run_report_destroy(r);
    /* current scaling has no state */
    c.recipe = "current";
    API_OK(fp8run_model_compile(m, &c, &r));
    CU_ASSERT_EQUAL(fp8run_report_state_count(r), 0);
    fp8run_report_destroy(r);
    c.recipe = "delayed";

    /* write one */
    path_in(fbs, sizeof fbs, "llama.fbs");
    c.precision = "fp32";
    API_ERR(fp8run_model_write_compiled(m, &c, fbs, &r), FP8RUN_ERR_INVALID_ARG, "fp32");
    c.precision = "fp8";
    API_ERR(fp8run_model_write_compiled(m, &c, "", &r), FP8RUN_ERR_INVALID_ARG, "no path");
    API_ERR(fp8run_model_write_compiled(NULL, &c, fbs, &r), FP8RUN_ERR_INVALID_ARG, "model is NULL");
    c.fp8_exclude = "(unclosed";
    API_ERR(fp8run_model_write_compiled(m, &c, fbs, &r), FP8RUN_ERR_INVALID_ARG, "(unclosed");
    c.fp8_exclude = NULL;
    API_OK(fp8run_model_write_compiled(m, &c, fbs, &r));
    API_OK(fp8run_report_compiled(r, &ci));
    CU_ASSERT(ci.format == 1 && ci.batch == 2 && ci.seq_len == 13);
    CU_ASSERT_STRING_EQUAL(ci.tokens_input, "input_ids");
    CU_ASSERT(ci.n_dims == 0 && !ci.train_regex && !ci.freeze_regex);
    CU_ASSERT(ci.original_nodes > 10 && ci.original_initializers > 0);
    CU_ASSERT_EQUAL(fp8run_report_state_count(r), 21);
    CU_ASSERT(strstr(fp8run_report_text(r), "fp8 11, bf16 4") != NULL);
    API_ERR(fp8run_report_compiled(r, NULL), FP8RUN_ERR_INVALID_ARG, "info is NULL");
    API_ERR(fp8run_report_compiled(NULL, &ci), FP8RUN_ERR_INVALID_ARG, "report is NULL");
    fp8run_report_destroy(r);
    r = NULL;
    API_OK(fp8run_model_write_compiled(m, &c, fbs, NULL)); /* the report is optional */

    /* read it */
    fp8run_model *f = NULL;
    API_OK(fp8run_model_load(fbs, &f));
    fp8run_model_info mi = {.struct_size = sizeof mi};
    API_OK(fp8run_model_get_info(f, &mi));
    CU_ASSERT_EQUAL(mi.compiled, 1);
    /* its parameters are the recorded ones (not the scaling state or folded constants) */
    CU_ASSERT_EQUAL(fp8run_model_param_elements(f), 108864);
    CU_ASSERT(mi.n_initializers > fp8run_model_param_count(f));
    int64_t b = 0, s = 0;
    const char *prec = NULL;
    API_OK(fp8run_model_compiled_for(f, &b, &s, &prec));
    CU_ASSERT(b == 2 && s == 13 && prec && strcmp(prec, "fp8") == 0);
    API_OK(fp8run_model_compiled_for(f, NULL, NULL, NULL));
    API_ERR(fp8run_model_compiled_for(NULL, &b, &s, &prec), FP8RUN_ERR_INVALID_ARG, "model is NULL");
    API_OK(fp8run_model_report(f, &r));
    API_OK(fp8run_report_compiled(r, &ci));
    CU_ASSERT(ci.batch == 2 && ci.seq_len == 13);
    CU_ASSERT_EQUAL(fp8run_report_layer_count(r), 9);
    CU_ASSERT_EQUAL(fp8run_report_state_count(r), 21);
    fp8run_report_destroy(r);
    API_ERR(fp8run_model_report(f, NULL), FP8RUN_ERR_INVALID_ARG, "out is NULL");
    API_ERR(fp8run_model_report(NULL, &r), FP8RUN_ERR_INVALID_ARG, "model is NULL");
    API_ERR(fp8run_model_write_compiled(f, &c, fbs, NULL), FP8RUN_ERR_INVALID_ARG, "already a compiled graph");

    /* train it: statistics, state, checkpoints */
    fp8run_train_config tc;
    API_OK(fp8run_train_config_init(&tc, sizeof tc));
    tc.batch = 2;
    tc.seq_len = 13;
    tc.lr = 1e-3;
    fp8run_session *ss = NULL;
    API_OK(fp8run_session_create(f, "cpu", &tc, &ss));
    CU_ASSERT_STRING_EQUAL(fp8run_session_device(ss), "CPU");
    CU_ASSERT_STRING_EQUAL(fp8run_session_tokens_input(ss), "input_ids");
    CU_ASSERT_PTR_NULL(fp8run_session_device(NULL));
    CU_ASSERT_PTR_NULL(fp8run_session_tokens_input(NULL));
    fp8run_memory_info mem = {.struct_size = sizeof mem};
    API_OK(fp8run_session_memory(ss, &mem));
    CU_ASSERT(mem.planned_bytes > 4 * 108864ull && mem.device_used_bytes == 0 && mem.device_total_bytes == 0);
    API_ERR(fp8run_session_memory(ss, NULL), FP8RUN_ERR_INVALID_ARG, "info is NULL");
    API_ERR(fp8run_session_memory(NULL, &mem), FP8RUN_ERR_INVALID_ARG, "session is NULL");
    CU_ASSERT_PTR_NULL(fp8run_session_profile(ss)); /* FP8RUN_PROFILE is for GPU sessions */
    CU_ASSERT_PTR_NULL(fp8run_session_profile(NULL));
    fp8run_fp8_stat st = {.struct_size = sizeof st};
    API_ERR(fp8run_session_fp8_stat(ss, 0, &st), FP8RUN_ERR_RANGE, "take a snapshot");
    int n = -1;
    API_OK(fp8run_session_fp8_stats(ss, &n));
    CU_ASSERT_EQUAL(n, 21);
    API_OK(fp8run_session_fp8_stat(ss, 0, &st));
    CU_ASSERT(st.step == -1 && !st.has_amax && isnan(st.amax) && strstr(st.note, "no step"));

    fp8run_data_config dc;
    API_OK(fp8run_data_config_init(&dc, sizeof dc));
    dc.batch = 2;
    dc.seq_len = 13;
    dc.order = FP8RUN_DATA_SEQUENTIAL;
    fp8run_data_loader *dl = NULL;
    API_OK(fp8run_data_open(tokens, &dc, &dl));
    int64_t w[2 * 14];
    for (int k = 0; k < 3; k++) {
        fp8run_step_stats sst = {.struct_size = sizeof sst};
        API_OK(fp8run_data_next(dl, FP8RUN_DTYPE_INT64, w, 28));
        API_OK(fp8run_session_train_step(ss, w, FP8RUN_DTYPE_INT64, 28, &sst));
        CU_ASSERT_EQUAL(sst.skipped, 0);
        CU_ASSERT_STRING_EQUAL(sst.reason, "");
    }
    API_OK(fp8run_session_fp8_stats(ss, &n));
    CU_ASSERT_EQUAL(n, 21);
    int checked = 0;
    for (int i = 0; i < n; i++) {
        API_OK(fp8run_session_fp8_stat(ss, i, &st));
        CU_ASSERT(st.layer && st.layer[0] && strcmp(st.recipe, "delayed") == 0);
        CU_ASSERT(st.has_amax && st.amax > 0 && st.has_scale && st.scale > 0 && st.fp8_max >= 448);
        CU_ASSERT(st.step == 2 && st.updates == 3);
        CU_ASSERT_STRING_EQUAL(st.operand, i % 3 == 0 ? "x" : i % 3 == 1 ? "w" : "dy");
        CU_ASSERT_STRING_EQUAL(st.note, "");
        checked++;
    }
    CU_ASSERT_EQUAL(checked, 21);
    API_ERR(fp8run_session_fp8_stat(ss, n, &st), FP8RUN_ERR_RANGE, "outside [0, 21)");
    API_ERR(fp8run_session_fp8_stat(ss, 0, NULL), FP8RUN_ERR_INVALID_ARG, "info is NULL");
    fp8run_fp8_stat small = {.struct_size = 8};
    API_ERR(fp8run_session_fp8_stat(ss, 0, &small), FP8RUN_ERR_INVALID_ARG, "struct_size is 8");
    API_ERR(fp8run_session_fp8_stats(ss, NULL), FP8RUN_ERR_INVALID_ARG, "count is NULL");
    API_ERR(fp8run_session_fp8_stats(NULL, &n), FP8RUN_ERR_INVALID_ARG, "session is NULL");
    API_ERR(fp8run_session_fp8_stat(NULL, 0, &st), FP8RUN_ERR_INVALID_ARG, "session is NULL");
    /* the session's report holds its scaling state as it is now */
    API_OK(fp8run_session_report(ss, &r));
    CU_ASSERT_EQUAL(fp8run_report_state_count(r), 21);
    for (int i = 0; i < 21; i++) {
        API_OK(fp8run_report_state(r, i, &si));
        CU_ASSERT(si.updates == 3 && si.amax > 0 && si.scale > 0 && si.scale != 1.0);
    }
    fp8run_report_destroy(r);

    /* a checkpoint with the loader's state, one without */
    char ck1[700], ck2[700], e1[700], e2[700];
    API_OK(fp8run_session_save(ss, path_in(ck1, sizeof ck1, "with.ckpt"), dl));
    API_OK(fp8run_session_save(ss, path_in(ck2, sizeof ck2, "without.ckpt"), NULL));
    fp8run_checkpoint *k = NULL;
    API_OK(fp8run_checkpoint_open(ck1, &k));
    const void *data = NULL;
    size_t len = 0;
    API_OK(fp8run_checkpoint_data_state(k, &data, &len));
    CU_ASSERT(data != NULL && len == fp8run_data_state_size());
    /* it is the loader's position: a fresh loader continues where this one is */
    fp8run_data_loader *dl2 = NULL;
    API_OK(fp8run_data_open(tokens, &dc, &dl2));
    API_OK(fp8run_data_set_state(dl2, data, len));
    int64_t w1[28], w2[28];
    API_OK(fp8run_data_next(dl, FP8RUN_DTYPE_INT64, w1, 28));
    API_OK(fp8run_data_next(dl2, FP8RUN_DTYPE_INT64, w2, 28));
    CU_ASSERT(memcmp(w1, w2, sizeof w1) == 0);
    fp8run_data_close(dl2);
    API_ERR(fp8run_checkpoint_data_state(k, NULL, &len), FP8RUN_ERR_INVALID_ARG, "data is NULL");
    API_ERR(fp8run_checkpoint_data_state(k, &data, NULL), FP8RUN_ERR_INVALID_ARG, "len is NULL");
    API_ERR(fp8run_checkpoint_data_state(NULL, &data, &len), FP8RUN_ERR_INVALID_ARG, "checkpoint is NULL");
    fp8run_checkpoint_close(k);
    API_OK(fp8run_checkpoint_open(ck2, &k));
    API_ERR(fp8run_checkpoint_data_state(k, &data, &len), FP8RUN_ERR_INVALID_ARG, "no data loader state");
    CU_ASSERT(data == NULL && len == 0);
    fp8run_checkpoint_close(k);

    /* export of the compiled graph with the checkpoint's weights = the session's export */
    API_OK(fp8run_session_export(ss, path_in(e1, sizeof e1, "session.onnx")));
    fp8run_model *f2 = NULL;
    API_OK(fp8run_model_load(fbs, &f2));
    API_OK(fp8run_model_apply_checkpoint(f2, ck1, NULL));
    API_OK(fp8run_model_export(f2, path_in(e2, sizeof e2, "model.onnx")));
    CU_ASSERT(same_file(e1, e2));
    /* the export is the original ONNX model: it loads as one, not compiled */
    fp8run_model *o = NULL;
    API_OK(fp8run_model_load(e2, &o));
    API_OK(fp8run_model_get_info(o, &mi));
    CU_ASSERT_EQUAL(mi.compiled, 0);
    fp8run_model_destroy(o);
    fp8run_model_destroy(f2);

    fp8run_data_close(dl);
    fp8run_session_destroy(ss);
    fp8run_model_destroy(f);
    fp8run_model_destroy(m);
}

/* ---- training FLOPs ---- */

static void test_flops(void)
{
    fp8run_llama_config lc;
    API_OK(fp8run_llama_config_init(&lc, sizeof lc)); /* tiny: d 64, 2 layers, 4 heads, 2 kv heads, ffn 176 */
    fp8run_model *m = NULL;
    API_OK(fp8run_model_generate_llama(&lc, &m));
    fp8run_train_config c;
    API_OK(fp8run_train_config_init(&c, sizeof c));
    c.batch = 2;
    c.seq_len = 32;
    c.grad_accum = 3;
    fp8run_flops_info fl = {.struct_size = sizeof fl};
    API_OK(fp8run_model_train_flops(m, &c, &fl));
    int64_t mm = 2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 176) + 64 * 128;
    CU_ASSERT_EQUAL(fl.matmul_params, mm);
    CU_ASSERT_EQUAL(fl.attention_known, 1);
    CU_ASSERT(fabs(fl.attention_flops_per_token - 12.0 * 2 * 64 * 32) < 1e-6);
    CU_ASSERT(fabs(fl.flops_per_token - (6.0 * (double)mm + 12.0 * 2 * 64 * 32)) < 1e-3);
    CU_ASSERT(fabs(fl.flops_per_step - fl.flops_per_token * 2 * 32 * 3) <= 1e-9 * fl.flops_per_step);
    /* a shape the model cannot take: the parameter term alone */
    c.tokens_input = "nope";
    API_OK(fp8run_model_train_flops(m, &c, &fl));
    CU_ASSERT(fl.attention_known == 0 && fl.attention_flops_per_token == 0 && fl.matmul_params == mm);
    c.tokens_input = NULL;
    c.batch = 0;
    API_ERR(fp8run_model_train_flops(m, &c, &fl), FP8RUN_ERR_INVALID_ARG, "batch (0)");
    c.batch = 2;
    API_ERR(fp8run_model_train_flops(m, &c, NULL), FP8RUN_ERR_INVALID_ARG, "info is NULL");
    API_ERR(fp8run_model_train_flops(NULL, &c, &fl), FP8RUN_ERR_INVALID_ARG, "model is NULL");
    /* the model is not changed: it still has its symbolic dims */
    fp8run_value_info v = {.struct_size = sizeof v};
    API_OK(fp8run_model_input(m, 0, &v));
    CU_ASSERT(v.dims[0] == -1);
    fp8run_model_destroy(m);
}

/* ---- byte-level token files ---- */

static void test_uint8_tokens(void)
{
    char p[700];
    FILE *f = fopen(path_in(p, sizeof p, "text.txt"), "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    for (int i = 0; i < 50; i++) fputs("hello, fp8! ", f);
    fclose(f);
    fp8run_data_config dc;
    API_OK(fp8run_data_config_init(&dc, sizeof dc));
    dc.batch = 2;
    dc.seq_len = 4;
    dc.order = FP8RUN_DATA_SEQUENTIAL;
    dc.token_dtype = FP8RUN_DTYPE_UINT8;
    fp8run_data_loader *d = NULL;
    API_OK(fp8run_data_open(p, &dc, &d));
    CU_ASSERT_EQUAL(fp8run_data_token_dtype(d), FP8RUN_DTYPE_UINT8);
    CU_ASSERT_EQUAL(fp8run_data_num_tokens(d), 600);
    int64_t w[10];
    API_OK(fp8run_data_next(d, FP8RUN_DTYPE_INT64, w, 10));
    CU_ASSERT(w[0] == 'h' && w[1] == 'e' && w[4] == 'o');
    fp8run_data_close(d);
    dc.token_dtype = FP8RUN_DTYPE_FLOAT32;
    API_ERR(fp8run_data_open(p, &dc, &d), FP8RUN_ERR_INVALID_ARG, "or uint8");
}

static CU_TestInfo tests[] = {
    {"host tensors: sizes, float32 decoding, .npy", test_tensors_and_npy},
    {"model inspection: info, opsets, op histogram; export of ONNX", test_model_info},
    {"prepare for static shapes; errors name dims and inputs", test_prepare},
    {"forward pass on host tensors == evaluation session", test_forward},
    {"generated Llama: presets, checks, parameters", test_generate},
    {"compiled graphs: write, read, report, train, fp8 stats, checkpoints, export", test_compiled},
    {"training FLOPs", test_flops},
    {"uint8 token files", test_uint8_tokens},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"api_tools", suite_init, suite_clean, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
