/* `fp8run bench MODEL --batch B --seq T [--precision ...]`: times training steps on random
 * tokens and reports step time, tokens/s, model FLOP utilization and memory, as a table on
 * stdout and optionally as JSON.
 *
 * FLOPs per step follow the usual accounting for decoder transformers (PaLM, appendix B):
 * 6 * N * tokens for the parameters' matrix products (forward 2, backward 4), N counting every
 * trained parameter that is read by a matrix product (embedding tables, read by a Gather, are
 * left out), plus 12 * layers * d_attn * seq * tokens for attention scores and values, where
 * layers * d_attn is taken from the model's Softmax nodes (each over [.., seq, seq]) and the
 * query width. MFU is achieved FLOP/s over the GPU's dense BF16 tensor peak (989 TFLOP/s on
 * H100/H200 SXM) for every precision, so the numbers compare across precisions; the FP8 peak is
 * twice that. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "graph/onnx_io.h"
#include "runtime/rng.h"
#include "runtime/trainer.h"

void cli_bench_help(FILE *f)
{
    fprintf(f,
            "usage: fp8run bench MODEL --batch B --seq T [options]\n"
            "\n"
            "Time training steps of MODEL (ONNX or .fbs) on random token ids and report the median\n"
            "step time, tokens/s, model FLOP utilization (vs the GPU's dense BF16 peak) and memory.\n"
            "\n"
            "options:\n"
            "  --batch B --seq T       micro-batch size and sequence length (required)\n"
            "  --precision fp32|bf16|fp8   (default fp32); --recipe delayed|current|block\n"
            "  --device auto|cuda|cpu  (default auto)\n"
            "  --warmup N              untimed steps first (default 3)\n"
            "  --steps N               timed steps (default 10)\n"
            "  --json FILE             also write the results as JSON\n"
            "  --dim NAME=VALUE        fix another symbolic dimension (repeatable)\n"
            "  -h, --help              show this help\n");
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Parameters read by MatMul/Gemm/Linear (directly or through a Transpose), in elements. */
static int64_t matmul_params(const fr_graph *g)
{
    int64_t n = 0;
    unsigned char *seen = calloc((size_t)(g->n_values ? g->n_values : 1), 1);
    if (!seen) return 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *nd = &g->nodes[i];
        int mm = strcmp(nd->op_type, "MatMul") == 0 || strcmp(nd->op_type, "Gemm") == 0;
        if (!mm) continue;
        for (int k = 0; k < nd->n_inputs && k < 2; k++) {
            int v = nd->inputs[k];
            if (v < 0) continue;
            if (g->values[v].producer >= 0) { /* through a Transpose of a parameter */
                const fr_node *p = &g->nodes[g->values[v].producer];
                if (strcmp(p->op_type, "Transpose") == 0 && p->n_inputs == 1) v = p->inputs[0];
            }
            if (v >= 0 && g->values[v].constant && (g->values[v].flags & FR_VAL_PARAM) && !seen[v]) {
                seen[v] = 1;
                n += fr_tensor_numel(g->values[v].constant);
            }
        }
    }
    free(seen);
    return n;
}

/* Attention FLOPs per token per unit of seq: sum over Softmax nodes of the query width (heads
 * x head dim), found as the K dim of the MatMul that consumes the softmax (P @ V: V's last
 * dim times the number of heads). Approximated from the model: 12 * sum(d_attn) * seq. */
static double attention_flops_per_token(const fr_graph *g, int64_t seq)
{
    double f = 0;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *nd = &g->nodes[i];
        if (strcmp(nd->op_type, "Softmax") != 0 || nd->n_outputs < 1) continue;
        /* the MatMul reading the probabilities: output [..., seq, hd] with heads in the middle dims */
        for (int j = 0; j < g->n_nodes; j++) {
            const fr_node *m = &g->nodes[j];
            if (strcmp(m->op_type, "MatMul") != 0 || m->inputs[0] != nd->outputs[0]) continue;
            const fr_value *o = &g->values[m->outputs[0]];
            if (o->rank < 3) break;
            double width = 1;
            for (int d = 1; d < o->rank - 2; d++) width *= (double)o->dims[d]; /* heads (and groups) */
            width *= (double)o->dims[o->rank - 1];                             /* head dim */
            f += 12.0 * width * (double)seq;
            break;
        }
    }
    return f;
}

static double peak_bf16_flops(const char *device)
{
    if (strstr(device, "H100") || strstr(device, "H200") || strstr(device, "H800") || strstr(device, "GH200"))
        return 989e12; /* dense BF16, SXM */
    return 0;
}

int cli_bench(int argc, char **argv)
{
    const char *model = NULL, *json = NULL, *precision = "fp32", *recipe = NULL, *device = "auto";
    int64_t batch = 0, seq = 0, warmup = 3, steps = 10;
    cli_dims dims = {0};
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *v;
        int m;
        if (cli_is_help(argv[i])) {
            cli_bench_help(stdout);
            cli_dims_free(&dims);
            return 0;
        }
#define OPT(name) ((m = cli_option(argc, argv, &i, "bench", name, &v)) != 0)
#define NUM(var, min)                                                                          \
    do {                                                                                       \
        char *end;                                                                             \
        errno = 0;                                                                             \
        long long x = strtoll(v, &end, 10);                                                    \
        if (errno || !v[0] || *end || x < (min))                                               \
            rc = cli_usage("bench", "%s: '%s' is not an integer >= %d", argv[i - 1], v, (min)); \
        else                                                                                   \
            var = x;                                                                           \
    } while (0)
        if (OPT("--batch")) { if (m < 0) rc = CLI_EXIT_USAGE; else NUM(batch, 1); }
        else if (OPT("--seq")) { if (m < 0) rc = CLI_EXIT_USAGE; else NUM(seq, 1); }
        else if (OPT("--warmup")) { if (m < 0) rc = CLI_EXIT_USAGE; else NUM(warmup, 0); }
        else if (OPT("--steps")) { if (m < 0) rc = CLI_EXIT_USAGE; else NUM(steps, 1); }
        else if (OPT("--precision")) {
            if (m < 0) rc = CLI_EXIT_USAGE;
            else if (strcmp(v, "fp32") && strcmp(v, "bf16") && strcmp(v, "fp8"))
                rc = cli_usage("bench", "--precision: '%s' is not one of fp32, bf16, fp8", v);
            else precision = v;
        } else if (OPT("--recipe")) {
            if (m < 0) rc = CLI_EXIT_USAGE;
            else if (strcmp(v, "delayed") && strcmp(v, "current") && strcmp(v, "block"))
                rc = cli_usage("bench", "--recipe: '%s' is not one of delayed, current, block", v);
            else recipe = v;
        } else if (OPT("--device")) {
            if (m < 0) rc = CLI_EXIT_USAGE;
            else if (strcmp(v, "auto") && strcmp(v, "cuda") && strcmp(v, "cpu"))
                rc = cli_usage("bench", "--device: '%s' is not one of auto, cuda, cpu", v);
            else device = v;
        } else if (OPT("--json")) { if (m < 0) rc = CLI_EXIT_USAGE; else json = v; }
        else if (OPT("--dim")) { rc = m < 0 ? CLI_EXIT_USAGE : cli_dims_add(&dims, "bench", v); }
        else if (argv[i][0] == '-' && argv[i][1]) rc = cli_usage("bench", "unknown option '%s'", argv[i]);
        else if (model) rc = cli_usage("bench", "only one MODEL may be given");
        else model = argv[i];
#undef NUM
#undef OPT
    }
    if (rc == 0 && !model) rc = cli_usage("bench", "no MODEL given");
    if (rc == 0 && (!batch || !seq)) rc = cli_usage("bench", "--batch B and --seq T are required");
    if (rc) {
        cli_dims_free(&dims);
        return rc;
    }
    fr_graph *g = NULL;
    fr_trainer *t = NULL;
    if (fr_onnx_load_file(model, &g) != FR_OK) {
        cli_dims_free(&dims);
        return cli_fail_status();
    }
    fr_train_options o;
    fr_train_options_default(&o);
    o.batch = batch;
    o.seq_len = seq;
    o.precision = precision;
    if (recipe) o.fp8.recipe = recipe;
    o.device = device;
    o.dims = dims.items;
    o.n_dims = dims.n;
    o.grad_clip = 1.0;
    o.lr.max_lr = 1e-4;
    o.max_bad_steps = (int)(warmup + steps); /* timing, not training: a skipped step still counts */
    fprintf(stderr, "bench: building %s (%s, batch %lld x seq %lld)...\n", model, precision, (long long)batch,
            (long long)seq);
    double t0 = now_s();
    if (fr_trainer_new(g, &o, &t) != FR_OK) {
        fr_graph_free(g);
        cli_dims_free(&dims);
        return cli_fail_status();
    }
    double build_s = now_s() - t0;
    int64_t vocab = fr_trainer_vocab(t);
    int64_t per = batch * (seq + 1);
    int64_t *w = malloc((size_t)per * sizeof *w);
    double *times = malloc((size_t)steps * sizeof *times);
    if (!w || !times) rc = cli_fail("out of memory");
    fr_prng r;
    fr_prng_seed(&r, 1234);
    int skipped = 0;
    double loss0 = NAN, loss1 = NAN;
    size_t peak_used = 0, dev_total = 0;
    for (int64_t s = 0; rc == 0 && s < warmup + steps; s++) {
        for (int64_t i = 0; i < per; i++) w[i] = (int64_t)fr_prng_below(&r, (uint64_t)(vocab > 0 ? vocab : 2));
        fr_train_stats st;
        double a = now_s();
        if (fr_trainer_step(t, w, 1, &st) != FR_OK) {
            rc = cli_fail("step %lld: %s", (long long)s + 1, fr_last_error());
            break;
        }
        double dt = now_s() - a;
        skipped += st.skipped;
        if (s == 0) loss0 = st.loss;
        loss1 = st.loss;
        if (s >= warmup) times[s - warmup] = dt;
        size_t used = 0;
        fr_trainer_memory(t, &used, &dev_total);
        if (used > peak_used) peak_used = used;
        fprintf(stderr, "  step %lld/%lld: %.1f ms%s\n", (long long)s + 1, (long long)(warmup + steps), dt * 1e3,
                s < warmup ? " (warmup)" : "");
    }
    if (rc == 0) {
        qsort(times, (size_t)steps, sizeof *times, cmp_double);
        double med = times[steps / 2], tokens = (double)batch * (double)seq;
        /* the model itself (the trainer has its own copy) is prepared for B x T here, so the
         * attention shapes are known */
        fr_prepare_options po;
        fr_prepare_options_default(&po);
        fr_input_shape in_shape = {fr_trainer_tokens_input(t), 2, {batch, seq}};
        po.dims = dims.items;
        po.n_dims = dims.n;
        po.input_shapes = &in_shape;
        po.n_input_shapes = 1;
        double attn = 0;
        if (fr_prepare_forward(g, &po, NULL) == FR_OK)
            attn = attention_flops_per_token(g, seq);
        else
            fr_clear_error(); /* FLOPs without attention, rather than no figures */
        int64_t n_mm = matmul_params(g);
        double flops = (6.0 * (double)n_mm + attn) * tokens;
        const char *dev = fr_trainer_device(t);
        double peak = peak_bf16_flops(dev);
        double mfu = peak > 0 ? flops / med / peak : NAN;
        size_t planned = fr_trainer_memory(t, NULL, NULL);
        int64_t np = 0;
        for (int i = 0; i < fr_trainer_param_count(t); i++) np += fr_trainer_param_numel(t, i);
        char n1[32], b1[32], b2[32];
        printf("model            %s\n", model);
        printf("device           %s\n", dev);
        printf("precision        %s%s%s\n", precision, recipe ? " / " : "", recipe ? recipe : "");
        printf("parameters       %s (%s in matrix products)\n", cli_human_count(np, n1, sizeof n1),
               cli_human_count(n_mm, b1, sizeof b1));
        printf("batch x seq      %lld x %lld (%.0f tokens per step)\n", (long long)batch, (long long)seq, tokens);
        printf("step time        %.2f ms (median of %lld; min %.2f, max %.2f)\n", med * 1e3, (long long)steps,
               times[0] * 1e3, times[steps - 1] * 1e3);
        printf("tokens/s         %.0f\n", tokens / med);
        printf("model TFLOP/s    %.1f (%.3g TFLOP per step)\n", flops / med / 1e12, flops / 1e12);
        if (peak > 0)
            printf("MFU              %.1f%% of %.0f TFLOP/s (dense BF16 peak)\n", 100 * mfu, peak / 1e12);
        else
            printf("MFU              n/a (unknown device peak)\n");
        printf("memory           %s planned", cli_human_bytes(planned, b1, sizeof b1));
        if (dev_total) printf(", %s in use on the device (peak seen) of %s", cli_human_bytes(peak_used, b2, sizeof b2),
                              cli_human_bytes(dev_total, n1, sizeof n1));
        printf("\nloss             %.4f -> %.4f (%d skipped)\nbuild            %.1f s\n", loss0, loss1, skipped, build_s);
        char *prof = fr_trainer_profile(t); /* FP8RUN_PROFILE=1 */
        if (prof) fputs(prof, stdout);
        free(prof);
        if (json) {
            char mfu_text[32] = "null";
            if (peak > 0) snprintf(mfu_text, sizeof mfu_text, "%.4f", mfu);
            FILE *f = fopen(json, "w");
            if (!f) {
                rc = cli_fail("cannot write '%s': %s", json, strerror(errno));
            } else {
                fprintf(f,
                        "{\"model\": \"%s\", \"device\": \"%s\", \"precision\": \"%s\", \"recipe\": %s%s%s, "
                        "\"batch\": %lld, \"seq\": %lld, \"parameters\": %lld, \"matmul_parameters\": %lld, "
                        "\"step_ms_median\": %.4f, \"step_ms_min\": %.4f, \"step_ms_max\": %.4f, \"steps\": %lld, "
                        "\"warmup\": %lld, \"tokens_per_s\": %.1f, \"flops_per_step\": %.6g, \"model_tflops\": %.3f, "
                        "\"mfu_bf16_peak\": %s, \"peak_bf16_tflops\": %.0f, \"memory_planned_bytes\": %zu, "
                        "\"device_memory_used_bytes\": %zu, \"device_memory_total_bytes\": %zu, \"loss_first\": %.6f, "
                        "\"loss_last\": %.6f, \"skipped\": %d}\n",
                        model, dev, precision, recipe ? "\"" : "", recipe ? recipe : "null", recipe ? "\"" : "",
                        (long long)batch, (long long)seq, (long long)np, (long long)n_mm, med * 1e3, times[0] * 1e3,
                        times[steps - 1] * 1e3, (long long)steps, (long long)warmup, tokens / med, flops,
                        flops / med / 1e12, mfu_text, peak / 1e12, planned, peak_used, dev_total,
                        loss0, loss1, skipped);
                fclose(f);
            }
        }
    }
    free(w);
    free(times);
    fr_trainer_free(t);
    fr_graph_free(g);
    cli_dims_free(&dims);
    return rc;
}
