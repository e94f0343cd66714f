/* `fp8run sample`: text from a model or a checkpoint's weights, to see what fine-tuning did
 * before exporting. The model runs as an evaluation session (the GPU when one is usable) over
 * one window of prompt + new tokens; every new token runs the whole window again (no key/value
 * cache), which --help states. Byte-level models need no tokenizer (each UTF-8 byte a token,
 * EOS 0); a tokenizer.json encodes and decodes through python/fp8run/tokens.py. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli_train_args.h"

void cli_sample_help(FILE *f)
{
    fprintf(f,
            "usage: fp8run sample MODEL|CKPT (--prompt TEXT | --chat TEXT) [options]\n"
            "\n"
            "Continues --prompt, or answers --chat (a user message rendered with the chat template\n"
            "as transformers' apply_chat_template(..., add_generation_prompt=True) does; bytes:\n"
            "\"user: TEXT\\nassistant: \", the form prepare --sft gives chat data), and prints the\n"
            "text (after the prompt, for --prompt). Stops at EOS or after --max-new-tokens.\n"
            "\n"
            "Cost: there is no key/value cache. Each new token runs the model over the whole\n"
            "window of prompt + max-new-tokens positions again, so N new tokens cost N full\n"
            "forward passes of that length (about N times one evaluation batch of 1 x that length).\n"
            "Meant for a look at a model, not for serving.\n"
            "\n"
            "options:\n"
            "  --tokenizer FILE|bytes  a Hugging Face tokenizer.json (python3 with `tokenizers`;\n"
            "                          jinja2 for --chat) or bytes (default: no Python)\n"
            "  --chat-template FILE    instead of tokenizer_config.json's template\n"
            "  --max-new-tokens N      (default 64)\n"
            "  --temperature T         0 (default): greedy; > 0: sample from softmax(logits / T)\n"
            "  --top-p P               with T > 0: only the most likely tokens whose probabilities\n"
            "                          add up to P (default 1: all)\n"
            "  --seed S                the sampler's seed (default 0)\n"
            "  --model MODEL           the ONNX model a checkpoint belongs to (default: its record)\n"
            "  --init-from DIR|FILE    Hugging Face safetensors weights into the model first (a\n"
            "                          checkpoint's weights, when given, go on top)\n"
            "  --device auto|cuda|cpu  (default auto: the GPU when one is usable)\n"
            "  --dim NAME=VALUE        fix another symbolic dimension (repeatable)\n"
            "  -h, --help              show this help\n");
}

typedef struct sample_args {
    const char *model, *model_opt, *prompt, *chat, *tokenizer, *chat_template, *device, *init_from;
    int64_t max_new, seed;
    double temperature, top_p;
    cli_dims dims;
} sample_args;

/* splitmix64: the sampler's draws, reproducible from --seed */
static double uniform(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

static const float *g_probs; /* qsort's order: most likely first, then lower ids */
static int by_prob(const void *a, const void *b)
{
    int i = *(const int *)a, j = *(const int *)b;
    return g_probs[i] > g_probs[j] ? -1 : g_probs[i] < g_probs[j] ? 1 : i - j;
}

/* The next token from one row of V logits (p and order: V scratch entries each). */
static int64_t pick(const float *logits, int64_t V, const sample_args *a, float *p, int *order, uint64_t *rng)
{
    int64_t best = 0;
    for (int64_t v = 1; v < V; v++)
        if (logits[v] > logits[best]) best = v;
    if (a->temperature <= 0) return best;
    double sum = 0;
    for (int64_t v = 0; v < V; v++) sum += p[v] = (float)exp((logits[v] - logits[best]) / a->temperature);
    for (int64_t v = 0; v < V; v++) {
        p[v] = (float)(p[v] / sum);
        order[v] = (int)v;
    }
    g_probs = p;
    qsort(order, (size_t)V, sizeof *order, by_prob);
    int64_t keep = 0;
    double mass = 0;
    while (keep < V && (keep == 0 || mass < a->top_p)) mass += p[order[keep++]];
    double u = uniform(rng) * mass, c = 0;
    for (int64_t k = 0; k < keep; k++)
        if ((c += p[order[k]]) > u) return order[k];
    return order[keep - 1];
}

/* The prompt's ids (malloc'ed) and the EOS id. */
static int encode(const sample_args *a, int64_t **ids, int64_t *n, int64_t *eos)
{
    const char *text = a->chat ? a->chat : a->prompt;
    if (strcmp(a->tokenizer, "bytes") == 0) {
        size_t len = strlen(text) + (a->chat ? 20 : 0);
        char *t = malloc(len + 1);
        *ids = malloc((len + 1) * sizeof **ids);
        if (!t || !*ids) {
            free(t);
            return cli_fail("out of memory");
        }
        snprintf(t, len + 1, a->chat ? "user: %s\nassistant: " : "%s", text);
        for (*n = 0; t[*n]; (*n)++) (*ids)[*n] = (unsigned char)t[*n];
        *eos = 0;
        free(t);
        return 0;
    }
    char *args[8] = {"encode", "--tokenizer", (char *)a->tokenizer}, *out = NULL;
    int na = 3;
    if (a->chat) args[na++] = "--chat";
    if (a->chat_template) args[na++] = "--chat-template", args[na++] = (char *)a->chat_template;
    args[na++] = (char *)text;
    int rc = cli_python("tokens.py", na, args, NULL, &out);
    if (rc) return rc;
    /* "ID ID ...\neos ID\n" */
    size_t cap = strlen(out) / 2 + 2;
    *ids = malloc(cap * sizeof **ids);
    char *e = strstr(out, "eos ");
    if (!*ids || !e) {
        free(out);
        return cli_fail(*ids ? "tokens.py gave no EOS id" : "out of memory");
    }
    *e = 0;
    *eos = strtoll(e + 4, NULL, 10);
    *n = 0;
    for (char *s = out, *end; *n < (int64_t)cap; s = end) {
        long long v = strtoll(s, &end, 10);
        if (end == s) break;
        (*ids)[(*n)++] = v;
    }
    free(out);
    return 0;
}

/* Print new tokens: bytes as they are; a tokenizer's through tokens.py decode. */
static int print_tokens(const sample_args *a, const int64_t *ids, int64_t n)
{
    if (strcmp(a->tokenizer, "bytes") == 0) {
        for (int64_t i = 0; i < n; i++) putchar((int)ids[i]);
        putchar('\n');
        return 0;
    }
    char *in = malloc((size_t)n * 12 + 1), *out = NULL;
    if (!in) return cli_fail("out of memory");
    size_t k = 0;
    for (int64_t i = 0; i < n; i++) k += (size_t)sprintf(in + k, "%lld ", (long long)ids[i]);
    in[k] = 0;
    char *args[3] = {"decode", "--tokenizer", (char *)a->tokenizer};
    int rc = cli_python("tokens.py", 3, args, in, &out);
    free(in);
    if (rc == 0) printf("%s\n", out);
    free(out);
    return rc;
}

static int generate(const sample_args *a, fp8run_model *m)
{
    int64_t *prompt = NULL, n_prompt = 0, eos = 0;
    int rc = encode(a, &prompt, &n_prompt, &eos);
    if (rc) return rc;
    const int64_t S = n_prompt + a->max_new;
    fp8run_train_config c;
    cli_must(fp8run_train_config_init(&c, sizeof c));
    c.batch = 1;
    c.seq_len = S;
    c.eval_only = 1;
    c.dim_names = a->dims.names;
    c.dim_values = a->dims.values;
    c.n_dims = a->dims.n;
    fp8run_session *t = NULL;
    int64_t *w = calloc((size_t)S + 1, sizeof *w);
    if (!w) rc = cli_fail("out of memory");
    if (rc == 0 && n_prompt == 0) rc = cli_usage("sample", "the prompt is empty");
    if (rc == 0 && fp8run_session_create(m, a->device, &c, &t) != FP8RUN_OK) rc = cli_fail_status();
    const int64_t V = t ? fp8run_session_vocab(t) : 0;
    for (int64_t i = 0; rc == 0 && i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= V)
            rc = cli_fail("prompt token %lld (id %lld) is outside the model's vocabulary of %lld%s", (long long)i,
                          (long long)prompt[i], (long long)V,
                          strcmp(a->tokenizer, "bytes") == 0 ? " (bytes: this model reads ASCII only)" : "");
    float *logits = rc == 0 ? malloc((size_t)(S * V) * sizeof *logits) : NULL, *p = NULL;
    int *order = NULL;
    if (rc == 0 && (!logits || !(p = malloc((size_t)V * sizeof *p)) || !(order = malloc((size_t)V * sizeof *order))))
        rc = cli_fail("out of memory");
    if (rc == 0) memcpy(w, prompt, (size_t)n_prompt * sizeof *w);
    if (rc == 0 && !a->chat && strcmp(a->tokenizer, "bytes") == 0) {
        fwrite(a->prompt, 1, strlen(a->prompt), stdout); /* the continuation follows it as it comes */
        fflush(stdout);
    }
    uint64_t rng = (uint64_t)a->seed;
    int64_t cur = n_prompt;
    const int stream = strcmp(a->tokenizer, "bytes") == 0;
    while (rc == 0 && cur < S) {
        double loss;
        /* causal: the positions after cur - 1 (zeros) do not change its logits */
        if (fp8run_session_eval(t, w, FP8RUN_DTYPE_INT64, (size_t)S + 1, &loss) != FP8RUN_OK ||
            fp8run_session_eval_output(t, NULL, NULL, logits, (size_t)(S * V)) != FP8RUN_OK) {
            rc = cli_fail_status();
            break;
        }
        int64_t next = pick(logits + (cur - 1) * V, V, a, p, order, &rng);
        if (next == eos) break;
        w[cur++] = next;
        if (stream) {
            putchar((int)next);
            fflush(stdout);
        }
    }
    if (rc == 0 && stream) putchar('\n');
    if (rc == 0 && !stream) rc = print_tokens(a, w + n_prompt, cur - n_prompt);
    free(order);
    free(p);
    free(logits);
    free(w);
    free(prompt);
    fp8run_session_destroy(t);
    return rc;
}

int cli_sample(int argc, char **argv)
{
    sample_args a = {.tokenizer = "bytes", .device = "auto", .max_new = 64, .top_p = 1.0};
    int rc = 0;
    for (int i = 1; i < argc && rc == 0; i++) {
        const char *v;
        int m;
        char *end;
        if (cli_is_help(argv[i])) {
            cli_sample_help(stdout);
            cli_dims_free(&a.dims);
            return 0;
        }
        if ((m = cli_option(argc, argv, &i, "sample", "--prompt", &a.prompt)) ||
            (m = cli_option(argc, argv, &i, "sample", "--chat", &a.chat)) ||
            (m = cli_option(argc, argv, &i, "sample", "--tokenizer", &a.tokenizer)) ||
            (m = cli_option(argc, argv, &i, "sample", "--chat-template", &a.chat_template)) ||
            (m = cli_option(argc, argv, &i, "sample", "--model", &a.model_opt)) ||
            (m = cli_option(argc, argv, &i, "sample", "--init-from", &a.init_from)) ||
            (m = cli_option(argc, argv, &i, "sample", "--device", &a.device))) {
            if (m < 0) rc = CLI_EXIT_USAGE;
        } else if ((m = cli_option(argc, argv, &i, "sample", "--max-new-tokens", &v))) {
            rc = m < 0 ? CLI_EXIT_USAGE : cli_int64("sample", "--max-new-tokens", v, 1, &a.max_new);
        } else if ((m = cli_option(argc, argv, &i, "sample", "--seed", &v))) {
            rc = m < 0 ? CLI_EXIT_USAGE : cli_int64("sample", "--seed", v, 0, &a.seed);
        } else if ((m = cli_option(argc, argv, &i, "sample", "--temperature", &v))) {
            if (m < 0) rc = CLI_EXIT_USAGE;
            else if ((a.temperature = strtod(v, &end)), *end || !(a.temperature >= 0 && a.temperature < 1e6))
                rc = cli_usage("sample", "--temperature %s: a number >= 0", v);
        } else if ((m = cli_option(argc, argv, &i, "sample", "--top-p", &v))) {
            if (m < 0) rc = CLI_EXIT_USAGE;
            else if ((a.top_p = strtod(v, &end)), *end || !(a.top_p > 0 && a.top_p <= 1))
                rc = cli_usage("sample", "--top-p %s: a number in (0, 1]", v);
        } else if ((m = cli_option(argc, argv, &i, "sample", "--dim", &v))) {
            rc = m < 0 ? CLI_EXIT_USAGE : cli_dims_add(&a.dims, "sample", v);
        } else if (argv[i][0] == '-' && argv[i][1]) {
            rc = cli_usage("sample", "unknown option '%s'", argv[i]);
        } else if (a.model) {
            rc = cli_usage("sample", "only one MODEL|CKPT may be given (got '%s' and '%s')", a.model, argv[i]);
        } else {
            a.model = argv[i];
        }
    }
    if (rc == 0 && !a.model) rc = cli_usage("sample", "no MODEL or CKPT given");
    if (rc == 0 && !a.prompt == !a.chat) rc = cli_usage("sample", "give one of --prompt TEXT and --chat TEXT");
    if (rc == 0 && a.chat_template && strcmp(a.tokenizer, "bytes") == 0)
        rc = cli_usage("sample", "--chat-template needs a tokenizer.json (bytes chat is \"user: TEXT\\nassistant: \")");
    fp8run_model *m = NULL;
    if (rc == 0 && a.init_from && fp8run_is_checkpoint(a.model)) { /* the base first, the checkpoint on top */
        if (!a.model_opt) rc = cli_usage("sample", "--init-from with a checkpoint: give its --model MODEL");
        if (rc == 0 && fp8run_model_load(a.model_opt, &m) != FP8RUN_OK) rc = cli_fail_status();
        if (rc == 0) rc = cli_init_from(NULL, m, a.init_from, 0);
        if (rc == 0 && fp8run_model_apply_checkpoint(m, a.model, NULL) != FP8RUN_OK) rc = cli_fail_status();
    } else if (rc == 0) {
        rc = cli_load_model_or_ckpt(a.model, a.model_opt, &m);
        if (rc == 0 && a.init_from) rc = cli_init_from(NULL, m, a.init_from, 0);
    }
    if (rc == 0) rc = generate(&a, m);
    fp8run_model_destroy(m);
    cli_dims_free(&a.dims);
    return rc;
}
