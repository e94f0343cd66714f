/* LoRA runs (passes/lora.h) seen from the trainer: the adapters written in PEFT's layout, the
 * merged model's weights W + s B A for export, and the bytes each parameter takes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "graph/env.h"
#include "passes/pattern.h"
#include "runtime/io/checkpoint.h"
#include "runtime/train/optimizer.h"
#include "runtime/io/safetensors.h"
#include "runtime/train/train_internal.h"

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

/* w += scale * b a: a [r, in], b [out, r]; w [out, in], or [in, out] when in_out. */
static void merge_into(float *w, const float *a, const float *b, int64_t in, int64_t out, int64_t r, double scale,
                       int in_out)
{
    for (int64_t o = 0; o < out; o++)
        for (int64_t i = 0; i < in; i++) {
            double d = 0;
            for (int64_t j = 0; j < r; j++) d += (double)b[o * r + j] * a[j * in + i];
            float *dst = in_out ? &w[i * out + o] : &w[o * in + i];
            *dst = (float)(*dst + scale * d);
        }
}

static fr_status merge_one(fr_trainer *t, const fr_lora_adapter *ad, fr_tensor *w)
{
    float *a, *b;
    FR_TRY(adapter_values(t, ad, &a, &b));
    merge_into(w->data, a, b, ad->in, ad->out, t->opt.lora.rank, t->lora.scale, ad->w_in_out);
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

/* adapter_config.json as PEFT writes it (the keys peft's LoraConfig reads), written and
 * fsync'ed beside its final name (af), to be put in place with the weights. */
static fr_status write_config(const fr_trainer *t, const char *path, fr_atomic_file *af)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return fr_error(FR_ERR_OOM, "out of memory for '%s'", path);
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
    if (fclose(f) != 0 || bad) {
        free(text);
        return fr_error(FR_ERR_OOM, "out of memory for '%s'", path);
    }
    /* the write rule (graph/safe_io.h): a link planted at the name is replaced, not followed */
    fr_status st = fr_atomic_open(path, af);
    if (st == FR_OK) st = fr_atomic_write(af, text, len);
    if (st == FR_OK) st = fr_atomic_finish(af);
    if (st != FR_OK) fr_atomic_abort(af);
    free(text);
    return st;
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
    /* both files are written in full before either replaces its previous version */
    fr_atomic_file weights = {NULL, NULL, -1}, config = {NULL, NULL, -1};
    if (st == FR_OK) {
        qsort(out, (size_t)n, sizeof *out, by_name);
        const char *meta[] = {"format", "pt"};
        snprintf(path, len, "%s/adapter_model.safetensors", dir);
        st = fr_st_write_pending(path, out, n, meta, 1, &weights);
    }
    if (st == FR_OK) {
        snprintf(path, len, "%s/adapter_config.json", dir);
        st = write_config(t, path, &config);
    }
    if (st == FR_OK) st = fr_atomic_commit(&weights);
    if (st == FR_OK) st = fr_atomic_commit(&config);
    fr_atomic_abort(&weights);
    fr_atomic_abort(&config);
    free(path);
    for (int i = 0; data && i < n; i++) free(data[i]);
    free(data);
    free(dims);
    free(out);
    return st;
}

/* The float32 bytes of the frozen weights the GPU holds only as the converted copies of their
 * readers (the CUDA executor's rule, runtime/cuda/cuda_exec.h): codes_only, the weight cache
 * on, and every reader a bf16/fp8 Linear or LinearGradData taking it as its weight (input 1). */
static int64_t coded_bytes(const fr_trainer *t)
{
    const fr_graph *g = t->g;
    if (!tr_lora_codes_only(t) || !tr_weight_cache(t)) return 0;
    unsigned char *ok = calloc((size_t)g->n_values + 1, 1); /* 1: read as a weight so far, 2: not */
    if (!ok) return 0; /* a report: without the memory, the float32 bytes are counted */
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        const char *prec = "fp32";
        int lin = strcmp(n->domain, "ai.fp8run") == 0 &&
                  (strcmp(n->op_type, "Linear") == 0 || strcmp(n->op_type, "LinearGradData") == 0) &&
                  fr_node_attr_string(n, "precision", "fp32", &prec) == FR_OK && strcmp(prec, "fp32") != 0;
        for (int k = 0; k < n->n_inputs; k++)
            if (n->inputs[k] >= 0) ok[n->inputs[k]] = lin && k == 1 && ok[n->inputs[k]] != 2 ? 1 : 2;
    }
    for (int i = 0; i < g->n_outputs; i++) ok[g->outputs[i]] = 2;
    int64_t bytes = 0;
    for (int v = 0; v < g->n_values; v++) {
        const fr_value *w = &g->values[v];
        if (ok[v] == 1 && w->constant && w->dtype == FR_F32 && !(w->flags & (FR_VAL_PARAM | FR_VAL_STATE)))
            bytes += (int64_t)w->constant->nbytes;
    }
    free(ok);
    return bytes;
}

void fr_trainer_param_bytes(const fr_trainer *t, fr_param_bytes *b)
{
    memset(b, 0, sizeof *b);
    for (int i = 0; i < t->n_params; i++) b->trained += t->params[i].numel;
    /* float32 master weight and gradient, plus the optimizer's slots in their stored dtype
       (--optimizer-state: fp32, bf16 or fp8 with block scales) */
    b->trained_bytes = b->trained * (int64_t)sizeof(float) * (t->opt.eval_only ? 1 : 2);
    for (int i = 0; t->optim && !t->opt.eval_only && i < t->n_params; i++)
        b->trained_bytes += (int64_t)fr_opt_state_bytes(&t->opt.opt, t->params[i].numel);
    /* LoRA's frozen base as the graph holds it (float32 constants, on the GPU too) */
    b->frozen = t->lora.frozen_params;
    b->frozen_bytes = t->lora.frozen_bytes;
    if (!t->use_cuda || !t->g) return;
    /* on the GPU, less the float32 of the frozen weights held only as codes (tr_lora_codes_only;
       they stay in host memory), plus the weight cache of each bf16/fp8 Linear and data gradient
       reading a frozen weight (ops/cuda/linear.cu: W's bf16 copy or its fp8 codes) */
    b->frozen_bytes -= coded_bytes(t);
    for (int i = 0; i < t->g->n_nodes; i++) {
        const fr_node *n = &t->g->nodes[i];
        const char *prec = "fp32";
        if (strcmp(n->domain, "ai.fp8run") != 0 || n->n_inputs < 2 || n->inputs[1] < 0 ||
            (strcmp(n->op_type, "Linear") != 0 && strcmp(n->op_type, "LinearGradData") != 0) ||
            fr_node_attr_string(n, "precision", "fp32", &prec) != FR_OK)
            continue;
        const fr_value *w = &t->g->values[n->inputs[1]];
        if (!w->constant || (w->flags & FR_VAL_PARAM)) continue;
        int64_t per = strcmp(prec, "fp8") == 0 ? 1 : strcmp(prec, "bf16") == 0 ? 2 : 0;
        b->frozen_bytes += per * fr_tensor_numel(w->constant);
    }
}

/* ---- a LoRA checkpoint applied to the model (fp8run export CKPT --model MODEL) ---- */

#define AD_PREFIX "base_model.model."

/* The module of an adapter name "base_model.model.<module>.lora_<which>.weight" into buf;
 * 0 when name is not one. */
static int adapter_module(const char *name, char which, char *buf, size_t n)
{
    char tail[] = ".lora_X.weight";
    tail[6] = which;
    size_t len = strlen(name), pl = strlen(AD_PREFIX), tl = strlen(tail);
    if (len <= pl + tl || strncmp(name, AD_PREFIX, pl) != 0 || strcmp(name + len - tl, tail) != 0 ||
        len - pl - tl >= n)
        return 0;
    memcpy(buf, name + pl, len - pl - tl);
    buf[len - pl - tl] = '\0';
    return 1;
}

int tr_lora_is_adapter_name(const char *name)
{
    return strncmp(name, AD_PREFIX, strlen(AD_PREFIX)) == 0 && strstr(name, ".lora_") != NULL;
}

/* The base weight of module in g (module.weight, else module) and whether it is stored
 * [in, out]: its readers tell when both dims are equal (Transpose or Gemm transB: [out, in]). */
static int base_of(const fr_graph *g, const char *module, int64_t in, int64_t out, int *in_out)
{
    char name[600];
    snprintf(name, sizeof name, "%s.weight", module);
    int vid = fr_graph_find_value(g, name);
    if (vid < 0) vid = fr_graph_find_value(g, module);
    const fr_value *v = vid >= 0 ? &g->values[vid] : NULL;
    if (!v || !v->constant || v->dtype != FR_F32 || v->rank != 2) return -1;
    if (in != out) {
        *in_out = v->dims[0] == in && v->dims[1] == out;
        return (*in_out || (v->dims[0] == out && v->dims[1] == in)) ? vid : -1;
    }
    if (v->dims[0] != in || v->dims[1] != in) return -1;
    *in_out = 1;
    for (int i = 0; i < g->n_nodes; i++) {
        const fr_node *n = &g->nodes[i];
        int64_t tb = 0;
        if (n->dead || n->n_inputs < 1) continue;
        if (fr_is_onnx_op(n, "Transpose") && n->inputs[0] == vid) *in_out = 0;
        if (fr_is_onnx_op(n, "Gemm") && n->n_inputs > 1 && n->inputs[1] == vid &&
            fr_node_attr_int(n, "transB", 0, &tb) == FR_OK && tb)
            *in_out = 0;
    }
    return vid;
}

/* rank and alpha from the checkpoint's recorded options */
static fr_status ckpt_lora_options(const fr_ckpt *c, int *rank, double *alpha)
{
    const void *v;
    size_t len;
    const char *key = "\"lora\": {\"rank\": ";
    char *json = NULL, *p = NULL;
    if (fr_ckpt_entry(c, "config", &v, &len) == FR_OK && (json = fr_malloc(len + 1, "checkpoint config")) != NULL) {
        memcpy(json, v, len);
        json[len] = '\0';
        p = strstr(json, key);
    }
    int ok = p && sscanf(p + strlen(key), "%d, \"alpha\": %lf", rank, alpha) == 2 && *rank > 0;
    free(json);
    if (!ok)
        return fr_error(FR_ERR_PARSE, "checkpoint '%s' holds LoRA adapters but no LoRA rank and alpha in its options",
                        fr_ckpt_path(c));
    return FR_OK;
}

fr_status tr_lora_merge_ckpt(fr_graph *g, const fr_ckpt *c, int *n_merged)
{
    *n_merged = 0;
    int rank = 0;
    double alpha = 0;
    for (int i = 0; i < fr_ckpt_tensor_count(c); i++) {
        const fr_ckpt_tensor *ta = fr_ckpt_tensor_at(c, i), *tb;
        char module[512], bname[600];
        if (strcmp(ta->kind, "param") != 0 || !adapter_module(ta->name, 'A', module, sizeof module)) continue;
        if (rank == 0) FR_TRY(ckpt_lora_options(c, &rank, &alpha));
        snprintf(bname, sizeof bname, AD_PREFIX "%s.lora_B.weight", module);
        tb = fr_ckpt_find(c, bname, "param");
        int64_t in = ta->dims[1], out = tb ? tb->dims[0] : 0;
        if (!tb || ta->rank != 2 || tb->rank != 2 || ta->dims[0] != rank || tb->dims[1] != rank ||
            ta->dtype != FR_F32 || tb->dtype != FR_F32)
            return fr_error(FR_ERR_PARSE, "checkpoint '%s': LoRA adapter '%s' has no matching float32 [out, %d] '%s'",
                            fr_ckpt_path(c), ta->name, rank, bname);
        int in_out = 0, vid = base_of(g, module, in, out, &in_out);
        if (vid < 0)
            return fr_error(FR_ERR_INVALID_ARG, "checkpoint '%s' adapts '%s', which the model has no float32 [%lld x %lld] "
                            "weight for", fr_ckpt_path(c), module, (long long)out, (long long)in);
        merge_into(g->values[vid].constant->data, ta->data, tb->data, in, out, rank, alpha / rank, in_out);
        *n_merged += 2;
    }
    return FR_OK;
}
