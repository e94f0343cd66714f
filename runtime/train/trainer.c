/* The trainer's options, life cycle, accessors and compiled graph files (see trainer.h); the
 * steps are in train_step.c, the graph building in train_build.c, checkpoints in train_ckpt.c,
 * export in train_export.c, --log-fp8 records in train_fp8_stats.c, the options as JSON in
 * train_config_json.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/io/fbs.h"
#include "graph/option_choices.h"
#include "runtime/cuda/cuda_probe.h"
#include "runtime/train/train_backend.h"
#include "runtime/train/train_internal.h"

void fr_train_options_default(fr_train_options *o)
{
    memset(o, 0, sizeof *o);
    o->batch = 1;
    o->seq_len = 1;
    o->ignore_index = -100;
    o->precision = "fp32";
    fr_fp8_options_default(&o->fp8);
    o->opt = fr_opt_config_adamw();
    o->lr.kind = FR_LR_CONSTANT;
    o->lr.max_lr = 1e-3;
    o->grad_clip = 0;
    o->grad_accum = 1;
    o->seed = 0;
    o->max_bad_steps = 10;
    o->retie = 1;
    o->unshare = 1;
    o->device = "cpu";
    o->recompute = "none";
#define FR_OPT(...)
#define FR_OPT_PLAIN(field, TYPE, def, ...) o->field = (def);
#include "runtime/train/train_config.def"
#undef FR_OPT
#undef FR_OPT_PLAIN
}

/* ---- options ---- */

/* "auto" is CUDA when the backend is built and a device answers; "cuda" without one is an
 * error (never a silent fallback). */
static fr_status resolve_device(fr_trainer *t, const char *device)
{
    static const char *const devices[] = {FR_CHOICES_DEVICE NULL};
    int n = 0;
    if (fr_choice_find(devices, device) < 0)
        return fr_error(FR_ERR_INVALID_ARG, "device '%s': use cpu, cuda or auto", device);
    if (strcmp(device, "cpu") == 0) return FR_OK;
    fr_status st = fr_cuda_device_count(&n);
    if (st == FR_OK && n > 0) {
        t->use_cuda = 1;
        return FR_OK;
    }
    if (strcmp(device, "auto") == 0) {
        fr_clear_error();
        return FR_OK;
    }
    return st != FR_OK ? st : fr_error(FR_ERR_DEVICE, "device cuda: no CUDA device is present");
}

static fr_status copy_str(const char *src, char **dst, const char **field)
{
    *dst = NULL;
    if (!src) {
        *field = NULL;
        return FR_OK;
    }
    *dst = fr_strdup(src, "trainer options");
    if (!*dst) return FR_ERR_OOM;
    *field = *dst;
    return FR_OK;
}

static fr_status copy_options(fr_trainer *t, const fr_train_options *o)
{
    t->opt = *o;
    fr_train_options *c = &t->opt;
    if (o->eval_only) c->grad_clip = 0; /* nothing to clip: keep the config consistent */
    if (o->batch < 1 || o->seq_len < 1)
        return fr_error(FR_ERR_INVALID_ARG, "batch (%lld) and sequence length (%lld) must be >= 1",
                        (long long)o->batch, (long long)o->seq_len);
    if (o->grad_accum < 1)
        return fr_error(FR_ERR_INVALID_ARG, "gradient accumulation must be >= 1 micro-batch, got %d", o->grad_accum);
    if (o->max_bad_steps < 0)
        return fr_error(FR_ERR_INVALID_ARG, "max bad steps must be >= 0, got %d", o->max_bad_steps);
    if (!(o->grad_clip <= 0 || isfinite(o->grad_clip)))
        return fr_error(FR_ERR_INVALID_ARG, "gradient clipping norm must be finite");
    const char *prec = o->precision ? o->precision : "fp32";
    if (strcmp(prec, "fp32") != 0 && strcmp(prec, "bf16") != 0 && strcmp(prec, "fp8") != 0)
        return fr_error(FR_ERR_INVALID_ARG, "precision '%s': use fp32, bf16 or fp8", prec);
    FR_TRY(fr_lr_schedule_check(&o->lr));
    FR_TRY(copy_str(o->tokens_input, &t->s_tokens, &c->tokens_input));
    FR_TRY(copy_str(o->logits_output, &t->s_logits, &c->logits_output));
    FR_TRY(copy_str(o->loss_output, &t->s_loss, &c->loss_output));
    FR_TRY(copy_str(o->train_regex, &t->s_train, &c->train_regex));
    FR_TRY(copy_str(o->freeze_regex, &t->s_freeze, &c->freeze_regex));
    FR_TRY(copy_str(prec, &t->s_precision, &c->precision));
    FR_TRY(resolve_device(t, o->device ? o->device : "cpu"));
    if (c->chunked_lm_head < 0) c->chunked_lm_head = t->use_cuda; /* auto: same loss, less memory on a GPU */
    if (o->world_size <= 0) c->rank = c->local_rank = 0; /* alone: rank 0 writes checkpoints */
    if (o->shard_gradients) c->shard_optimizer = 1;     /* ZeRO-2 includes ZeRO-1 */
    if (o->world_size > 0 && (!t->use_cuda || o->rank < 0 || o->rank >= o->world_size || o->local_rank < 0))
        return fr_error(FR_ERR_INVALID_ARG, "data-parallel training (rank %d of %d, local rank %d) %s", o->rank,
                        o->world_size, o->local_rank, t->use_cuda ? "is inconsistent" : "needs the CUDA backend");
    if (o->world_size > 0 && o->shard_optimizer && (o->opt.state_dtype != FR_OPT_STATE_F32 || o->opt.master_bf16))
        return fr_error(FR_ERR_UNSUPPORTED, "--shard-optimizer keeps fp32 optimizer state and master weights only: "
                                            "drop --optimizer-state / --master-weights, or the sharding");
    if (o->shard_parameters && !o->plan_only)
        return fr_error(FR_ERR_UNSUPPORTED, "--shard-parameters: its plan, memory prediction (fp8run info --memory "
                        "--gpus N --shard-parameters) and checkpoint layout exist, but training with it needs a "
                        "multi-GPU run that has not been made; --shard-gradients (ZeRO-2) trains sharded today");
    FR_TRY(copy_str(o->fp8.recipe, &t->s_recipe, &c->fp8.recipe));
    FR_TRY(copy_str(o->fp8.fp8_format, &t->s_format, &c->fp8.fp8_format));
    FR_TRY(copy_str(o->fp8.fp8_exclude, &t->s_exclude, &c->fp8.fp8_exclude));
    FR_TRY(copy_str(o->lora.targets, &t->s_lora, &c->lora.targets));
    c->fp8.precision = c->precision;
    c->dims = NULL;
    if (o->n_dims > 0) {
        t->dims = fr_calloc((size_t)o->n_dims, sizeof *t->dims, "trainer options");
        if (!t->dims) return FR_ERR_OOM;
        for (int i = 0; i < o->n_dims; i++) {
            t->dims[i].value = o->dims[i].value;
            t->dims[i].name = fr_strdup(o->dims[i].name ? o->dims[i].name : "", "trainer options");
            if (!t->dims[i].name) return FR_ERR_OOM;
        }
        c->dims = t->dims;
    }
    return FR_OK;
}

/* ---- the backend ---- */

fr_status tr_backend_use(fr_trainer *t, const fr_train_backend_ops *be)
{
    if (t->q_len)
        return fr_error(FR_ERR_INVALID_ARG, "changing the trainer's backend: %d queued steps were not polled", t->q_len);
    if (t->be) {
        FR_TRY(t->be->pull(t));
        t->be->free(t->be_state);
    }
    t->be_state = NULL;
    t->be = be;
    if (!be) return fr_error(FR_ERR_DEVICE, "fp8run was built without the CUDA backend");
    return be->init(t, &t->be_state);
}

char *fr_trainer_profile(const fr_trainer *t)
{
    char *s = NULL;
    if (t && t->be->profile(t, &s) != FR_OK) s = NULL;
    return s;
}

size_t fr_trainer_memory(const fr_trainer *t, size_t *device_used, size_t *device_total)
{
    size_t u = 0, tot = 0, b = t->be->memory(t, &u, &tot);
    if (device_used) *device_used = u;
    if (device_total) *device_total = tot;
    return b;
}

const char *fr_trainer_device(const fr_trainer *t) { return t ? t->be->device_name(t) : "CPU"; }

void fr_trainer_attention(const fr_trainer *t, char *buf, size_t n)
{
    if (t) t->be->attention(t, buf, n);
    else snprintf(buf, n, "no trainer");
}

void fr_trainer_gemm(const fr_trainer *t, char *buf, size_t n)
{
    if (t) t->be->gemm(t, buf, n);
    else snprintf(buf, n, "no trainer");
}

/* ---- life cycle ---- */

fr_status fr_trainer_new(const fr_graph *model, const fr_train_options *opt, fr_trainer **out)
{
    *out = NULL;
    if (!model || !opt) return fr_error(FR_ERR_INVALID_ARG, "fr_trainer_new: no model or options");
    fr_trainer *t = fr_calloc(1, sizeof *t, "trainer");
    if (!t) return FR_ERR_OOM;
    fr_status st = copy_options(t, opt);
    if (st == FR_OK) st = tr_build(t, model);
    /* a plan-only trainer runs nothing: it plans for its device on an executor-less CPU backend */
    if (st == FR_OK) st = tr_backend_use(t, t->use_cuda && !t->opt.plan_only ? tr_backend_cuda() : &tr_backend_cpu);
    if (st != FR_OK) {
        if (model->source_path) st = fr_error_context(st, "while building the trainer for '%s'", model->source_path);
        fr_trainer_free(t);
        return st;
    }
    *out = t;
    return FR_OK;
}

static void free_inputs(tr_input *ins, int n)
{
    for (int i = 0; ins && i < n; i++) {
        free(ins[i].name);
        fr_tensor_free(ins[i].t);
    }
    free(ins);
}

void fr_trainer_free(fr_trainer *t)
{
    if (!t) return;
    if (t->be) t->be->free(t->be_state);
    fr_optimizer_free(t->optim);
    free(t->queue);
    for (int i = 0; i < t->n_params; i++) free(t->params[i].acc);
    free(t->params);
    free(t->orig);
    free(t->ties);
    for (int i = 0; i < t->n_states; i++) fr_fp8_scaling_free(&t->states[i].sc);
    free(t->states);
    free(t->watch);
    for (int i = 0; i < t->n_init_states; i++) fr_fp8_scaling_free(&t->init_states[i]);
    free(t->init_states);
    if (t->has_report) fr_fp8_report_free(&t->report);
    free_inputs(t->inputs, t->n_inputs);
    free_inputs(t->eval_inputs, t->n_eval_inputs);
    for (int i = 0; i < t->n_model_outputs; i++) free(t->model_outputs[i]);
    free(t->model_outputs);
    free(t->loss_name);
    free(t->logits_name);
    fr_graph_free(t->eval_g); /* borrows g's constants: free it first */
    fr_graph_free(t->g); /* borrows the pristine copy's constants: before it */
    fr_graph_free(t->pristine);
    free(t->sft_labels);
    free(t->sft_pos);
    free(t->s_tokens);
    free(t->s_logits);
    free(t->s_loss);
    free(t->s_train);
    free(t->s_freeze);
    free(t->s_precision);
    free(t->s_recipe);
    free(t->s_format);
    free(t->s_exclude);
    free(t->s_lora);
    free(t->s_lora_exclude);
    fr_lora_result_free(&t->lora);
    for (int i = 0; t->dims && i < t->opt.n_dims; i++) free((char *)t->dims[i].name);
    free(t->dims);
    free(t->model_path);
    free(t);
}

/* ---- accessors ---- */

int64_t fr_trainer_steps_done(const fr_trainer *t) { return t->step; }
int64_t fr_trainer_skipped_total(const fr_trainer *t) { return t->skipped_total; }
int64_t fr_trainer_vocab(const fr_trainer *t) { return t->vocab; }
int64_t fr_trainer_batch(const fr_trainer *t) { return t->opt.batch; }
int64_t fr_trainer_seq_len(const fr_trainer *t) { return t->opt.seq_len; }
int fr_trainer_grad_accum(const fr_trainer *t) { return t->opt.grad_accum; }
const fr_fp8_report *fr_trainer_fp8_report(const fr_trainer *t) { return t->has_report ? &t->report : NULL; }
fr_optimizer *fr_trainer_optimizer(fr_trainer *t) { return t->optim; }
int fr_trainer_param_count(const fr_trainer *t) { return t->n_orig; }

const char *fr_trainer_tokens_input(const fr_trainer *t)
{
    for (int i = 0; i < t->n_inputs; i++)
        if (t->inputs[i].feed == TR_FEED_TOKENS) return t->inputs[i].name;
    return NULL;
}

const char *fr_trainer_param_name(const fr_trainer *t, int i)
{
    return i >= 0 && i < t->n_orig ? t->orig[i].name : NULL;
}

int64_t fr_trainer_param_numel(const fr_trainer *t, int i)
{
    return i >= 0 && i < t->n_orig ? t->orig[i].numel : 0;
}

fr_status fr_trainer_set_param(fr_trainer *t, const char *name, const float *src)
{
    FR_TRY(tr_sync_host(t));
    for (int i = 0; name && i < t->n_orig; i++) {
        const tr_orig *o = &t->orig[i];
        if (strcmp(o->name, name) != 0) continue;
        float *dst = t->g->values[t->params[o->param].value].constant->data;
        if (o->fused) {
            /* into its slice of the fused parameter; the original initializer follows (export) */
            tr_slice_copy(o->fused, o->slice, dst, (float *)src, 0);
            FR_TRY(fr_fp8_sync_params(t->g, &t->report, 1));
        } else {
            memcpy(dst, src, (size_t)o->numel * sizeof(float));
        }
        return tr_sync_device(t);
    }
    return fr_error(FR_ERR_INVALID_ARG, "'%s' is not a parameter this trainer trains", name ? name : "(null)");
}

fr_status fr_trainer_get_param(fr_trainer *t, const char *name, float *dst)
{
    FR_TRY(tr_sync_host(t));
    for (int i = 0; name && i < t->n_orig; i++)
        if (strcmp(t->orig[i].name, name) == 0) return tr_orig_values(t, &t->orig[i], dst);
    return fr_error(FR_ERR_INVALID_ARG, "'%s' is not a parameter this trainer trains", name ? name : "(null)");
}

/* ---- compiled graph files ---- */

/* A trainer holding just the compiled forward graph of `model` (tr_build_forward): what
 * fr_trainer_new builds before the loss head. *tok: the tokens input. */
static fr_status compile_forward(const fr_graph *model, const fr_train_options *opt, fr_trainer **out, int *tok)
{
    *out = NULL;
    if (!model || !opt) return fr_error(FR_ERR_INVALID_ARG, "compile: no model or options");
    const char *name = model->source_path ? model->source_path : "the model";
    if (fr_fbs_is_compiled(model))
        return fr_error(FR_ERR_INVALID_ARG, "'%s' is already a compiled graph: compile the original model", name);
    const char *prec = opt->precision ? opt->precision : "fp32";
    if (strcmp(prec, "fp8") != 0 && strcmp(prec, "bf16") != 0)
        return fr_error(FR_ERR_INVALID_ARG, "compile: precision '%s': a compiled graph is bf16 or fp8 (fp32 trains "
                        "the ONNX model as it is)", prec);
    fr_trainer *t = fr_calloc(1, sizeof *t, "trainer");
    if (!t) return FR_ERR_OOM;
    int loss, logits;
    fr_status st = copy_options(t, opt);
    if (st == FR_OK) st = tr_build_forward(t, model, tok, &loss, &logits);
    if (st != FR_OK) {
        if (!strstr(fr_last_error(), name)) st = fr_error_context(st, "compiling '%s'", name);
        fr_trainer_free(t);
        return st;
    }
    *out = t;
    return FR_OK;
}

fr_status fr_train_compile_graph(const fr_graph *model, const fr_train_options *opt, fr_graph **compiled,
                                 fr_fp8_report *report)
{
    return fr_train_compile_graph_passes(model, opt, compiled, report, NULL);
}

fr_status fr_train_compile_graph_passes(const fr_graph *model, const fr_train_options *opt, fr_graph **compiled,
                                        fr_fp8_report *report, fr_pipeline_report *passes)
{
    fr_trainer *t;
    int tok;
    *compiled = NULL;
    memset(report, 0, sizeof *report);
    FR_TRY(compile_forward(model, opt, &t, &tok));
    /* the compiled graph outlives the trainer and its pristine copy, whose storage it borrows */
    fr_status st = fr_graph_take_constants(t->g, t->pristine);
    if (st != FR_OK) {
        fr_trainer_free(t);
        return st;
    }
    *compiled = t->g;
    *report = t->report;
    if (passes) *passes = t->passes;
    t->g = NULL;
    t->has_report = 0;
    fr_trainer_free(t);
    return FR_OK;
}

fr_status fr_train_compile(const fr_graph *model, const fr_train_options *opt, const char *path)
{
    fr_trainer *t;
    int tok;
    if (opt->lora.rank > 0) /* the file would not record which parameters are adapters */
        return fr_error(FR_ERR_UNSUPPORTED, "LoRA is not compiled into graph files: train the ONNX model with "
                        "--lora-rank");
    FR_TRY(compile_forward(model, opt, &t, &tok));
    fr_fbs_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.batch = t->opt.batch;
    spec.seq = t->opt.seq_len;
    spec.tokens_input = t->g->values[tok].name;
    spec.logits_output = t->opt.logits_output;
    spec.loss_output = t->opt.loss_output;
    spec.train_regex = t->opt.train_regex;
    spec.freeze_regex = t->opt.freeze_regex;
    spec.dims = t->dims;
    spec.n_dims = t->opt.n_dims;
    spec.fp8 = t->opt.fp8;
    spec.ties = t->ties;
    spec.n_ties = t->n_ties;
    /* the pristine model (parameters the exporter merged made separate again) is what export
       and checkpoints of a run see */
    fr_status st = fr_fbs_save(t->g, &t->report, t->pristine, &spec, NULL, path);
    fr_trainer_free(t);
    return st;
}
