/* Public API: generated models (runtime/train/llama_gen.h): the Llama configuration with its
 * presets, and the model built from it. */
#include <string.h>

#include "runtime/api/api_internal.h"
#include "runtime/train/llama_gen.h"

#define LLAMA_V1_SIZE sizeof(fp8run_llama_config)

static const struct {
    const char *name;
    int64_t dim, layers, heads, kv_heads, ffn, vocab, max_seq;
} k_presets[] = {
    {"tiny", 64, 2, 4, 2, 176, 128, 256},
    {"125m", 768, 12, 12, 4, 2048, 32768, 2048},
    {"1b", 2048, 16, 16, 8, 5632, 32768, 2048},
    {"8b", 4096, 32, 32, 8, 14336, 128256, 8192}, /* Llama-3-8B's shape: LoRA on a large FP8 base */
};
#define N_PRESETS (int)(sizeof k_presets / sizeof k_presets[0])

static void apply(fp8run_llama_config *c, int p)
{
    c->dim = k_presets[p].dim;
    c->layers = k_presets[p].layers;
    c->heads = k_presets[p].heads;
    c->kv_heads = k_presets[p].kv_heads;
    c->ffn = k_presets[p].ffn;
    c->vocab = k_presets[p].vocab;
    c->max_seq = k_presets[p].max_seq;
}

FP8RUN_API fp8run_status fp8run_llama_config_init(fp8run_llama_config *cfg, size_t size)
{
    fp8run_llama_config d;
    memset(&d, 0, sizeof d);
    apply(&d, 0);
    d.seed = 1;
    return fr_api_struct_init(__func__, "fp8run_llama_config", cfg, size, LLAMA_V1_SIZE, &d, sizeof d);
}

FP8RUN_API fp8run_status fp8run_llama_config_preset(fp8run_llama_config *cfg, const char *preset)
{
    const char *fn = __func__;
    size_t use;
    fp8run_status ps = fr_api_check_out(NULL, fn, "cfg", cfg, LLAMA_V1_SIZE, sizeof *cfg, &use);
    if (ps != FP8RUN_OK) return ps;
    for (int p = 0; preset && p < N_PRESETS; p++)
        if (strcmp(preset, k_presets[p].name) == 0) {
            fp8run_llama_config c;
            memcpy(&c, cfg, use);
            apply(&c, p);
            memcpy(cfg, &c, use);
            return FP8RUN_OK;
        }
    return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: preset %s%s%s is not one of tiny, 125m, 1b, 8b", fn,
                        preset ? "'" : "", preset ? preset : "NULL", preset ? "'" : "");
}

FP8RUN_API fp8run_status fp8run_model_generate_llama(const fp8run_llama_config *cfg, fp8run_model **out)
{
    const char *fn = __func__;
    if (!out) return fr_api_error(NULL, FP8RUN_ERR_INVALID_ARG, "%s: out is NULL", fn);
    *out = NULL;
    fp8run_llama_config c;
    memset(&c, 0, sizeof c);
    fp8run_status ps = fr_api_read_in(NULL, fn, "config", cfg, LLAMA_V1_SIZE, &c, sizeof c);
    if (ps != FP8RUN_OK) return ps;
    fr_llama_config lc = {c.dim, c.layers, c.heads, c.kv_heads, c.ffn, c.vocab, c.max_seq, c.seed};
    fr_graph *g = NULL;
    fr_status st = fr_llama_generate(&lc, &g);
    if (st != FR_OK) return fr_api_fail(NULL, fn, st);
    return fr_api_model_wrap(g, out);
}
