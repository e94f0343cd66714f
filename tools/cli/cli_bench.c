/* `fp8run bench MODEL --batch B --seq T [--grad-accum K] [--precision ...]`: times training steps
 * on random tokens and reports step time, tokens/s, model FLOP utilization and memory, as a table
 * on stdout and optionally as JSON. A step is K micro-batches of B x T tokens.
 *
 * FLOPs per step follow the usual accounting for decoder transformers (PaLM, appendix B):
 * 6 * N * tokens for the parameters' matrix products (forward 2, backward 4), N counting every
 * trained parameter that is read by a matrix product (embedding tables, read by a Gather, are
 * left out), plus 12 * layers * d_attn * seq * tokens for attention scores and values, where
 * layers * d_attn is taken from the model's Softmax nodes (each over [.., seq, seq]) and the
 * query width. MFU is achieved FLOP/s over the GPU's dense BF16 tensor peak (989 TFLOP/s on
 * H100/H200 SXM) for every precision, so the numbers compare across precisions; the FP8 peak is
 * twice that. The FLOP count is the library's (fp8run_model_train_flops).
 *
 * Steps are queued without waiting for their statistics (fp8run_session_train_step_async), as
 * `fp8run train` runs them: the step time is the GPU-bound steady state, the timed steps'
 * wall time over their number. --sync waits for every step (fp8run_session_train_step) and
 * reports the median of the single steps' times, host gaps between steps included. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"

/* bench's defaults: a short run that times steps rather than trains. */
static void bench_defaults(fp8run_train_config *o)
{
    cli_must(fp8run_train_config_init(o, sizeof *o));
    o->grad_clip = 1.0;
    o->lr = 1e-4;
}

void cli_bench_help(FILE *f)
{
    fp8run_train_config o;
    bench_defaults(&o);
    fprintf(f,
            "usage: fp8run bench MODEL --batch B --seq T [options]\n"
            "\n"
            "Time training steps of MODEL (ONNX or .fbs) on random token ids and report the step\n"
            "time, tokens/s, model FLOP utilization (vs the GPU's dense BF16 peak) and memory.\n"
            "MODEL llama:PRESET (tiny, 125m, 1b, 8b) is `generate llama --preset PRESET`'s model,\n"
            "made in memory (the 8B shape's 32 GB are neither written nor read back).\n"
            "A step is --grad-accum K micro-batches of B x T tokens (default K 1).\n"
            "\n"
            "options:\n"
            "  --device auto|cuda|cpu  (default auto)\n"
            "  --warmup N              untimed steps first (default 3; with the CUDA graph on, the\n"
            "                          second step captures it: below 2 the timed steps include that)\n"
            "  --steps N               timed steps (default 10)\n"
            "  --sync                  wait for every step's result (as an API caller doing\n"
            "                          fp8run_session_train_step); default: steps queued ahead,\n"
            "                          the time is the timed steps' wall time / N\n"
            "  --json FILE             also write the results as JSON\n"
            "  --dim NAME=VALUE        fix another symbolic dimension (repeatable)\n"
            "  -h, --help              show this help\n"
            "training options (--batch and --seq required; the fusions off to measure them):\n");
    cli_config_help(f, FP8RUN_OPTION_BENCH, &o, cli_shape_options);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* MODEL: a file, or llama:PRESET generated here with generate's weights (seed 1). */
static int load_model(const char *model, fp8run_model **out)
{
    if (strncmp(model, "llama:", 6) != 0) return fp8run_model_load(model, out) == FP8RUN_OK ? 0 : cli_fail_status();
    fp8run_llama_config c;
    cli_must(fp8run_llama_config_init(&c, sizeof c));
    if (fp8run_llama_config_preset(&c, model + 6) != FP8RUN_OK)
        return cli_usage("bench", "%s: '%s' is not one of tiny, 125m, 1b, 8b", model, model + 6);
    c.seed = 1;
    fprintf(stderr, "bench: generating %s...\n", model);
    double t0 = now_s();
    if (fp8run_model_generate_llama(&c, out) != FP8RUN_OK) return cli_fail_status();
    fprintf(stderr, "bench: generated %s in %.1f s\n", model, now_s() - t0);
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Random token ids: xoshiro256** seeded by splitmix64 (the generator the library's data loader
 * uses), so a bench run sees the same tokens every time and on every machine. */
typedef struct bench_rng {
    uint64_t s[4];
} bench_rng;

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static void rng_seed(bench_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) {
        uint64_t z = (seed += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        r->s[i] = z ^ (z >> 31);
    }
}

static uint64_t rng_next(bench_rng *r)
{
    uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* Uniform in [0, n): draws below 2^64 mod n are rejected, so no residue is favoured. */
static uint64_t rng_below(bench_rng *r, uint64_t n)
{
    uint64_t reject_below = (0 - n) % n;
    for (;;) {
        uint64_t x = rng_next(r);
        if (x >= reject_below) return x % n;
    }
}

/* s as the inside of a JSON string (quotes, backslashes and control characters escaped). */
static void json_text(const char *s, char *out, size_t n)
{
    size_t k = 0;
    for (; s && *s && k + 7 < n; s++) {
        const unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') out[k++] = '\\', out[k++] = (char)c;
        else if (c < 0x20) k += (size_t)snprintf(out + k, n - k, "\\u%04x", c);
        else out[k++] = (char)c;
    }
    out[k] = 0;
}

static double peak_bf16_flops(const char *device)
{
    if (strstr(device, "H100") || strstr(device, "H200") || strstr(device, "H800") || strstr(device, "GH200"))
        return 989e12; /* dense BF16, SXM */
    return 0;
}

static void sample_memory(const fp8run_session *t, uint64_t *peak_used, uint64_t *dev_total)
{
    fp8run_memory_info mem = {.struct_size = sizeof mem};
    if (fp8run_session_memory(t, &mem) == FP8RUN_OK) {
        *dev_total = mem.device_total_bytes;
        if (mem.device_used_bytes > *peak_used) *peak_used = mem.device_used_bytes;
    }
}

/* The statistics of the oldest queued step (waiting for it). */
static int poll_one(fp8run_session *t, int *skipped, double *loss0, double *loss1)
{
    fp8run_step_stats st = {.struct_size = sizeof st};
    /* a failed read-back's message names the step (and the steps queued after it) */
    if (fp8run_session_poll_stats(t, 1, &st) != FP8RUN_OK) return cli_fail("%s", cli_last_error());
    *skipped += st.skipped;
    if (isnan(*loss0)) *loss0 = st.loss; /* the first step's */
    *loss1 = st.loss;
    return 0;
}

int cli_bench(int argc, char **argv)
{
    const char *model = NULL, *json = NULL, *device = "auto";
    int64_t warmup = 3, steps = 10;
    cli_dims dims = {0};
    cli_given given = {{0}};
    fp8run_train_config o;
    bench_defaults(&o);
    int rc = 0, sync = 0, k;
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *v;
        int m;
        if (strcmp(argv[i], "--sync") == 0) {
            sync = 1;
            continue;
        }
        if (cli_config_option("bench", FP8RUN_OPTION_BENCH, argc, argv, &i, &o, &given, &rc)) continue;
        if (cli_is_help(argv[i])) {
            cli_bench_help(stdout);
            cli_dims_free(&dims);
            return 0;
        }
#define OPT(name) ((m = cli_option(argc, argv, &i, "bench", name, &v)) != 0)
        if (OPT("--warmup")) rc = m < 0 ? CLI_EXIT_USAGE : cli_int64("bench", "--warmup", v, 0, &warmup);
        else if (OPT("--steps")) rc = m < 0 ? CLI_EXIT_USAGE : cli_int64("bench", "--steps", v, 1, &steps);
        else if (OPT("--device")) {
            if (m < 0) rc = CLI_EXIT_USAGE;
            else if ((rc = cli_choice("bench", "--device", v, fp8run_choices("device"), &k)) == 0) device = v;
        } else if (OPT("--json")) { if (m < 0) rc = CLI_EXIT_USAGE; else json = v; }
        else if (OPT("--dim")) { rc = m < 0 ? CLI_EXIT_USAGE : cli_dims_add(&dims, "bench", v); }
        else if (argv[i][0] == '-' && argv[i][1]) rc = cli_usage("bench", "unknown option '%s'", argv[i]);
        else if (model) rc = cli_usage("bench", "only one MODEL may be given");
        else model = argv[i];
#undef OPT
    }
    if (rc == 0 && !model) rc = cli_usage("bench", "no MODEL given");
    if (rc == 0 && (!cli_config_given(&given, "batch") || !cli_config_given(&given, "seq_len")))
        rc = cli_usage("bench", "--batch B and --seq T are required");
    if (rc == 0) {
        const int generated = strncmp(model, "llama:", 6) == 0;
        cli_file in = {generated ? NULL : model, "model"}, outf = {json, "JSON report (--json)"};
        rc = cli_check_files(&in, 1, &outf, 1);
    }
    if (rc) {
        cli_dims_free(&dims);
        return rc;
    }
    fp8run_model *mdl = NULL;
    fp8run_session *t = NULL;
    if ((rc = load_model(model, &mdl)) != 0) {
        cli_dims_free(&dims);
        return rc;
    }
    const int64_t batch = o.batch, seq = o.seq_len, accum = o.grad_accum;
    const char *precision = o.precision, *recipe = cli_config_given(&given, "recipe") ? o.recipe : NULL;
    o.dim_names = dims.names;
    o.dim_values = dims.values;
    o.n_dims = dims.n;
    o.max_bad_steps = (int)(warmup + steps); /* timing, not training: a skipped step still counts */
    fprintf(stderr, "bench: building %s (%s, batch %lld x seq %lld", model, precision, (long long)batch, (long long)seq);
    if (accum > 1) fprintf(stderr, " x %lld micro-batches", (long long)accum);
    fprintf(stderr, ")...\n");
    double t0 = now_s();
    if (fp8run_session_create(mdl, device, &o, &t) != FP8RUN_OK) {
        fp8run_model_destroy(mdl);
        cli_dims_free(&dims);
        return cli_fail_status();
    }
    double build_s = now_s() - t0;
    int64_t vocab = fp8run_session_vocab(t);
    int64_t per = accum * batch * (seq + 1); /* a step's windows: every micro-batch's */
    int64_t *w = malloc((size_t)per * sizeof *w);
    double *times = malloc((size_t)steps * sizeof *times);
    if (!w || !times) rc = cli_fail("out of memory");
    bench_rng r;
    rng_seed(&r, 1234);
    int skipped = 0;
    double loss0 = NAN, loss1 = NAN;
    uint64_t peak_used = 0, dev_total = 0;
    for (int64_t s = 0; sync && rc == 0 && s < warmup + steps; s++) {
        for (int64_t i = 0; i < per; i++) w[i] = (int64_t)rng_below(&r, (uint64_t)(vocab > 0 ? vocab : 2));
        fp8run_step_stats st = {.struct_size = sizeof st};
        double a = now_s();
        if (fp8run_session_train_step(t, w, FP8RUN_DTYPE_INT64, (size_t)per, &st) != FP8RUN_OK) {
            rc = cli_fail("step %lld: %s", (long long)s + 1, cli_last_error());
            break;
        }
        double dt = now_s() - a;
        skipped += st.skipped;
        if (s == 0) loss0 = st.loss;
        loss1 = st.loss;
        if (s >= warmup) times[s - warmup] = dt;
        sample_memory(t, &peak_used, &dev_total);
        fprintf(stderr, "  step %lld/%lld: %.1f ms%s\n", (long long)s + 1, (long long)(warmup + steps), dt * 1e3,
                s < warmup ? " (warmup)" : "");
    }
    /* queued: the warmup steps read back, then the timed ones queued back to back and read back
       at the end (or when the queue is full) */
    double timed_s = 0;
    for (int phase = 0; !sync && rc == 0 && phase < 2; phase++) {
        const int64_t n = phase ? steps : warmup, first = phase ? warmup : 0;
        double a = now_s();
        for (int64_t s = 0; rc == 0 && s < n; s++) {
            for (int64_t i = 0; i < per; i++) w[i] = (int64_t)rng_below(&r, (uint64_t)(vocab > 0 ? vocab : 2));
            if (fp8run_session_steps_queued(t) >= FP8RUN_MAX_QUEUED_STEPS)
                rc = poll_one(t, &skipped, &loss0, &loss1);
            if (rc == 0 && fp8run_session_train_step_async(t, w, FP8RUN_DTYPE_INT64, (size_t)per, NULL) != FP8RUN_OK)
                rc = cli_fail("step %lld: %s", (long long)(first + s + 1), cli_last_error());
        }
        while (rc == 0 && fp8run_session_steps_queued(t) > 0) rc = poll_one(t, &skipped, &loss0, &loss1);
        double dt = now_s() - a;
        if (phase) timed_s = dt;
        sample_memory(t, &peak_used, &dev_total);
        if (rc == 0)
            fprintf(stderr, "  %s: %lld steps queued, %.1f ms per step\n", phase ? "timed" : "warmup", (long long)n,
                    n ? dt * 1e3 / (double)n : 0.0);
    }
    for (int64_t s = 0; !sync && rc == 0 && s < steps; s++) times[s] = timed_s / (double)steps;
    if (rc == 0) {
        qsort(times, (size_t)steps, sizeof *times, cmp_double);
        double med = times[steps / 2], tokens = (double)accum * (double)batch * (double)seq;
        /* the model as loaded, prepared for B x T so the attention shapes are known (FLOPs
         * without attention, rather than no figures, when that fails) */
        fp8run_flops_info fl = {.struct_size = sizeof fl};
        int64_t n_mm = 0;
        double flops = 0;
        if (fp8run_model_train_flops(mdl, &o, &fl) == FP8RUN_OK) {
            n_mm = fl.matmul_params;
            flops = fl.flops_per_token * tokens;
        }
        const char *dev = fp8run_session_device(t);
        double peak = peak_bf16_flops(dev);
        double mfu = peak > 0 ? flops / med / peak : NAN;
        fp8run_memory_info mem = {.struct_size = sizeof mem};
        if (fp8run_session_memory(t, &mem) != FP8RUN_OK) /* not expected of a live session: say so */
            fprintf(stderr, "fp8run: warning: no memory figures: %s\n", cli_last_error());
        size_t planned = (size_t)mem.planned_bytes;
        int64_t np = 0;
        for (int i = 0; i < fp8run_session_param_count(t); i++) {
            fp8run_value_info pi = {.struct_size = sizeof pi};
            if (fp8run_session_param(t, i, &pi) == FP8RUN_OK) np += pi.numel;
        }
        char n1[32], b1[32], b2[32];
        printf("model            %s\n", model);
        printf("device           %s\n", dev);
        printf("precision        %s%s%s\n", precision, recipe ? " / " : "", recipe ? recipe : "");
        const char *attn = fp8run_session_attention(t);
        printf("attention        %s\n", attn);
        const char *gemm = fp8run_session_gemm(t);
        printf("gemm             %s\n", gemm);
        if (warmup < 2 && strstr(gemm, "CUDA graph:"))
            fprintf(stderr, "bench: --warmup %lld: the timed steps include the CUDA graph's capture (the second step); "
                            "--warmup 2 or more leaves it out\n", (long long)warmup);
        printf("parameters       %s (%s in matrix products)\n", cli_human_count(np, n1, sizeof n1),
               cli_human_count(n_mm, b1, sizeof b1));
        if (accum > 1)
            printf("batch x seq      %lld x %lld x %lld micro-batches (%.0f tokens per step)\n", (long long)batch,
                   (long long)seq, (long long)accum, tokens);
        else
            printf("batch x seq      %lld x %lld (%.0f tokens per step)\n", (long long)batch, (long long)seq, tokens);
        if (sync)
            printf("step time        %.2f ms (median of %lld, each waited for; min %.2f, max %.2f)\n", med * 1e3,
                   (long long)steps, times[0] * 1e3, times[steps - 1] * 1e3);
        else
            printf("step time        %.2f ms (%lld steps queued back to back: wall time / %lld)\n", med * 1e3,
                   (long long)steps, (long long)steps);
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
        fp8run_param_bytes pb = {.struct_size = sizeof pb};
        if (fp8run_session_param_bytes(t, &pb) == FP8RUN_OK && pb.trained > 0 && pb.frozen > 0) /* LoRA */
            printf("bytes/parameter  %.1f per trained (%s), %.1f per frozen (%s)\n",
                   (double)pb.trained_bytes / (double)pb.trained, cli_human_count(pb.trained, b1, sizeof b1),
                   (double)pb.frozen_bytes / (double)pb.frozen, cli_human_count(pb.frozen, b2, sizeof b2));
        const char *prof = fp8run_session_profile(t); /* FP8RUN_PROFILE=1 */
        if (prof) {
            fputs(prof, stdout); /* ends with the nodes off the fast path, on the measured times */
        } else {
            const char *slow = fp8run_session_slow_path(t); /* the same on each node's ceiling */
            if (slow) fputs(slow, stdout);
        }
        if (json) {
            char mfu_text[32] = "null";
            if (peak > 0) snprintf(mfu_text, sizeof mfu_text, "%.4f", mfu);
            /* written in memory, then under the write rule (a temporary renamed into place) */
            char *jtext = NULL;
            size_t jlen = 0;
            FILE *f = open_memstream(&jtext, &jlen);
            if (!f) {
                rc = cli_fail("out of memory");
            } else {
                char attn_json[1100], gemm_json[1100];
                json_text(attn, attn_json, sizeof attn_json);
                json_text(gemm, gemm_json, sizeof gemm_json);
                fprintf(f,
                        "{\"model\": \"%s\", \"commit\": \"%s\", \"device\": \"%s\", \"precision\": \"%s\", \"recipe\": %s%s%s, "
                        "\"batch\": %lld, \"seq\": %lld, \"grad_accum\": %lld, \"parameters\": %lld, \"matmul_parameters\": %lld, "
                        "\"step_ms_median\": %.4f, \"step_ms_min\": %.4f, \"step_ms_max\": %.4f, \"steps\": %lld, "
                        "\"warmup\": %lld, \"tokens_per_s\": %.1f, \"flops_per_step\": %.6g, \"model_tflops\": %.3f, "
                        "\"mfu_bf16_peak\": %s, \"peak_bf16_tflops\": %.0f, \"memory_planned_bytes\": %zu, "
                        "\"device_memory_used_bytes\": %zu, \"device_memory_total_bytes\": %zu, \"loss_first\": %.6f, "
                        "\"loss_last\": %.6f, \"skipped\": %d, \"steps_waited_for\": %s, \"attention\": \"%s\", "
                        "\"gemm\": \"%s\", \"fp8_fast_accum\": %d}\n",
                        model, cli_commit(), dev, precision, recipe ? "\"" : "", recipe ? recipe : "null", recipe ? "\"" : "",
                        (long long)batch, (long long)seq, (long long)accum, (long long)np, (long long)n_mm, med * 1e3, times[0] * 1e3,
                        times[steps - 1] * 1e3, (long long)steps, (long long)warmup, tokens / med, flops,
                        flops / med / 1e12, mfu_text, peak / 1e12, planned, (size_t)peak_used, (size_t)dev_total,
                        loss0, loss1, skipped, sync ? "true" : "false", attn_json, gemm_json, o.fp8_fast_accum);
                if (fclose(f) != 0) { /* the buffer is jtext only from here */
                    rc = cli_fail("out of memory");
                } else {
                    const void *parts[1] = {jtext};
                    if (fp8run_file_write(json, parts, &jlen, 1) != FP8RUN_OK) rc = cli_fail_status();
                }
                free(jtext);
            }
        }
    }
    free(w);
    free(times);
    fp8run_session_destroy(t);
    fp8run_model_destroy(mdl);
    cli_dims_free(&dims);
    return rc;
}
