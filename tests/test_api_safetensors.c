/* Hugging Face weights in and out through the public API and the CLI, on the transformers
 * fixture (tests/fixtures/hf/llama_safetensors: the same random init as llama_op18_static):
 *  - --init-from / fp8run_session_load_safetensors: what matches by name is loaded, the rest
 *    is reported as missing / unexpected, the loss is that of the same weights in the model;
 *    changed (and bf16-stored) weights in the file are what the session then holds; a shape
 *    mismatch or a strict load with unmatched names changes nothing;
 *  - fp8run_model_save_safetensors / export --safetensors: every parameter written (fp32 exact,
 *    bf16 rounded to nearest even), sharded beyond the limit;
 *  - test_full_match: once the trainer's parameters carry the module names (folded weights
 *    under their module's name), every fixture tensor matches and the export is the fixture
 *    byte for byte. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/cli_runner.h"
#include "fp8run.h"
#include "tests/harness.h"
#include "tests/hf_llama_util.h"
#include "runtime/io/safetensors.h"

#define MODEL HF_MODEL
#define WEIGHTS "hf/llama_safetensors"
#define B HF_B
#define T HF_T
#define V HF_V
#define EMBED "model.embed_tokens.weight"

static fp8run_session *new_session_prec(fp8run_model *m, const char *precision)
{
    fp8run_train_config c;
    OK(fp8run_train_config_init(&c, sizeof c));
    c.batch = B;
    c.seq_len = T;
    c.precision = precision;
    fp8run_session *s = NULL;
    OK(fp8run_session_create(m, "cpu", &c, &s));
    return s;
}

static fp8run_session *new_session(fp8run_model *m) { return new_session_prec(m, "fp32"); }

static fp8run_safetensors *open_st(const char *path)
{
    fp8run_safetensors *st = NULL;
    OK(fp8run_safetensors_open(path, &st));
    return st;
}

static int has_name(const char *const *names, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0) return 1;
    return 0;
}

static int session_has(const fp8run_session *s, const char *name)
{
    for (int i = 0; i < fp8run_session_param_count(s); i++) {
        fp8run_value_info v = {.struct_size = sizeof v};
        if (fp8run_session_param(s, i, &v) == FP8RUN_OK && strcmp(v.name, name) == 0) return 1;
    }
    return 0;
}

static int bits_equal(double a, double b) { return memcmp(&a, &b, sizeof a) == 0; }

/* Tensors listed by info(hi, i) and read by name from two sources. */
typedef fp8run_status (*info_fn)(void *h, int i, fp8run_value_info *v);
typedef fp8run_status (*read_fn)(void *h, const char *name, float *dst, size_t n);
static fp8run_status s_info(void *h, int i, fp8run_value_info *v) { return fp8run_session_param(h, i, v); }
static fp8run_status s_get(void *h, const char *n, float *d, size_t c) { return fp8run_session_get_param(h, n, d, c); }
static fp8run_status st_info(void *h, int i, fp8run_value_info *v) { return fp8run_safetensors_tensor(h, i, v); }
static fp8run_status st_get(void *h, const char *n, float *d, size_t c) { return fp8run_safetensors_read(h, n, d, c); }
static fp8run_status m_info(void *h, int i, fp8run_value_info *v) { return fp8run_model_param(h, i, v); }
static fp8run_status m_get(void *h, const char *n, float *d, size_t c) { return fp8run_model_get_param(h, n, d, c); }

/* How many of the n tensors differ between a and b, bit for bit (bf16_a: a holds b's values
 * rounded to bfloat16, to nearest even). */
static int count_differing(int n, info_fn info, void *hi, read_fn ra, void *a, read_fn rb, void *b, int bf16_a)
{
    int bad = 0;
    for (int i = 0; i < n; i++) {
        fp8run_value_info v = {.struct_size = sizeof v};
        OK(info(hi, i, &v));
        float *x = malloc((size_t)v.numel * 4 + 4), *y = malloc((size_t)v.numel * 4 + 4);
        OK(ra(a, v.name, x, (size_t)v.numel));
        OK(rb(b, v.name, y, (size_t)v.numel));
        for (int64_t j = 0; bf16_a && j < v.numel; j++) y[j] = fr_bf16_to_f32(fr_f32_to_bf16(y[j]));
        bad += memcmp(x, y, (size_t)v.numel * 4) != 0;
        free(x);
        free(y);
    }
    return bad;
}

/* The fixture's tensors rewritten into dir: `name` stored as dtype `dt` with values * mul,
 * or, when dims is non-NULL, with that shape instead (same element count). */
static void write_variant(const char *dir, const char *name, fr_dtype dt, float mul, const int64_t *dims)
{
    char p[512];
    fr_st_ckpt *c;
    FR_ASSERT_OK(fr_st_ckpt_open(fr_fixture(p, sizeof p, WEIGHTS), &c));
    fr_st_out *o = calloc((size_t)c->n, sizeof *o);
    void **data = calloc((size_t)c->n, sizeof *data);
    for (int i = 0; i < c->n; i++) {
        const fr_st_tensor *t = c->e[i].t;
        float *f = malloc((size_t)t->numel * sizeof *f);
        FR_ASSERT_OK(fr_st_ckpt_read_f32(c, i, f));
        data[i] = f;
        o[i] = (fr_st_out){t->name, FR_F32, t->rank, t->dims, f};
        if (strcmp(t->name, name) != 0) continue;
        uint16_t *h = (uint16_t *)f; /* narrowed in place */
        for (int64_t j = 0; j < t->numel; j++) {
            f[j] *= mul;
            if (dt == FR_BF16) h[j] = fr_f32_to_bf16(f[j]);
        }
        o[i].dtype = dt;
        if (dims) o[i].dims = dims;
    }
    FR_ASSERT_OK(fr_st_ckpt_write(dir, o, c->n, 0));
    for (int i = 0; i < c->n; i++) free(data[i]);
    free(data);
    free(o);
    fr_st_ckpt_close(c);
}

/* ---- loading ---- */

static void test_init_from_fixture(void)
{
    char p[512];
    fp8run_model *m = hf_load_model();
    fp8run_session *s = new_session(m);
    const double l0 = hf_eval(s);
    fp8run_safetensors *st = open_st(fr_fixture(p, sizeof p, WEIGHTS));
    CU_ASSERT_EQUAL(fp8run_safetensors_tensor_count(st), 21);
    fp8run_load_report r = {.struct_size = sizeof r};
    OK(fp8run_session_load_safetensors(s, st, 0, &r));
    /* every parameter is matched or missing; every file tensor matched or unexpected */
    CU_ASSERT_EQUAL(r.n_matched + r.n_missing, fp8run_session_param_count(s));
    CU_ASSERT_EQUAL(r.n_matched + r.n_unexpected, 21);
    CU_ASSERT(r.n_matched >= 2 && has_name(r.matched, r.n_matched, EMBED) &&
              has_name(r.matched, r.n_matched, "model.layers.0.input_layernorm.weight"));
    for (int i = 0; i < r.n_missing; i++) CU_ASSERT(session_has(s, r.missing[i]));
    for (int i = 0; i < r.n_unexpected; i++) CU_ASSERT(!session_has(s, r.unexpected[i]));
    /* the same random init: the loss is the ONNX file's own, bit for bit */
    CU_ASSERT(bits_equal(hf_eval(s), l0));
    static float a[V * 72], b[V * 72];
    OK(fp8run_session_get_param(s, EMBED, a, V * 72));
    OK(fp8run_safetensors_read(st, EMBED, b, V * 72));
    CU_ASSERT(memcmp(a, b, sizeof a) == 0);
    /* strict: the unmatched names are an error when there are any, and nothing changes */
    if (r.n_missing || r.n_unexpected) {
        CU_ASSERT_EQUAL(fp8run_session_load_safetensors(s, st, FP8RUN_LOAD_STRICT, NULL), FP8RUN_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(fp8run_session_error(s), r.n_missing ? "missing" : "unexpected"));
    }
    CU_ASSERT_EQUAL(fp8run_session_load_safetensors(s, st, 8, NULL), FP8RUN_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(fp8run_safetensors_read(st, "nope", a, 1), FP8RUN_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(fp8run_safetensors_read(st, EMBED, a, 5), FP8RUN_ERR_SHAPE);
    fp8run_safetensors_close(st);
    fp8run_session_destroy(s);
    fp8run_model_destroy(m);
}

/* Changed weights, stored as bf16: the session holds exactly their values, and its loss is
 * that of a model holding them. A wrong shape changes nothing. */
static void test_init_from_changed(void)
{
    char dir[512];
    fr_test_tmpdir(dir, sizeof dir);
    write_variant(dir, EMBED, FR_BF16, 3.0f, NULL);
    fp8run_model *m = hf_load_model();
    fp8run_session *s = new_session(m);
    const double l0 = hf_eval(s);
    fp8run_safetensors *st = open_st(dir);
    OK(fp8run_session_load_safetensors(s, st, 0, NULL));
    static float got[V * 72], want[V * 72];
    OK(fp8run_session_get_param(s, EMBED, got, V * 72));
    OK(fp8run_model_get_param(m, EMBED, want, V * 72));
    int bad = 0;
    for (int i = 0; i < V * 72; i++) bad += got[i] != fr_bf16_to_f32(fr_f32_to_bf16(want[i] * 3.0f));
    CU_ASSERT_EQUAL(bad, 0);
    const double l1 = hf_eval(s);
    CU_ASSERT(!bits_equal(l1, l0));
    /* the model-level load gives the same weights before a session exists */
    fp8run_model *m2 = hf_load_model();
    fp8run_load_report r = {.struct_size = sizeof r};
    OK(fp8run_model_load_safetensors(m2, st, 0, &r));
    CU_ASSERT(has_name(r.matched, r.n_matched, EMBED));
    fp8run_session *s2 = new_session(m2);
    CU_ASSERT(bits_equal(hf_eval(s2), l1));
    fp8run_session_destroy(s2);
    fp8run_model_destroy(m2);
    fp8run_safetensors_close(st);

    /* a shape mismatch names both shapes, and nothing was loaded */
    static const int64_t wrong[2] = {72, V};
    write_variant(dir, EMBED, FR_F32, 1.0f, wrong);
    st = open_st(dir);
    CU_ASSERT_EQUAL(fp8run_session_load_safetensors(s, st, 0, NULL), FP8RUN_ERR_SHAPE);
    const char *msg = fp8run_session_error(s);
    CU_ASSERT(strstr(msg, EMBED) && strstr(msg, "[211, 72]") && strstr(msg, "[72, 211]"));
    CU_ASSERT(bits_equal(hf_eval(s), l1));
    fp8run_safetensors_close(st);
    fp8run_session_destroy(s);
    fp8run_model_destroy(m);
}

/* Every parameter changed, written by one session, loaded into a bf16 session whose compiler
 * fused Q/K/V and gate/up: the fused ones take their slices, and the loss is that of a session
 * built from a model holding the same values. */
static void test_fused_round_trip(void)
{
    char dir[512];
    fr_test_tmpdir(dir, sizeof dir);
    fp8run_model *m = hf_load_model();
    fp8run_session *a = new_session(m);
    int n = fp8run_session_param_count(a);
    fr_rng r = fr_test_rng("safetensors_fused");
    for (int i = 0; i < n; i++) {
        fp8run_value_info v = {.struct_size = sizeof v};
        OK(fp8run_session_param(a, i, &v));
        float *x = malloc((size_t)v.numel * 4 + 4);
        OK(fp8run_session_get_param(a, v.name, x, (size_t)v.numel));
        for (int64_t j = 0; j < v.numel; j++) x[j] *= (float)(0.5 + fr_rng_uniform(&r));
        OK(fp8run_session_set_param(a, v.name, x, (size_t)v.numel));
        free(x);
    }
    OK(fp8run_session_save_safetensors(a, dir, FP8RUN_DTYPE_FLOAT32, 0));
    fp8run_session *b = new_session_prec(m, "bf16");
    fp8run_report *rep = NULL;
    OK(fp8run_session_report(b, &rep));
    CU_ASSERT(strstr(fp8run_report_text(rep), "fused") != NULL); /* the case this test is about */
    fp8run_report_destroy(rep);
    fp8run_safetensors *st = open_st(dir);
    fp8run_load_report lr = {.struct_size = sizeof lr};
    OK(fp8run_session_load_safetensors(b, st, FP8RUN_LOAD_STRICT, &lr));
    CU_ASSERT_EQUAL(lr.n_matched, n);
    CU_ASSERT_EQUAL(count_differing(n, s_info, a, s_get, a, s_get, b, 0), 0);
    fp8run_model *m2 = hf_load_model();
    OK(fp8run_model_load_safetensors(m2, st, FP8RUN_LOAD_STRICT, NULL));
    fp8run_session *c = new_session_prec(m2, "bf16");
    CU_ASSERT(bits_equal(hf_eval(b), hf_eval(c)));
    fp8run_session_destroy(c);
    fp8run_model_destroy(m2);
    fp8run_safetensors_close(st);
    fp8run_session_destroy(b);
    fp8run_session_destroy(a);
    fp8run_model_destroy(m);
}

/* The trainer names its parameters by module (folded q/k/v/o and MLP weights under
 * model.layers.N..., graph/params.c): the fixture matches completely. */
static void test_full_match(void)
{
    char p[512], dir[512], out[600];
    fp8run_model *m = hf_load_model();
    fp8run_session *s = new_session(m);
    CU_ASSERT_FATAL(session_has(s, "model.layers.0.self_attn.q_proj.weight"));
    const double l0 = hf_eval(s);
    fp8run_safetensors *st = open_st(fr_fixture(p, sizeof p, WEIGHTS));
    fp8run_load_report r = {.struct_size = sizeof r};
    OK(fp8run_session_load_safetensors(s, st, FP8RUN_LOAD_STRICT, &r));
    CU_ASSERT(r.n_matched == 21 && r.n_missing == 0 && r.n_unexpected == 0);
    CU_ASSERT(bits_equal(hf_eval(s), l0));
    /* and written back: what save_pretrained wrote, byte for byte */
    fr_test_tmpdir(dir, sizeof dir);
    OK(fp8run_session_save_safetensors(s, dir, FP8RUN_DTYPE_FLOAT32, 0));
    snprintf(out, sizeof out, "%s/model.safetensors", dir);
    size_t la, lb;
    char *a = cli_slurp(fr_fixture(p, sizeof p, WEIGHTS "/model.safetensors"), &la), *b = cli_slurp(out, &lb);
    CU_ASSERT(la == lb && memcmp(a, b, la) == 0);
    free(a);
    free(b);
    fp8run_safetensors_close(st);
    fp8run_session_destroy(s);
    fp8run_model_destroy(m);
}

/* ---- writing ---- */

static void check_written(fp8run_model *m, const char *dir, fp8run_dtype dt)
{
    fp8run_safetensors *st = open_st(dir);
    int n = fp8run_model_param_count(m);
    const char *prev = "";
    CU_ASSERT_EQUAL(fp8run_safetensors_tensor_count(st), n);
    for (int i = 0; i < fp8run_safetensors_tensor_count(st); i++) {
        fp8run_value_info w = {.struct_size = sizeof w};
        OK(fp8run_safetensors_tensor(st, i, &w));
        CU_ASSERT(w.dtype == dt);
        CU_ASSERT(strcmp(w.name, prev) > 0); /* in name order, as save_pretrained writes */
        prev = w.name;
    }
    CU_ASSERT_EQUAL(count_differing(n, m_info, m, st_get, st, m_get, m, dt == FP8RUN_DTYPE_BFLOAT16), 0);
    fp8run_safetensors_close(st);
}

static void test_save(void)
{
    char dir[512], p[700];
    fp8run_model *m = hf_load_model();
    fr_test_tmpdir(dir, sizeof dir);
    OK(fp8run_model_save_safetensors(m, dir, FP8RUN_DTYPE_UNDEFINED, 0));
    check_written(m, dir, FP8RUN_DTYPE_FLOAT32);
    OK(fp8run_model_save_safetensors(m, dir, FP8RUN_DTYPE_BFLOAT16, 0));
    check_written(m, dir, FP8RUN_DTYPE_BFLOAT16);
    /* 580 KB of weights in shards of at most 100 KB (the 60 KB tables one each) */
    OK(fp8run_model_save_safetensors(m, dir, FP8RUN_DTYPE_FLOAT32, 100000));
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    CU_ASSERT_EQUAL(access(p, F_OK), -1); /* the single file of before is gone */
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    CU_ASSERT_EQUAL(access(p, F_OK), 0);
    fr_st_ckpt *c;
    FR_ASSERT_OK(fr_st_ckpt_open(dir, &c));
    CU_ASSERT(c->n_files >= 6);
    for (int i = 0; i < c->n_files; i++) {
        uint64_t bytes = 0;
        for (int k = 0; k < c->files[i]->n; k++) bytes += c->files[i]->t[k].end - c->files[i]->t[k].begin;
        CU_ASSERT(bytes <= 100000);
    }
    char shard[700], moved[720];
    snprintf(shard, sizeof shard, "%s", c->files[0]->path);
    fr_st_ckpt_close(c);
    check_written(m, dir, FP8RUN_DTYPE_FLOAT32);
    /* a shard the index names that is a symbolic link (to its own bytes, moved aside in the
     * folder) or has a second hard link: refused, naming the index and the shard */
    const char *base = strrchr(shard, '/') + 1;
    snprintf(moved, sizeof moved, "%s.moved", shard);
    CU_ASSERT_EQUAL_FATAL(rename(shard, moved), 0);
    CU_ASSERT_EQUAL_FATAL(symlink(strrchr(moved, '/') + 1, shard), 0);
    fp8run_safetensors *bad = NULL;
    CU_ASSERT_EQUAL(fp8run_safetensors_open(dir, &bad), FP8RUN_ERR_IO);
    CU_ASSERT_PTR_NULL(bad);
    char want[800];
    snprintf(want, sizeof want, "'%s' is a symbolic link", base);
    CU_ASSERT_PTR_NOT_NULL(strstr(fp8run_last_error(), want));
    CU_ASSERT_PTR_NOT_NULL(strstr(fp8run_last_error(), "model.safetensors.index.json"));
    CU_ASSERT_EQUAL_FATAL(unlink(shard), 0);
    CU_ASSERT_EQUAL_FATAL(link(moved, shard), 0);
    CU_ASSERT_EQUAL(fp8run_safetensors_open(dir, &bad), FP8RUN_ERR_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(fp8run_last_error(), "hard links"));
    CU_ASSERT_PTR_NOT_NULL(strstr(fp8run_last_error(), base));
    CU_ASSERT_EQUAL_FATAL(unlink(moved), 0); /* one name again: it opens */
    check_written(m, dir, FP8RUN_DTYPE_FLOAT32);
    CU_ASSERT_EQUAL(fp8run_model_save_safetensors(m, dir, FP8RUN_DTYPE_INT64, 0), FP8RUN_ERR_UNSUPPORTED);
    CU_ASSERT_EQUAL(fp8run_model_save_safetensors(m, "", FP8RUN_DTYPE_FLOAT32, 0), FP8RUN_ERR_INVALID_ARG);
    fp8run_model_destroy(m);
}

/* ---- the CLI ---- */

static void test_cli(void)
{
    char model[512], weights[512], tokens[512];
    fr_fixture(model, sizeof model, MODEL);
    fr_fixture(weights, sizeof weights, WEIGHTS);
    fr_fixture(tokens, sizeof tokens, "hf/tokens.bin");
    CLI_EXPECT(cli_run("train '%s' --data '%s' --steps 1 --batch 2 --seq 11 --lr 1e-3 --init-from '%s' "
                       "--ckpt-dir ck", model, tokens, weights), 0, cli_err, "parameters loaded");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "unexpected"));
    CLI_EXPECT(cli_run("train '%s' --data '%s' --steps 1 --batch 2 --seq 11 --lr 1e-3 --init-from nowhere", model,
                       tokens), 1, cli_err, "nowhere");
    CLI_EXPECT(cli_run("export ck/step_00000001.ckpt --safetensors hf --dtype bf16"), 0, cli_out, "exported");
    char p[700];
    snprintf(p, sizeof p, "%s/hf/model.safetensors", cli_tmp);
    fr_st_file *f;
    FR_ASSERT_OK(fr_st_open(p, &f));
    CU_ASSERT(f->n > 0 && f->t[0].dtype == FR_BF16);
    CU_ASSERT_PTR_NOT_NULL(fr_st_find(f, EMBED));
    fr_st_close(f);
    /* the checkpoint's weights, exactly (fp32): those of the model it is applied to */
    CLI_EXPECT(cli_run("export ck/step_00000001.ckpt --safetensors hf32"), 0, cli_out, "exported");
    CU_ASSERT_PTR_NULL(strstr(cli_err, "warning"));
    /* an index whose shard is a symbolic link to a real checkpoint: refused, not followed */
    CU_ASSERT_EQUAL(mkdir(cli_path("idx"), 0755), 0);
    CU_ASSERT_EQUAL(symlink("../hf32/model.safetensors", cli_path("idx/s.safetensors")), 0);
    cli_write("idx/model.safetensors.index.json", "{\"weight_map\": {\"" EMBED "\": \"s.safetensors\"}}");
    CLI_EXPECT(cli_run("train '%s' --data '%s' --steps 1 --batch 2 --seq 11 --lr 1e-3 --init-from idx", model, tokens),
               1, cli_err, "'s.safetensors' is a symbolic link");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_err, "idx/model.safetensors.index.json"));
    snprintf(p, sizeof p, "%s/ck/step_00000001.ckpt", cli_tmp);
    fp8run_model *m = hf_load_model();
    OK(fp8run_model_apply_checkpoint(m, p, NULL));
    snprintf(p, sizeof p, "%s/hf32", cli_tmp);
    fp8run_safetensors *st = open_st(p);
    CU_ASSERT_EQUAL(fp8run_safetensors_tensor_count(st), fp8run_model_param_count(m));
    CU_ASSERT_EQUAL(count_differing(fp8run_safetensors_tensor_count(st), st_info, st, st_get, st, m_get, m, 0), 0);
    fp8run_safetensors_close(st);
    fp8run_model_destroy(m);
    /* a run that froze some parameters: they are not in its checkpoint, and the export says so */
    CLI_EXPECT(cli_run("train '%s' --data '%s' --steps 1 --batch 2 --seq 11 --lr 1e-3 --freeze norm --ckpt-dir ckf",
                       model, tokens), 0, cli_out, "trained");
    CLI_EXPECT(cli_run("export ckf/step_00000001.ckpt --safetensors hff"), 0, cli_err, "frozen");
    snprintf(p, sizeof p, "%s/hff", cli_tmp);
    st = open_st(p);
    for (int i = 0; i < fp8run_safetensors_tensor_count(st); i++) {
        fp8run_value_info v = {.struct_size = sizeof v};
        OK(fp8run_safetensors_tensor(st, i, &v));
        CU_ASSERT_PTR_NULL(strstr(v.name, "norm"));
    }
    fp8run_safetensors_close(st);
    CLI_EXPECT(cli_run("export ck/step_00000001.ckpt --safetensors hf --dtype fp16"), 2, cli_err, "fp16");
    CLI_EXPECT(cli_run("export ck/step_00000001.ckpt --safetensors hf -o x.onnx"), 2, cli_err, "not both");
    CLI_EXPECT(cli_run("export ck/step_00000001.ckpt --dtype bf16 -o x.onnx"), 2, cli_err, "--safetensors");
}

static CU_TestInfo tests[] = {
    {"init_from_fixture", test_init_from_fixture},
    {"init_from_changed", test_init_from_changed},
    {"fused_round_trip", test_fused_round_trip},
    {"full_match", test_full_match},
    {"save", test_save},
    {"cli", test_cli},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"api_safetensors", hf_suite_init, cli_suite_clean, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
