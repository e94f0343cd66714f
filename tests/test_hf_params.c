/* The trainable set of torch.onnx dynamo exports (graph/params.h) on tests/fixtures/hf:
 *  - the parameters fp8run trains are exactly meta.json's "parameters" (the module's
 *    named_parameters(): names and shapes, Linear weights [out, in]) where the file holds
 *    them; where the exporter folded one into a constant, exactly those are missing (listed
 *    here): a static position table's rows train as "<table>[0:T]"; Gemma's folded 1 + w is
 *    un-folded into each norm's own gain;
 *  - Pow exponents, epsilons, masks, rotary tables are not trained, and say why (`fp8run
 *    info`, with --train/--freeze); without the record, the stated rule; the C API and
 *    --log-fp8 use the module's names;
 *  - llama_op18_static through the CLI: 20 AdamW fp32 steps follow PyTorch's losses within
 *    1e-4 relative with no skipped step; the checkpoint and the exported model carry the
 *    module's names and shapes; the exported model trains the same set when loaded again and
 *    onnxruntime (where installed) reproduces fp8run's logits on it within 1e-4. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cli_runner.h"
#include "fp8run.h"
#include "graph/onnx_io.h"
#include "graph/params.h"

#define MAXP 128

typedef struct pinfo {
    char name[200];
    int rank;
    int64_t dims[FR_MAX_RANK];
} pinfo;

/* meta.json's "parameters": {"name": [dims], ...}; returns the count, -1 when unreadable. */
static int read_meta(const char *fixture, pinfo *p)
{
    char rel[300], path[700];
    snprintf(rel, sizeof rel, "hf/%s/meta.json", fixture);
    char *s = cli_slurp(fr_fixture(path, sizeof path, rel), NULL);
    char *q = strstr(s, "\"parameters\": {");
    int n = -1;
    if (q) {
        n = 0;
        q += strlen("\"parameters\": {");
        for (;;) {
            q += strspn(q, " \n\t,");
            if (*q != '"' || n == MAXP) break;
            char *e = strchr(q + 1, '"');
            if (!e || (size_t)(e - q - 1) >= sizeof p[n].name) break;
            memcpy(p[n].name, q + 1, (size_t)(e - q - 1));
            p[n].name[e - q - 1] = '\0';
            q = strchr(e, '[');
            if (!q) break;
            q++;
            p[n].rank = 0;
            for (;;) {
                q += strspn(q, " \n\t,");
                if (*q == ']' || p[n].rank == FR_MAX_RANK) break;
                p[n].dims[p[n].rank++] = strtoll(q, &q, 10);
            }
            q++;
            n++;
        }
    }
    free(s);
    return n;
}

/* Compare g's trained initializers with meta: returns the number of differences (printed);
 * names in `absent` (NULL-terminated) must be missing from g instead. */
static int compare_params(const fr_graph *g, const pinfo *meta, int n_meta, const char *const *absent)
{
    int diff = 0, found = 0;
    for (int i = 0; i < g->n_initializers; i++) {
        const fr_value *v = &g->values[g->initializers[i]];
        if (!(v->flags & FR_VAL_PARAM)) continue;
        int k = 0;
        while (k < n_meta && strcmp(meta[k].name, v->name) != 0) k++;
        if (k == n_meta) {
            /* rows 0..T-1 of an absent table [P, D], trained as "<table>[0:T]" [T, D] */
            int standin = 0;
            for (int j = 0; absent && absent[j]; j++) {
                char want[300];
                int m = 0;
                snprintf(want, sizeof want, "%s[0:%lld]", absent[j], v->rank == 2 ? (long long)v->dims[0] : -1LL);
                while (m < n_meta && strcmp(meta[m].name, absent[j]) != 0) m++;
                standin |= strcmp(v->name, want) == 0 && m < n_meta && meta[m].rank == 2 &&
                           v->dims[0] <= meta[m].dims[0] && v->dims[1] == meta[m].dims[1];
                /* or the [1, T, D] rows a batch shares (OPT: positions from the mask), trained once */
                snprintf(want, sizeof want, "the rows of parameter '%s' ", absent[j]);
                standin |= v->param_note && strstr(v->param_note, want) && m < n_meta && meta[m].rank == 2 &&
                           v->rank == 3 && v->dims[0] == 1 && v->dims[1] <= meta[m].dims[0] &&
                           v->dims[2] == meta[m].dims[1];
            }
            if (!standin) {
                printf("\n  trained but not a module parameter: %s (%s)", v->name, v->param_note ? v->param_note : "");
                diff++;
            }
            continue;
        }
        found++;
        if (meta[k].rank != v->rank || memcmp(meta[k].dims, v->dims, (size_t)v->rank * sizeof(int64_t)) != 0) {
            printf("\n  %s: shape differs from the module's", v->name);
            diff++;
        }
    }
    int n_absent = 0;
    for (; absent && absent[n_absent]; n_absent++) {
        int vid = fr_graph_find_value(g, absent[n_absent]);
        if (vid >= 0 && (g->values[vid].flags & FR_VAL_PARAM)) {
            printf("\n  %s: trained, but listed as lost", absent[n_absent]);
            diff++;
        }
    }
    for (int k = 0; k < n_meta; k++) {
        int vid = fr_graph_find_value(g, meta[k].name), lost = 0;
        for (int j = 0; j < n_absent; j++) lost |= strcmp(absent[j], meta[k].name) == 0;
        if (!lost && (vid < 0 || !(g->values[vid].flags & FR_VAL_PARAM)))
            printf("\n  module parameter not trained: %s", meta[k].name);
    }
    if (found + n_absent != n_meta) {
        printf("\n  %d of %d module parameters trained, %d expected lost", found, n_meta, n_absent);
        diff++;
    }
    return diff;
}

static fr_graph *load_fixture(const char *fixture)
{
    char rel[300], path[700];
    snprintf(rel, sizeof rel, "hf/%s/model.onnx", fixture);
    fr_graph *g = NULL;
    fr_status st = fr_onnx_load_file(fr_fixture(path, sizeof path, rel), &g);
    if (st != FR_OK) printf("\n  %s: %s", fixture, fr_last_error());
    return g;
}

/* lost: module parameters the file does not hold as such (n_lost_notes of its constants say
 * a parameter was folded beyond undoing; the others are trained through stand-ins). */
static void check_fixture(const char *fixture, const char *const *lost, int want_lost_notes)
{
    pinfo meta[MAXP];
    int n_meta = read_meta(fixture, meta);
    CU_ASSERT_FATAL(n_meta > 0);
    fr_graph *g = load_fixture(fixture);
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    CU_ASSERT_EQUAL(compare_params(g, meta, n_meta, lost), 0);
    /* nothing folded from a parameter is trained in its stead, every float constant says why */
    int n_lost_notes = 0;
    for (int i = 0; i < g->n_initializers; i++) {
        const fr_value *v = &g->values[g->initializers[i]];
        if (!fr_dtype_is_float(v->dtype)) continue;
        CU_ASSERT_PTR_NOT_NULL(v->param_note);
        if (v->param_note && strstr(v->param_note, "that parameter is not trained")) n_lost_notes++;
    }
    CU_ASSERT_EQUAL(n_lost_notes, want_lost_notes);
    fr_graph_free(g);
}

static void test_llama_family(void)
{
    static const char *const names[] = {
        "llama_op18_static", "llama_op18_dynamic", "mistral_op18_static", "phi3_op18_static", "qwen2_op18_static",
        "gpt2_op18_dynamic", "llama_op23_static", "llama_op23_dynamic", "mistral_op23_static", "phi3_op23_static",
        "qwen2_op23_static", "gpt2_op23_dynamic"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) check_fixture(names[i], NULL, 0);
}

/* The LayerNorm/GELU, softcapping and parallel-block families; OPT's positions come from the
 * attention mask, so the fold is [B, T, D] with B equal rows: one [1, T, D] trains in the
 * table's place (absent here), broadcast, and its dropped fc biases (zeros) are restored. */
static void test_more_families(void)
{
    static const char *const opt[] = {"model.decoder.embed_positions.weight", NULL};
    static const char *const names[] = {"gemma2_op18_static", "gemma2_op23_dynamic", "starcoder2_op18_static",
                                        "starcoder2_op23_dynamic", "phi_op18_static", "phi_op23_static",
                                        "falcon_op18_static"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) check_fixture(names[i], NULL, 0);
    check_fixture("opt_op18_static", opt, 0);
    check_fixture("opt_op23_static", opt, 0);
}

/* Gemma's norm gains: the file holds one initializer, 1 + w, all five merged into it; each
 * is un-folded to Add(w, 1) (exact: 1 + (v - 1) == v) and split per reading module, so the
 * trained set is the module's. Static position embeddings: the file holds only the rows a
 * fixed arange reads (Gather folded), not the table's length: those rows train as
 * "<table>[0:T]" [T, D] and the table itself is absent (and not reported lost: its rows train,
 * following PyTorch exactly in test_hf_exports). */
static void test_folded(void)
{
    static const char *const gpt2[] = {"transformer.wpe.weight", NULL};
    static const char *const bert[] = {"bert.embeddings.position_embeddings.weight", NULL};
    for (int op = 18; op <= 23; op += 5) {
        char name[64];
        snprintf(name, sizeof name, "gemma_op%d_static", op);
        check_fixture(name, NULL, 0);
        snprintf(name, sizeof name, "gpt2_op%d_static", op);
        check_fixture(name, gpt2, 0);
        snprintf(name, sizeof name, "bert_op%d_static", op);
        check_fixture(name, bert, 0);
    }
    /* the un-folded gains equal 1 + w of the file, i.e. w = add_4 - 1 (Gemma inits w = 0) */
    fr_graph *g = load_fixture("gemma_op18_static");
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    int w = fr_graph_find_value(g, "model.norm.weight"), f = fr_graph_find_value(g, "add_4");
    CU_ASSERT_FATAL(w >= 0 && f >= 0 && g->values[w].constant);
    for (int i = 0; i < 48; i++) CU_ASSERT_EQUAL(((const float *)g->values[w].constant->data)[i], 0.f);
    CU_ASSERT(g->values[f].constant == NULL && g->values[f].producer >= 0);
    fr_graph_free(g);
}

/* The constants of llama_op18_static are not trained, for the stated reasons. */
static void test_reasons(void)
{
    fr_graph *g = load_fixture("llama_op18_static");
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    static const struct { const char *name, *note; } want[] = {
        {"val_88", "scalar"},                                        /* Pow exponent 2 */
        {"val_204", "constant folded by the exporter"},               /* causal mask */
        {"unsqueeze_16", "constant folded by the exporter"},          /* rotary cos */
        {"model.layers.0.self_attn.q_proj.weight", "parameter, un-folded from 'val_93' (Transpose)"},
        {"model.layers.1.input_layernorm.weight", "parameter (stored merged into"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int vid = fr_graph_find_value(g, want[i].name);
        CU_ASSERT_FATAL(vid >= 0);
        const char *note = g->values[vid].param_note;
        CU_ASSERT(note && strncmp(note, want[i].note, strlen(want[i].note)) == 0);
        if (!note || strncmp(note, want[i].note, strlen(want[i].note)) != 0)
            printf("\n  %s: note '%s', want '%s'", want[i].name, note ? note : "(none)", want[i].note);
    }
    /* val_93 is computed again, from the module's weight */
    int f = fr_graph_find_value(g, "val_93");
    CU_ASSERT_FATAL(f >= 0);
    CU_ASSERT(g->values[f].constant == NULL && g->values[f].producer >= 0);
    if (g->values[f].producer >= 0) CU_ASSERT_STRING_EQUAL(g->nodes[g->values[f].producer].op_type, "Transpose");
    fr_graph_free(g);
}

/* Without the exporter's record: every float initializer trains except scalars, tensors read
 * only where no gradient flows, and additive masks; a zero bias still trains. */
static fr_value *add_const(fr_graph *g, const char *name, int rank, const int64_t *dims, const float *vals)
{
    int vid;
    fr_tensor *t;
    FR_ASSERT_OK(fr_graph_add_value(g, name, &vid));
    FR_ASSERT_OK(fr_tensor_new(FR_F32, rank, dims, name, &t));
    for (int64_t i = 0; vals && i < fr_tensor_numel(t); i++) ((float *)t->data)[i] = vals[i % 2];
    FR_ASSERT_OK(fr_graph_set_initializer(g, vid, t));
    return &g->values[vid];
}

static int add_op(fr_graph *g, const char *op, const char *a, const char *b, const char *out)
{
    int in[2] = {fr_graph_find_value(g, a), fr_graph_find_value(g, b)}, o, nid;
    if (fr_graph_add_value(g, out, &o) != FR_OK) return -1;
    return fr_graph_add_node(g, op, "", out, 2, in, 1, &o, &nid) == FR_OK ? nid : -1;
}

static void test_rule(void)
{
    fr_graph *g;
    FR_ASSERT_OK(fr_graph_new(&g));
    int x;
    FR_ASSERT_OK(fr_graph_add_value(g, "x", &x));
    fr_value_set_shape(&g->values[x], FR_F32, 2, (const int64_t[]){4, 4});
    FR_ASSERT_OK(fr_graph_mark_input(g, x));
    const int64_t d44[2] = {4, 4}, d4[1] = {4};
    add_const(g, "w", 2, d44, (const float[]){0.5f, -0.25f});
    add_const(g, "two", 0, NULL, (const float[]){2, 2});
    add_const(g, "exps", 1, d4, (const float[]){2, 3});
    add_const(g, "mask", 2, d44, (const float[]){0, -INFINITY});
    add_const(g, "finfo_mask", 2, d44, (const float[]){-3.4028235e38f, 0});
    add_const(g, "bias", 1, d4, NULL); /* zeros */
    CU_ASSERT(add_op(g, "MatMul", "x", "w", "y") >= 0);
    CU_ASSERT(add_op(g, "Pow", "y", "two", "p") >= 0);
    CU_ASSERT(add_op(g, "Pow", "p", "exps", "q") >= 0);
    CU_ASSERT(add_op(g, "Add", "q", "mask", "m") >= 0);
    CU_ASSERT(add_op(g, "Add", "m", "finfo_mask", "m2") >= 0);
    CU_ASSERT(add_op(g, "Add", "m2", "bias", "out") >= 0);
    FR_ASSERT_OK(fr_graph_mark_output(g, fr_graph_find_value(g, "out")));
    FR_ASSERT_OK(fr_params_select(g, NULL));
    static const struct { const char *name, *note; int trained; } want[] = {
        {"w", "float initializer", 1},
        {"bias", "float initializer", 1},
        {"two", "scalar", 0},
        {"exps", "feeds only non-differentiable inputs of Pow", 0},
        {"mask", "additive mask", 0},
        {"finfo_mask", "additive mask", 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const fr_value *v = &g->values[fr_graph_find_value(g, want[i].name)];
        CU_ASSERT_EQUAL(!!(v->flags & FR_VAL_PARAM), want[i].trained);
        CU_ASSERT(v->param_note && strcmp(v->param_note, want[i].note) == 0);
    }
    /* with a record, a BUFFER is a constant even where the rule would train it */
    fr_value *b = &g->values[fr_graph_find_value(g, "bias")];
    b->torch_kind = strdup("BUFFER");
    FR_ASSERT_OK(fr_params_select(g, NULL));
    b = &g->values[fr_graph_find_value(g, "bias")];
    CU_ASSERT(!(b->flags & FR_VAL_PARAM) && b->param_note && strcmp(b->param_note, "buffer") == 0);
    CU_ASSERT(!(g->values[fr_graph_find_value(g, "w")].flags & FR_VAL_PARAM)); /* no kind: not a parameter */
    fr_graph_free(g);
}

/* A parameter folded with a scalar the file does not hold: op from the value's fx name, the
 * scalar from the readers' source line, kept only when the inverse is exact; each reading
 * module that owns an unheld parameter of the same leaf name gets its own copy. */
static fr_graph *scalar_fold(const char *folded, const float *vals, const char *src0, const char *src1)
{
    fr_graph *g;
    FR_ASSERT_OK(fr_graph_new(&g));
    int x;
    FR_ASSERT_OK(fr_graph_add_value(g, "x", &x));
    fr_value_set_shape(&g->values[x], FR_F32, 1, (const int64_t[]){4});
    FR_ASSERT_OK(fr_graph_mark_input(g, x));
    fr_value *f = add_const(g, folded, 1, (const int64_t[]){4}, NULL);
    memcpy(f->constant->data, vals, 4 * sizeof(float));
    f->folded_from = strdup("['m.gain', 'val_3']");
    g->torch_signature = strdup("p_m_gain: PARAMETER target='m.gain'\np_n_gain: PARAMETER target='n.gain'\n"
                                "x: USER_INPUT\n");
    const char *src[2] = {src0, src1}, *scope[2] = {"['', 'm', 'mul']", "['', 'n', 'mul_1']"};
    for (int r = 0; r < 2; r++) {
        int nid = add_op(g, "Mul", r ? "y0" : "x", folded, r ? "y1" : "y0");
        CU_ASSERT_FATAL(nid >= 0);
        g->nodes[nid].torch_src = strdup(src[r]);
        g->nodes[nid].torch_scopes = strdup(scope[r]);
    }
    FR_ASSERT_OK(fr_graph_mark_output(g, fr_graph_find_value(g, "y1")));
    return g;
}

static void test_scalar_unfold(void)
{
    int lost = -1;
    /* Mul by 3, exact, all equal (merged by value): both modules get w = v / 3, and the value
     * is Mul(w, 3) again */
    const float v3[4] = {3, 6, -1.5f, 0.75f}, v6[4] = {6, 6, 6, 6};
    fr_graph *g = scalar_fold("mul_2", v6, "return x * (self.gain * 3)", "return x * (self.gain * 3)");
    FR_ASSERT_OK(fr_params_select(g, &lost));
    CU_ASSERT_EQUAL(lost, 0);
    const char *names[2] = {"m.gain", "n.gain"};
    for (int k = 0; k < 2; k++) {
        int w = fr_graph_find_value(g, names[k]);
        CU_ASSERT_FATAL(w >= 0 && g->values[w].constant);
        CU_ASSERT(g->values[w].flags & FR_VAL_PARAM);
        const float *d = g->values[w].constant->data;
        CU_ASSERT(d[0] == 2 && d[1] == 2 && d[2] == 2 && d[3] == 2);
    }
    int f = fr_graph_find_value(g, "mul_2");
    CU_ASSERT(g->values[f].constant == NULL && g->values[f].producer >= 0 &&
              strcmp(g->nodes[g->values[f].producer].op_type, "Mul") == 0);
    fr_graph_free(g);
    /* Add 1 where v - 1 + 1 != v (3e-8): kept as the folded constant, the parameter lost */
    const float vi[4] = {1, 2, 3e-8f, 1.5f};
    g = scalar_fold("add_4", vi, "return x * (1.0 + self.gain)", "return x * (1.0 + self.gain)");
    FR_ASSERT_OK(fr_params_select(g, &lost));
    CU_ASSERT_EQUAL(lost, 1);
    CU_ASSERT_EQUAL(fr_graph_find_value(g, "m.gain"), -1);
    f = fr_graph_find_value(g, "add_4");
    CU_ASSERT(g->values[f].constant != NULL && !(g->values[f].flags & FR_VAL_PARAM));
    fr_graph_free(g);
    /* readers that disagree on the literal, an op that is not the fx node's, a literal that is
     * not the op's whole other operand: not un-folded */
    const float v1[4] = {1, 1, 1, 1};
    static const char *const cases[][3] = {{"add_4", "x * (1.0 + self.gain)", "x * (2.0 + self.gain)"},
                                           {"add_4", "x * (self.gain * 1.0)", "x * (self.gain * 1.0)"},
                                           {"mystery", "x * (1.0 + self.gain)", "x * (1.0 + self.gain)"},
                                           {"add_4", "x * (1.0 + self.gain * 2)", "x * (1.0 + self.gain * 2)"},
                                           {"add_4", "x * (self.gain + 1.0 * 2)", "x * (self.gain + 1.0 * 2)"},
                                           {"add_4", "x * (y - 1.0 + self.gain)", "x * (y - 1.0 + self.gain)"}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        g = scalar_fold(cases[c][0], v1, cases[c][1], cases[c][2]);
        FR_ASSERT_OK(fr_params_select(g, &lost));
        CU_ASSERT_EQUAL(lost, 1);
        CU_ASSERT_EQUAL(fr_graph_find_value(g, "m.gain"), -1);
        fr_graph_free(g);
    }
    /* Add 1, exact, with 1.0 on the right: w = v - 1 */
    g = scalar_fold("add_9", v3, "x * (self.gain.float() + 1.0)", "x * (self.gain.float() + 1.0)");
    FR_ASSERT_OK(fr_params_select(g, &lost));
    CU_ASSERT_EQUAL(lost, 0);
    int w = fr_graph_find_value(g, "m.gain");
    CU_ASSERT_FATAL(w >= 0);
    const float *d = g->values[w].constant->data;
    CU_ASSERT(d[0] == 2 && d[1] == 5 && d[2] == -2.5f && d[3] == -0.25f);
    CU_ASSERT_EQUAL(fr_graph_find_value(g, "n.gain"), -1); /* not all equal: not split */
    fr_graph_free(g);
}

/* `fp8run info` lists the trained set and the reasons; --train/--freeze apply; the C API reads
 * a parameter under the module's name and layout. */
static void test_info_api(void)
{
    char path[700];
    fr_fixture(path, sizeof path, "hf/llama_op18_static/model.onnx");
    CLI_EXPECT(cli_run("info '%s' --precision fp32", path), 0, cli_out,
               "model.layers.0.self_attn.q_proj.weight       [72, 72]       parameter, un-folded from 'val_93' "
               "(Transpose)");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "  val_88                                       []             scalar"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "val_204                                      [2, 1, 11, 11] constant "
                                           "folded by the exporter"));
    CU_ASSERT_PTR_NULL(strstr(cli_out, "warning"));
    CLI_EXPECT(cli_run("info '%s' --precision fp32 --freeze 'mlp' --train 'layers\\.1|val_204'", path), 0, cli_out,
               "model.layers.1.mlp.up_proj.weight            [200, 72]      frozen by --freeze");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "model.layers.1.self_attn.q_proj.weight       [72, 72]       parameter, "
                                           "un-folded from 'val_228' (Transpose)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "model.layers.0.self_attn.q_proj.weight       [72, 72]       not selected "
                                           "by --train"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "val_204                                      [2, 1, 11, 11] selected by "
                                           "--train, but not a parameter: constant folded by the exporter"));
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "warning: --train selects 1 initializer the model does not record"));
    fr_fixture(path, sizeof path, "hf/gemma_op18_static/model.onnx");
    CLI_EXPECT(cli_run("info '%s' --precision fp32", path), 0, cli_out,
               "model.layers.0.input_layernorm.weight        [48]           parameter, un-folded from 'add_4' (Add 1)");
    CU_ASSERT_PTR_NOT_NULL(strstr(cli_out, "model.norm.weight                            [48]           parameter, "
                                           "un-folded from 'add_4' (Add 1; stored merged into one, equal values)"));
    CU_ASSERT_PTR_NULL(strstr(cli_out, "warning"));
    fr_fixture(path, sizeof path, "hf/gpt2_op18_static/model.onnx");
    CLI_EXPECT(cli_run("info '%s' --precision fp32", path), 0, cli_out,
               "transformer.wpe.weight[0:11]                 [11, 72]       rows 0..10 of parameter "
               "'transformer.wpe.weight' (the exporter folded the lookup at positions 0..10; the file holds no "
               "other row of the table)");

    /* q_proj through the public API: [out, in], the transpose of what the file stored as val_93 */
    fp8run_model *m;
    fr_fixture(path, sizeof path, "hf/llama_op18_static/model.onnx");
    CU_ASSERT_EQUAL_FATAL(fp8run_model_load(path, &m), FP8RUN_OK);
    float *w = malloc(72 * 72 * sizeof *w);
    CU_ASSERT_EQUAL(fp8run_model_get_param(m, "model.layers.0.self_attn.q_proj.weight", w, 72 * 72), FP8RUN_OK);
    CU_ASSERT_NOT_EQUAL(fp8run_model_get_param(m, "val_93", w, 72 * 72), FP8RUN_OK);
    /* the un-folded graph computes val_93 = Transpose(q_proj): compare with the file's bytes */
    char cmd[1500];
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import onnx, numpy as np; from onnx import numpy_helper as h; "
             "m = onnx.load('%s'); t = [i for i in m.graph.initializer if i.name == 'val_93'][0]; "
             "h.to_array(t).T.astype(np.float32).tofile('%s/q.bin')\"",
             path, cli_tmp);
    if (system(cmd) == 0) {
        char qp[700];
        snprintf(qp, sizeof qp, "%s/q.bin", cli_tmp);
        size_t len;
        char *q = cli_slurp(qp, &len);
        CU_ASSERT(len == 72 * 72 * sizeof(float) && memcmp(q, w, len) == 0);
        free(q);
    } else {
        printf("(SKIP file comparison: python3 with onnx not available) ");
    }
    free(w);
    fp8run_model_destroy(m);

    /* --log-fp8 names the module parameters each Linear reads */
    char pbuf[900], tok[700];
    fr_fixture(tok, sizeof tok, "hf/tokens.bin");
    CLI_EXPECT(cli_run("train '%s' --data '%s' --steps 1 --batch 2 --seq 11 --lr 1e-3 --precision fp8 "
                       "--log fp8.jsonl --log-fp8 1", path, tok),
               0, cli_out, "(0 skipped)");
    char *log = cli_slurp((snprintf(pbuf, sizeof pbuf, "%s/fp8.jsonl", cli_tmp), pbuf), NULL);
    CU_ASSERT_PTR_NOT_NULL(strstr(log, "\"weights\": \"model.layers.0.self_attn.o_proj.weight\", \"operand\": \"w\""));
    free(log);
}

/* The model's value of parameter vi as the checkpoint holds it: the tensor of its name, or for
 * "<table>[0:T]" the first T rows of <table>. */
static float *expected_value(fp8run_safetensors *st, const fp8run_value_info *vi)
{
    char base[300];
    snprintf(base, sizeof base, "%s", vi->name);
    char *b = strstr(base, "[0:");
    size_t count = (size_t)vi->numel;
    if (b) {
        *b = '\0';
        for (int i = 0; i < fp8run_safetensors_tensor_count(st); i++) {
            fp8run_value_info ti = {.struct_size = sizeof ti};
            if (fp8run_safetensors_tensor(st, i, &ti) == FP8RUN_OK && strcmp(ti.name, base) == 0) count = (size_t)ti.numel;
        }
    }
    float *v = malloc(count * sizeof *v);
    CU_ASSERT_EQUAL(fp8run_safetensors_read(st, base, v, count), FP8RUN_OK);
    return v;
}

/* Tied models and safetensors, as transformers' save_pretrained names them: the tied
 * embedding once, under the embedding's name (model.embed_tokens.weight, transformer.wte.weight;
 * no lm_head.weight). A file written that way from meta.json's names loads strictly (nothing
 * missing or unexpected; a static position table's rows from the table); the model writes the
 * same names back, lm_head.weight not among them. A torch state_dict() that also holds
 * lm_head.weight loads, with lm_head.weight reported unexpected. */
static void test_safetensors_ties(void)
{
    static const char *const fx[][2] = {{"qwen2_op18_static", "model.embed_tokens.weight"},
                                        {"gemma_op18_static", "model.embed_tokens.weight"},
                                        {"gpt2_op18_static", "transformer.wte.weight"},
                                        {"bert_op23_static", "bert.embeddings.word_embeddings.weight"}};
    char cmd[4096], meta[700], script[700], pbuf[900], model[700], rel[300];
    fr_fixture(script, sizeof script, "hf/make_safetensors.py");
    for (size_t f = 0; f < sizeof fx / sizeof fx[0]; f++) {
        snprintf(rel, sizeof rel, "hf/%s/meta.json", fx[f][0]);
        fr_fixture(meta, sizeof meta, rel);
        snprintf(cmd, sizeof cmd, "python3 '%s' '%s' '%s/hf_%zu.safetensors' && python3 '%s' '%s' '%s/hf_%zu_sd.safetensors' "
                 "--lm-head %s", script, meta, cli_tmp, f, script, meta, cli_tmp, f, fx[f][1]);
        if (system(cmd) != 0) {
            printf("(SKIP: python3 with numpy not available) ");
            return;
        }
        snprintf(rel, sizeof rel, "hf/%s/model.onnx", fx[f][0]);
        fp8run_model *m;
        CU_ASSERT_EQUAL_FATAL(fp8run_model_load(fr_fixture(model, sizeof model, rel), &m), FP8RUN_OK);
        fp8run_safetensors *st;
        snprintf(pbuf, sizeof pbuf, "%s/hf_%zu.safetensors", cli_tmp, f);
        CU_ASSERT_EQUAL_FATAL(fp8run_safetensors_open(pbuf, &st), FP8RUN_OK);
        fp8run_load_report r = {.struct_size = sizeof r};
        fp8run_status ls = fp8run_model_load_safetensors(m, st, FP8RUN_LOAD_STRICT, &r);
        CU_ASSERT_EQUAL(ls, FP8RUN_OK);
        if (ls != FP8RUN_OK) printf("\n  %s: %s", fx[f][0], fp8run_model_error(m));
        CU_ASSERT_EQUAL(r.n_matched, fp8run_model_param_count(m));
        for (int i = 0; i < fp8run_model_param_count(m); i++) {
            fp8run_value_info vi = {.struct_size = sizeof vi};
            CU_ASSERT_EQUAL_FATAL(fp8run_model_param(m, i, &vi), FP8RUN_OK);
            float *got = malloc((size_t)vi.numel * sizeof *got), *want = expected_value(st, &vi);
            CU_ASSERT_EQUAL(fp8run_model_get_param(m, vi.name, got, (size_t)vi.numel), FP8RUN_OK);
            CU_ASSERT(memcmp(got, want, (size_t)vi.numel * sizeof *got) == 0);
            free(got);
            free(want);
        }
        fp8run_safetensors_close(st);
        /* written back: the same names, no lm_head.weight */
        snprintf(pbuf, sizeof pbuf, "%s/hf_out_%zu", cli_tmp, f);
        CU_ASSERT_EQUAL(fp8run_model_save_safetensors(m, pbuf, FP8RUN_DTYPE_FLOAT32, 0), FP8RUN_OK);
        CU_ASSERT_EQUAL_FATAL(fp8run_safetensors_open(pbuf, &st), FP8RUN_OK);
        CU_ASSERT_EQUAL(fp8run_safetensors_tensor_count(st), fp8run_model_param_count(m));
        int has_embed = 0;
        for (int i = 0; i < fp8run_safetensors_tensor_count(st); i++) {
            fp8run_value_info ti = {.struct_size = sizeof ti};
            CU_ASSERT_EQUAL(fp8run_safetensors_tensor(st, i, &ti), FP8RUN_OK);
            CU_ASSERT(strcmp(ti.name, "lm_head.weight") != 0);
            has_embed |= strcmp(ti.name, fx[f][1]) == 0;
        }
        CU_ASSERT(has_embed);
        fp8run_safetensors_close(st);
        /* a state_dict with the tie's second name too */
        snprintf(pbuf, sizeof pbuf, "%s/hf_%zu_sd.safetensors", cli_tmp, f);
        CU_ASSERT_EQUAL_FATAL(fp8run_safetensors_open(pbuf, &st), FP8RUN_OK);
        CU_ASSERT_EQUAL(fp8run_model_load_safetensors(m, st, 0, &r), FP8RUN_OK);
        CU_ASSERT(r.n_matched == fp8run_model_param_count(m) && r.n_unexpected == 1 &&
                  strcmp(r.unexpected[0], "lm_head.weight") == 0);
        fp8run_safetensors_close(st);
        fp8run_model_destroy(m);
    }
    /* the CLI: --init-from takes the table's rows, export --safetensors says they are rows only */
    snprintf(pbuf, sizeof pbuf, "%s/hf_2.safetensors", cli_tmp);
    fr_fixture(model, sizeof model, "hf/gpt2_op18_static");
    CLI_EXPECT(cli_run("train '%s/model.onnx' --data '%s/../tokens.bin' --steps 1 --batch 2 --seq 11 --lr 1e-3 "
                       "--precision fp32 --init-from '%s' --ckpt-dir stck", model, model, pbuf),
               0, cli_err, "28 parameters loaded, 0 missing (kept from the model), 0 unexpected (ignored)");
    CLI_EXPECT(cli_run("export stck/step_00000001.ckpt --safetensors stout"), 0, cli_err,
               "warning: 'transformer.wpe.weight[0:11]' in stout holds only those rows of 'transformer.wpe.weight'");
}

static int have_onnxruntime(void)
{
    return system("python3 -c 'import onnxruntime' >/dev/null 2>&1") == 0;
}

#define P(f) (snprintf(pbuf, sizeof pbuf, "%s/%s", cli_tmp, f), pbuf)

static void test_train_export(void)
{
    char dir[700], pbuf[900], refp[700];
    fr_fixture(dir, sizeof dir, "hf/llama_op18_static");
    CLI_EXPECT(cli_run("train '%s/model.onnx' --data '%s/../tokens.bin' --steps 20 --batch 2 --seq 11 --lr 1e-3 "
                       "--data-order sequential --log hf.jsonl --ckpt-dir hfck --export hf_trained.onnx",
                       dir, dir),
               0, cli_out, "(0 skipped)");
    double got[20], ref[20];
    int vals;
    CU_ASSERT_EQUAL_FATAL(cli_read_log(P("hf.jsonl"), got, 20, &vals, NULL), 20);
    FILE *f = fopen(fr_fixture(refp, sizeof refp, "hf/llama_op18_static/losses.txt"), "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    double worst = 0;
    for (int i = 0; i < 20; i++) {
        CU_ASSERT_EQUAL_FATAL(fscanf(f, "%lf", &ref[i]), 1);
        worst = fmax(worst, fabs(got[i] - ref[i]) / fabs(ref[i]));
    }
    fclose(f);
    printf(" (losses vs PyTorch: max rel %.1e", worst);
    CU_ASSERT(worst <= 1e-4);

    pinfo meta[MAXP];
    int n_meta = read_meta("llama_op18_static", meta);
    /* checkpoint: the module's names and shapes */
    fp8run_checkpoint *ck;
    CU_ASSERT_EQUAL_FATAL(fp8run_checkpoint_open(P("hfck/step_00000020.ckpt"), &ck), FP8RUN_OK);
    CU_ASSERT_EQUAL(fp8run_checkpoint_param_count(ck), n_meta);
    for (int i = 0; i < fp8run_checkpoint_param_count(ck); i++) {
        fp8run_value_info vi = {.struct_size = sizeof vi};
        CU_ASSERT_EQUAL_FATAL(fp8run_checkpoint_param(ck, i, &vi), FP8RUN_OK);
        int k = 0;
        while (k < n_meta && strcmp(meta[k].name, vi.name) != 0) k++;
        CU_ASSERT(k < n_meta && vi.rank == meta[k].rank &&
                  memcmp(vi.dims, meta[k].dims, (size_t)vi.rank * sizeof(int64_t)) == 0);
    }
    fp8run_checkpoint_close(ck);
    /* exported: the same names trained when loaded again */
    fr_graph *g = NULL;
    CU_ASSERT_EQUAL_FATAL(fr_onnx_load_file(P("hf_trained.onnx"), &g), FR_OK);
    CU_ASSERT_EQUAL(compare_params(g, meta, n_meta, NULL), 0);
    fr_graph_free(g);
    /* onnxruntime reproduces fp8run's logits on the exported model */
    CLI_EXPECT(cli_run("run hf_trained.onnx --input input_ids='%s/input_input_ids.npy' --output-dir hfrun", dir), 0,
               cli_out, "");
    if (have_onnxruntime()) {
        char cmd[3000];
        snprintf(cmd, sizeof cmd,
                 "cd '%s' && python3 -c \"import numpy as np, onnxruntime as ort; "
                 "s = ort.InferenceSession('hf_trained.onnx', providers=['CPUExecutionProvider']); "
                 "y = s.run(None, {'input_ids': np.load('%s/input_input_ids.npy')})[0]; "
                 "r = np.load('hfrun/logits.npy'); e = np.abs(y - r).max() / np.abs(r).max(); "
                 "print('onnxruntime vs fp8run rel', e); raise SystemExit(0 if e <= 1e-4 else 1)\"",
                 cli_tmp, dir);
        CU_ASSERT_EQUAL(system(cmd), 0);
    } else {
        printf(", SKIP onnxruntime: not installed");
    }
    printf(") ");
}

static CU_TestInfo tests[] = {
    {"llama/mistral/phi3/qwen2/gpt2 (opsets 18, 23): trained set == the module's parameters", test_llama_family},
    {"gemma 1 + w un-folded per module; gpt2/bert static position rows named after the table", test_folded},
    {"gemma2/starcoder2/phi/falcon/opt: trained set == the module's; OPT's batch-shared rows", test_more_families},
    {"llama constants not trained, with reasons; q_proj un-folded", test_reasons},
    {"parameter folded with a scalar: exact inverse only, literal from the source, split per module",
     test_scalar_unfold},
    {"without the record: scalars, non-differentiable inputs, additive masks excluded", test_rule},
    {"fp8run info: trained set, reasons, --train/--freeze; C API by module name", test_info_api},
    {"tied models: safetensors names as transformers writes them, strict load, written back", test_safetensors_ties},
    {"llama_op18_static: 20 fp32 steps follow PyTorch; checkpoint/export names; onnxruntime", test_train_export},
    CU_TEST_INFO_NULL,
};

static CU_SuiteInfo suites[] = {
    {"hf_params", cli_suite_init, cli_suite_clean, NULL, NULL, tests},
    CU_SUITE_INFO_NULL,
};

int main(void) { return fr_test_main(suites); }
