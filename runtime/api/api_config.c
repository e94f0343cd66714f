/* Public API: the training configuration (fp8run_train_config) and its translation into the
 * trainer's options; its defaults and checks come from runtime/train/train_config.def (api_options.c). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/api/api_internal.h"
#include "graph/option_choices.h"

/* Size of the first ABI version of the struct: later versions only append fields. */
#define CONFIG_V1_SIZE offsetof(fp8run_train_config, fuse_attention)

FP8RUN_API fp8run_status fp8run_train_config_init(fp8run_train_config *cfg, size_t size)
{
    fp8run_train_config d;
    fr_api_config_defaults(&d);
    return fr_api_struct_init(__func__, "fp8run_train_config", cfg, size, CONFIG_V1_SIZE, &d, sizeof d);
}

void fr_api_options_free(api_options *o)
{
    if (!o) return;
    free(o->dims);
    o->dims = NULL;
}

fp8run_status fr_api_options(api_err *slot, const char *fn, const fp8run_train_config *cfg, api_options *out)
{
    fp8run_train_config c;
    fr_api_config_defaults(&c);
    memset(out, 0, sizeof *out);
    if (cfg) {
        fp8run_status ps = fr_api_read_in(slot, fn, "config", cfg, CONFIG_V1_SIZE, &c, sizeof c);
        if (ps != FP8RUN_OK) return ps;
    }
    fp8run_status ps = fr_api_config_check(slot, fn, &c);
    if (ps != FP8RUN_OK) return ps;
    /* the trainer keeps the library's own strings, not the caller's */
    const char *precision = fr_api_choice("precision", c.precision);
    fr_train_options *o = &out->o;
    fr_train_options_default(o);
    o->batch = c.batch;
    o->seq_len = c.seq_len;
    o->grad_accum = c.grad_accum;
    o->precision = precision;
    o->fp8.precision = precision;
    o->fp8.recipe = fr_api_choice("recipe", c.recipe);
    o->fp8.fp8_format = fr_api_choice("fp8_format", c.fp8_format);
    o->fp8.bf16_boundary = c.bf16_boundary;
    o->fp8.fp8_exclude = c.fp8_exclude;
    o->fp8.fuse = c.fuse != 0;
#define FR_OPT(...)
#define FR_OPT_PLAIN(field, ...) o->field = c.field != 0;
#include "runtime/train/train_config.def"
#undef FR_OPT
#undef FR_OPT_PLAIN
    o->recompute = fr_api_choice("recompute", c.recompute);
    o->fp8.pad_multiple = c.pad_multiple;
    o->fp8.margin = c.fp8_margin;
    o->fp8.amax_history_len = c.amax_history_len;
    o->fp8.interval = c.fp8_interval;
    fr_status st = fr_amax_algo_parse(c.amax_algo, &o->fp8.amax_algo);
    if (st != FR_OK) return fr_api_fail(slot, fn, st);
    o->tokens_input = c.tokens_input;
    o->logits_output = c.logits_output;
    o->loss_output = c.loss_output;
    o->ignore_index = c.ignore_index;
    o->train_regex = c.train_regex;
    o->freeze_regex = c.freeze_regex;

    fr_opt_config *oc = &o->opt;
    const int sgd = strcmp(c.optimizer, "sgd") == 0;
    *oc = sgd ? fr_opt_config_sgd() : fr_opt_config_adamw();
    if (!isnan(c.weight_decay)) oc->weight_decay = c.weight_decay;
    if (!sgd) {
        oc->beta1 = c.beta1;
        oc->beta2 = c.beta2;
        oc->eps = c.eps;
    } else {
        oc->momentum = c.momentum;
        oc->dampening = c.dampening;
        oc->nesterov = c.nesterov != 0;
    }
    oc->decay_1d = c.decay_1d != 0;
    /* a caller's struct without these fields leaves them NULL: the defaults */
    int sd = fr_choice_find((const char *const[]){FR_CHOICES_OPT_STATE NULL}, c.optimizer_state);
    oc->state_dtype = sd > 0 ? (fr_opt_state_dtype)sd : FR_OPT_STATE_F32;
    oc->master_bf16 = c.master_weights && strcmp(c.master_weights, "bf16") == 0;
    st = fr_lr_kind_parse(c.lr_schedule, &o->lr.kind);
    if (st != FR_OK) return fr_api_fail(slot, fn, st);
    o->lr.max_lr = c.lr;
    o->lr.min_lr = c.min_lr;
    o->lr.warmup_steps = c.warmup_steps;
    o->lr.total_steps = c.total_steps;
    st = fr_lr_schedule_check(&o->lr);
    if (st != FR_OK) return fr_api_fail(slot, fn, st);
    o->grad_clip = c.grad_clip;
    o->seed = c.seed;
    o->max_bad_steps = c.max_bad_steps;
    o->eval_only = c.eval_only != 0;
    o->world_size = c.world_size; /* checked by the trainer */
    o->rank = c.rank;
    o->local_rank = c.local_rank;
    o->nccl_comm = c.nccl_comm;
    o->shard_optimizer = c.shard_optimizer != 0 || c.shard_gradients != 0; /* ZeRO-2 includes ZeRO-1 */
    o->lora.rank = c.lora_rank;
    o->lora.alpha = c.lora_alpha;
    o->lora.targets = c.lora_targets;
    o->lora.dropout = c.lora_dropout;
    o->attention = fr_api_choice("attention", c.attention); /* NULL (an older struct): auto */
    o->sft_padded = c.packing && strcmp(c.packing, "off") == 0;
    /* auto (and NULL, an older struct): the trainer decides once it knows the device */
    o->chunked_lm_head = !c.chunked_lm_head || strcmp(c.chunked_lm_head, "auto") == 0 ? -1
                                                                                     : strcmp(c.chunked_lm_head, "on") == 0;
    o->sft_max_examples = c.sft_max_examples;

    if (c.n_dims > 0) {
        fp8run_status dps = fr_api_dims(slot, fn, c.dim_names, c.dim_values, c.n_dims, 1, &out->dims);
        if (dps != FP8RUN_OK) return dps;
        o->dims = out->dims;
        o->n_dims = c.n_dims;
    }
    return FP8RUN_OK;
}

fp8run_status fr_api_dims(api_err *slot, const char *fn, const char *const *names, const int64_t *values, int n,
                          int64_t min_value, fr_dim_binding **out)
{
    *out = NULL;
    if (n < 0 || (n > 0 && (!names || !values)))
        return fr_api_error(slot, FP8RUN_ERR_INVALID_ARG, "%s: config.n_dims is %d but dim_names or dim_values is NULL",
                            fn, n);
    if (n == 0) return FP8RUN_OK;
    fr_dim_binding *d = calloc((size_t)n, sizeof *d);
    if (!d) return fr_api_error(slot, FP8RUN_ERR_OOM, "%s: out of memory for %d dims", fn, n);
    for (int i = 0; i < n; i++) {
        if (!names[i] || !names[i][0]) {
            free(d);
            return fr_api_error(slot, FP8RUN_ERR_INVALID_ARG, "%s: config.dim_names[%d] is empty", fn, i);
        }
        if (values[i] < min_value) {
            free(d);
            return fr_api_error(slot, FP8RUN_ERR_INVALID_ARG, "%s: config.dim_values[%d] ('%s') is %lld; must be >= %lld",
                                fn, i, names[i], (long long)values[i], (long long)min_value);
        }
        d[i].name = names[i];
        d[i].value = values[i];
    }
    *out = d;
    return FP8RUN_OK;
}
