/* `fp8run generate llama`: writes a Llama-style decoder as an ONNX model, with random weights,
 * for benchmarks and tests at sizes no fixture has (the ~125M and ~1B reference configs). The
 * model itself is built by the library (fp8run_model_generate_llama, whose header comment
 * describes the graph); this file is the command line around it. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

void cli_generate_help(FILE *f)
{
    fprintf(f,
            "usage: fp8run generate llama [--preset tiny|125m|1b|8b] [options] -o OUT.onnx\n"
            "\n"
            "Write a Llama-style decoder with random weights as ONNX (opset 23): embedding, RMSNorm,\n"
            "rotary attention with grouped-query heads, SwiGLU MLP, untied LM head. Input\n"
            "input_ids int64 [batch, seq], output logits [batch, seq, vocab].\n"
            "\n"
            "presets (d / layers / heads / kv heads / ffn / vocab / max seq):\n"
            "  tiny   64 / 2 / 4 / 2 / 176 / 128 / 256\n"
            "  125m   768 / 12 / 12 / 4 / 2048 / 32768 / 2048    (~125M parameters)\n"
            "  1b     2048 / 16 / 16 / 8 / 5632 / 32768 / 2048   (~1B parameters)\n"
            "  8b     4096 / 32 / 32 / 8 / 14336 / 128256 / 8192 (Llama-3-8B's shape, 8.0B; 32 GB)\n"
            "options (override the preset):\n"
            "  --dim D --layers L --heads H --kv-heads K --ffn F --vocab V\n"
            "  --max-seq S        longest sequence the rotary tables cover (default: the preset's)\n"
            "  --seed S           weights (default 1)\n"
            "  -o, --output FILE  where to write (weights go to FILE.data above 1 GiB)\n"
            "  -h, --help         show this help\n");
}

static int parse_pos(const char *opt, const char *v, int64_t *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || !v[0] || *end || x < 1) return cli_usage("generate", "%s: '%s' is not a positive integer", opt, v);
    *out = x;
    return 0;
}

int cli_generate(int argc, char **argv)
{
    fp8run_llama_config c;
    cli_must(fp8run_llama_config_init(&c, sizeof c)); /* the tiny preset, seed 1 */
    const char *outp = NULL;
    int rc = 0, i = 1;
    if (argc < 2 || cli_is_help(argv[1])) {
        cli_generate_help(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_EXIT_USAGE : 0;
    }
    if (strcmp(argv[1], "llama") != 0) return cli_usage("generate", "unknown model family '%s' (only llama)", argv[1]);
    for (i = 2; i < argc && rc == 0; i++) {
        const char *v;
        int m;
        if (cli_is_help(argv[i])) {
            cli_generate_help(stdout);
            return 0;
        }
        if ((m = cli_option(argc, argv, &i, "generate", "--preset", &v)) != 0) {
            if (m < 0) return CLI_EXIT_USAGE;
            if (fp8run_llama_config_preset(&c, v) != FP8RUN_OK)
                rc = cli_usage("generate", "--preset: '%s' is not one of tiny, 125m, 1b, 8b", v);
            c.seed = 1; /* a preset sets every field, options given before it included */
        }
#define NUM(flag, field)                                                                      \
    else if ((m = cli_option(argc, argv, &i, "generate", flag, &v)) != 0) {                   \
        if (m < 0) return CLI_EXIT_USAGE;                                                     \
        rc = parse_pos(flag, v, &c.field);                                                    \
    }
        NUM("--dim", dim)
        NUM("--layers", layers)
        NUM("--heads", heads)
        NUM("--kv-heads", kv_heads)
        NUM("--ffn", ffn)
        NUM("--vocab", vocab)
        NUM("--max-seq", max_seq)
#undef NUM
        else if ((m = cli_option(argc, argv, &i, "generate", "--seed", &v)) != 0) {
            int64_t s;
            if (m < 0) return CLI_EXIT_USAGE;
            rc = parse_pos("--seed", v, &s);
            c.seed = (uint64_t)s;
        } else if ((m = cli_option(argc, argv, &i, "generate", "-o", &v)) != 0 ||
                   (m = cli_option(argc, argv, &i, "generate", "--output", &v)) != 0) {
            if (m < 0) return CLI_EXIT_USAGE;
            outp = v;
        } else {
            rc = cli_usage("generate", "unknown argument '%s'", argv[i]);
        }
    }
    if (rc) return rc;
    if (!outp) return cli_usage("generate", "-o OUT.onnx is required");
    if (c.dim % c.heads || c.heads % c.kv_heads || (c.dim / c.heads) % 2)
        return cli_usage("generate", "--dim %lld must split into --heads %lld of even size, and the heads into "
                                     "--kv-heads %lld groups",
                         (long long)c.dim, (long long)c.heads, (long long)c.kv_heads);
    fp8run_model *m = NULL;
    /* big models: weights in an external data file next to the model (beyond 1 GiB) */
    if (fp8run_model_generate_llama(&c, &m) != FP8RUN_OK || fp8run_model_save(m, outp) != FP8RUN_OK) {
        fp8run_model_destroy(m);
        return cli_fail_status();
    }
    int64_t np = fp8run_model_param_elements(m);
    fp8run_model_destroy(m);
    char n1[32];
    printf("wrote %s: Llama d=%lld layers=%lld heads=%lld kv_heads=%lld ffn=%lld vocab=%lld, %s parameters\n", outp,
           (long long)c.dim, (long long)c.layers, (long long)c.heads, (long long)c.kv_heads, (long long)c.ffn,
           (long long)c.vocab, cli_human_count(np, n1, sizeof n1));
    return 0;
}
