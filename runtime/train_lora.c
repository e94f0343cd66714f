/* LoRA runs (passes/lora.h) seen from the trainer: the adapters written in PEFT's layout, the
 * merged model's weights W + s B A for export, and the bytes each parameter takes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "runtime/optimizer.h"
#include "runtime/safetensors.h"
#include "runtime/train_internal.h"

static const tr_orig *orig_named(const fr_trainer *t, const char *name)
{
    for (int i = 0; i < t->n_orig; i++)
        if (strcmp(t->orig[i].name, name) == 0) return &t->orig[i];
    return NULL;
}

/* The adapter pair of ad as float32 (a: r x in, b: out x r; malloc'ed). */
static fr_status adapter_values(fr_trainer *t, const fr_lora_adapter *ad, float **a, float **b)
{
    const tr_orig *oa = orig_named(t, ad->a), *ob = orig_named(t, ad->b);
    *a = *b = NULL;
    if (!oa || !ob) return fr_error(FR_ERR_INTERNAL, "lora: adapter '%s' is not a trained parameter", oa ? ad->b : ad->a);
    *a = fr_malloc((size_t)oa->numel * sizeof(float), ad->a);
    *b = fr_malloc((size_t)ob->numel * sizeof(float), ad->b);
    fr_status st = *a && *b ? FR_OK : FR_ERR_OOM;
    if (st == FR_OK) st = tr_orig_values(t, oa, *a);
    if (st == FR_OK) st = tr_orig_values(t, ob, *b);
    if (st != FR_OK) {
        free(*a);
        free(*b);
        *a = *b = NULL;
    }
    return st;
}

int tr_lora_is_adapter(const fr_trainer *t, const char *name) { return fr_lora_find(&t->lora, name) != NULL; }

/* W += s B A for adapter ad into w (float32, as pg stores it). */
static fr_status merge_one(fr_trainer *t, const fr_lora_adapter *ad, fr_tensor *w)
{
    const int64_t r = t->opt.lora.rank;
    float *a, *b, *wd = w->data;
    FR_TRY(adapter_values(t, ad, &a, &b));
    for (int64_t o = 0; o < ad->out; o++)
        for (int64_t i = 0; i < ad->in; i++) {
            double d = 0;
            for (int64_t j = 0; j < r; j++) d += (double)b[o * r + j] * a[j * ad->in + i];
            float *dst = ad->w_in_out ? &wd[i * ad->out + o] : &wd[o * ad->in + i];
            *dst = (float)(*dst + t->lora.scale * d);
        }
    free(a);
    free(b);
    return FR_OK;
}

fr_status tr_lora_merge(fr_trainer *t, fr_graph *pg, fr_tensor ***base)
{
    *base = NULL;
    if (t->lora.n == 0) return FR_OK;
    fr_tensor **keep = fr_calloc((size_t)t->lora.n, sizeof *keep, "LoRA merge");
    if (!keep) return FR_ERR_OOM;
    *base = keep;
    for (int k = 0; k < t->lora.n; k++) {
        const fr_lora_adapter *ad = &t->lora.ad[k];
        int vid = fr_graph_find_value(pg, ad->weight);
        fr_tensor *w = vid >= 0 ? pg->values[vid].constant : NULL, *m;
        if (!w || w->dtype != FR_F32 || fr_tensor_numel(w) != ad->in * ad->out)
            return fr_error(FR_ERR_INTERNAL, "export: LoRA base weight '%s' has no float32 [%lld x %lld] initializer in "
                            "the original model", ad->weight, (long long)ad->out, (long long)ad->in);
        FR_TRY(fr_tensor_clone(w, ad->weight, &m));
        keep[k] = w; /* the base, put back by tr_lora_unmerge */
        pg->values[vid].constant = m;
        FR_TRY(merge_one(t, ad, m));
    }
    return FR_OK;
}

void tr_lora_unmerge(fr_trainer *t, fr_graph *pg, fr_tensor **base)
{
    for (int k = 0; base && k < t->lora.n; k++) {
        if (!base[k]) continue;
        int vid = fr_graph_find_value(pg, t->lora.ad[k].weight);
        fr_tensor_free(pg->values[vid].constant);
        pg->values[vid].constant = base[k];
    }
    free(base);
}

/* adapter_config.json as PEFT writes it (the keys peft's LoraConfig reads). */
static fr_status write_config(const fr_trainer *t, const char *path)
{
    FILE *f = fopen(path, "w");
    if (!f) return fr_error(FR_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    fprintf(f, "{\n  \"peft_type\": \"LORA\",\n  \"task_type\": \"CAUSAL_LM\",\n  \"base_model_name_or_path\": null,\n");
    fprintf(f, "  \"r\": %d,\n  \"lora_alpha\": %.17g,\n  \"lora_dropout\": %.17g,\n  \"bias\": \"none\",\n",
            t->opt.lora.rank, t->opt.lora.alpha, t->opt.lora.dropout);
    fprintf(f, "  \"fan_in_fan_out\": false,\n  \"inference_mode\": true,\n  \"use_rslora\": false,\n");
    /* the adapted modules by full name: peft matches a list entry exactly (or as a suffix), while
       a regex string must match a whole name, which --lora-targets (searched) need not */
    fprintf(f, "  \"target_modules\": [");
    for (int k = 0; k < t->lora.n; k++) {
        fprintf(f, "%s\"", k ? ", " : "");
        for (const char *p = t->lora.ad[k].module; *p; p++)
            fprintf(f, *p == '"' || *p == '\\' ? "\\%c" : "%c", *p);
        fprintf(f, "\"");
    }
    fprintf(f, "]\n}\n");
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) return fr_error(FR_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    return FR_OK;
}

static int by_name(const void *x, const void *y)
{
    return strcmp(((const fr_st_out *)x)->name, ((const fr_st_out *)y)->name);
}

fr_status fr_trainer_export_adapter(fr_trainer *t, const char *dir)
{
    if (t->lora.n == 0) return fr_error(FR_ERR_INVALID_ARG, "export adapter: this run has no LoRA (--lora-rank)");
    FR_TRY(tr_sync_host(t));
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return fr_error(FR_ERR_IO, "cannot create folder '%s': %s", dir, strerror(errno));
    const int n = 2 * t->lora.n;
    fr_st_out *out = fr_calloc((size_t)n, sizeof *out, "adapter export");
    float **data = fr_calloc((size_t)n, sizeof *data, "adapter export");
    int64_t(*dims)[2] = fr_calloc((size_t)n, sizeof *dims, "adapter export");
    fr_status st = out && data && dims ? FR_OK : FR_ERR_OOM;
    for (int k = 0; st == FR_OK && k < t->lora.n; k++) {
        const fr_lora_adapter *ad = &t->lora.ad[k];
        st = adapter_values(t, ad, &data[2 * k], &data[2 * k + 1]);
        int64_t shape[2][2] = {{t->opt.lora.rank, ad->in}, {ad->out, t->opt.lora.rank}};
        for (int j = 0; st == FR_OK && j < 2; j++) {
            memcpy(dims[2 * k + j], shape[j], sizeof shape[j]);
            out[2 * k + j] = (fr_st_out){j ? ad->b : ad->a, FR_F32, 2, dims[2 * k + j], data[2 * k + j]};
        }
    }
    size_t len = strlen(dir) + 40;
    char *path = st == FR_OK ? fr_malloc(len, "adapter export") : NULL;
    if (st == FR_OK && !path) st = FR_ERR_OOM;
    if (st == FR_OK) {
        qsort(out, (size_t)n, sizeof *out, by_name);
        const char *meta[] = {"format", "pt"};
        snprintf(path, len, "%s/adapter_model.safetensors", dir);
        st = fr_st_write(path, out, n, meta, 1);
    }
    if (st == FR_OK) {
        snprintf(path, len, "%s/adapter_config.json", dir);
        st = write_config(t, path);
    }
    free(path);
    for (int i = 0; data && i < n; i++) free(data[i]);
    free(data);
    free(dims);
    free(out);
    return st;
}

void fr_trainer_param_bytes(const fr_trainer *t, fr_param_bytes *b)
{
    memset(b, 0, sizeof *b);
    for (int i = 0; i < t->n_params; i++) b->trained += t->params[i].numel;
    /* float32 master weight and gradient, plus the optimizer's float32 slots */
    int slots = t->optim ? fr_optimizer_state_count(t->optim) : 0;
    b->trained_bytes = b->trained * (int64_t)sizeof(float) * (t->opt.eval_only ? 1 : 2 + slots);
    /* LoRA's frozen base as the graph holds it (float32 constants, on the GPU too) */
    b->frozen = t->lora.frozen_params;
    b->frozen_bytes = t->lora.frozen_bytes;
}
