/* The training pipeline's list and its runner (see pipeline.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "graph/env.h"
#include "passes/attention_fuse.h"
#include "passes/attention_io.h"
#include "passes/attention_mask.h"
#include "passes/dropout.h"
#include "passes/fp8_producers.h"
#include "passes/gelu_fuse.h"
#include "passes/softcap_fuse.h"
#include "passes/gather_slice.h"
#include "passes/slice_hoist.h"
#include "passes/qkv_split_regroup.h"
#include "passes/lm_head_fuse.h"
#include "passes/narrow_activations.h"
#include "passes/narrow_gradients.h"
#include "passes/rmsnorm_fuse.h"
#include "passes/pipeline.h"
#include "passes/recompute.h"
#include "passes/residual_norm_fuse.h"
#include "passes/rotary_fuse.h"
#include "passes/select_params.h"
#include "passes/swiglu_fuse.h"
#include "passes/unfused_check.h"
#include "passes/unshare.h"
#include "passes/wgrad_operand.h"

/* ---- the passes' adapters: read the context, run the pass, say what it did ---- */

static fr_status run_unshare(fr_pass_ctx *c, fr_pass_result *r)
{
    FR_TRY(fr_unshare_params(c->g, &r->changed));
    if (c->n_unshared) *c->n_unshared = r->changed;
    snprintf(r->detail, sizeof r->detail, "%d parameter%s made separate again", r->changed,
             r->changed == 1 ? "" : "s");
    return FR_OK;
}

/* The report counts both ways: --train may also select initializers the model did not record as
 * parameters (an exporter's buffers), so "trained - before" alone can be negative. */
static fr_status run_select_params(fr_pass_ctx *c, fr_pass_result *r)
{
    const int n = c->g->n_values;
    unsigned char *was = n ? calloc((size_t)n, 1) : NULL;
    if (n && !was) return fr_error(FR_ERR_OOM, "pass select_params: %d flags", n);
    for (int i = 0; i < n; i++) was[i] = (c->g->values[i].flags & FR_VAL_PARAM) != 0;
    int kept = 0;
    const fr_status st = fr_select_params(c->g, c->train_regex, c->freeze_regex, &kept);
    int frozen = 0, added = 0;
    for (int i = 0; st == FR_OK && i < n && i < c->g->n_values; i++) {
        const int now = (c->g->values[i].flags & FR_VAL_PARAM) != 0;
        frozen += was[i] && !now;
        added += !was[i] && now;
    }
    free(was);
    FR_TRY(st);
    r->changed = frozen + added;
    if (added)
        snprintf(r->detail, sizeof r->detail, "%d trained (%d not recorded as parameters), %d made constants", kept,
                 added, frozen);
    else
        snprintf(r->detail, sizeof r->detail, "%d trained, %d made constants", kept, frozen);
    return FR_OK;
}

static fr_status run_lora(fr_pass_ctx *c, fr_pass_result *r)
{
    if (!c->lora || !c->rng || !c->lora_out)
        return fr_error(FR_ERR_INTERNAL, "pass lora: the runtime gave no options, generator or result");
    FR_TRY(fr_lora_apply(c->g, c->lora, c->rng, c->lora_out));
    r->changed = c->lora_out->n;
    snprintf(r->detail, sizeof r->detail, "%d Linear%s adapted (r %d, scale %g), %lld base parameters frozen",
             r->changed, r->changed == 1 ? "" : "s", c->lora->rank, c->lora_out->scale,
             (long long)c->lora_out->frozen_params);
    return FR_OK;
}

static fr_status run_dropout(fr_pass_ctx *c, fr_pass_result *r)
{
    FR_TRY(fr_dropout_train(c->g, &r->changed));
    snprintf(r->detail, sizeof r->detail, "%d training-mode Dropout%s drawing a mask per step", r->changed,
             r->changed == 1 ? "" : "s");
    return FR_OK;
}

static fr_status run_retie(fr_pass_ctx *c, fr_pass_result *r)
{
    fr_tie *ties = NULL;
    int n = 0;
    FR_TRY(fr_retie_params(c->g, &ties, &n));
    if (c->ties) {
        *c->ties = ties;
        *c->n_ties = n;
    } else {
        free(ties);
    }
    r->changed = n;
    snprintf(r->detail, sizeof r->detail, "%d tied cop%s re-tied", n, n == 1 ? "y" : "ies");
    return FR_OK;
}

static fr_status run_prepare(fr_pass_ctx *c, fr_pass_result *r)
{
    fr_prepare_options po;
    fr_prepare_options_default(&po);
    po.dims = c->dims;
    po.n_dims = c->n_dims;
    po.input_shapes = c->input_shapes;
    po.n_input_shapes = c->n_input_shapes;
    fr_prepare_stats st;
    memset(&st, 0, sizeof st);
    FR_TRY(fr_prepare_forward(c->g, &po, &st));
    r->changed = st.nodes_removed + st.identities_removed;
    snprintf(r->detail, sizeof r->detail, "%d nodes folded, %d removed (folded ones included), %d Identity removed", st.nodes_folded,
             st.nodes_removed, st.identities_removed);
    return FR_OK;
}

static fr_status run_count(fr_status (*fuse)(fr_graph *, int *), fr_pass_ctx *c, fr_pass_result *r)
{
    FR_TRY(fuse(c->g, &r->changed));
    snprintf(r->detail, sizeof r->detail, "%d fused", r->changed);
    return FR_OK;
}

static fr_status run_attention(fr_pass_ctx *c, fr_pass_result *r) { return run_count(fr_fuse_attention, c, r); }

static fr_status run_rotary(fr_pass_ctx *c, fr_pass_result *r) { return run_count(fr_fuse_rotary, c, r); }

static fr_status run_attention_io(fr_pass_ctx *c, fr_pass_result *r) { return run_count(fr_fuse_attention_io, c, r); }

static fr_status run_rmsnorm(fr_pass_ctx *c, fr_pass_result *r) { return run_count(fr_fuse_rmsnorm, c, r); }

static fr_status run_residual_norm(fr_pass_ctx *c, fr_pass_result *r) { return run_count(fr_fuse_residual_norm, c, r); }

static fr_status run_gelu(fr_pass_ctx *c, fr_pass_result *r) { return run_count(fr_fuse_gelu, c, r); }
static fr_status run_softcap(fr_pass_ctx *c, fr_pass_result *r) { return run_count(fr_fuse_softcap, c, r); }
static fr_status run_gather_slice(fr_pass_ctx *c, fr_pass_result *r) { return run_count(fr_gather_to_slice, c, r); }
static fr_status run_slice_hoist(fr_pass_ctx *c, fr_pass_result *r) { return run_count(fr_hoist_slices, c, r); }
static fr_status run_qkv_regroup(fr_pass_ctx *c, fr_pass_result *r) { return run_count(fr_regroup_qkv_splits, c, r); }

static fr_status run_narrow(fr_pass_ctx *c, fr_pass_result *r)
{
    FR_TRY(fr_narrow_activations(c->g, &r->changed));
    snprintf(r->detail, sizeof r->detail, "%d output%s written in bfloat16", r->changed,
             r->changed == 1 ? "" : "s");
    return FR_OK;
}

static fr_status run_narrow_grad(fr_pass_ctx *c, fr_pass_result *r)
{
    int res = 0; /* FP8RUN_BF16_SAVED_RESIDUAL=0: the norms' backward reads the float32 H (to compare) */
    FR_TRY(fr_narrow_gradients(c->g, &r->changed, fr_env_is(FR_ENV_BF16_SAVED_RESIDUAL, "0") ? NULL : &res));
    snprintf(r->detail, sizeof r->detail, "%d gradient node%s write%s bfloat16, %d norm backward%s read%s H's "
             "bfloat16 copy", r->changed, r->changed == 1 ? "" : "s", r->changed == 1 ? "s" : "", res,
             res == 1 ? "" : "s", res == 1 ? "s" : "");
    r->changed += res;
    return FR_OK;
}

static fr_status run_lm_head(fr_pass_ctx *c, fr_pass_result *r)
{
    return fr_fuse_lm_head(c->g, &r->changed, r->detail, sizeof r->detail);
}

static fr_status run_wgrad_operands(fr_pass_ctx *c, fr_pass_result *r)
{
    const char *mode = fr_env_get(FR_ENV_WGRAD_OPERAND);
    int remake = 1;
    if (!mode || !mode[0] || strcmp(mode, "remade") == 0)
        remake = 1;
    else if (strcmp(mode, "kept") == 0)
        remake = 0;
    else if (strcmp(mode, "saved") == 0) {
        snprintf(r->detail, sizeof r->detail, "off (FP8RUN_WGRAD_OPERAND=saved)");
        return FR_OK;
    } else
        return fr_error(FR_ERR_INVALID_ARG, "FP8RUN_WGRAD_OPERAND is '%s': saved, kept or remade", mode);
    fr_wgrad_operand_stats st;
    FR_TRY(fr_wgrad_operands(c->g, remake, &st));
    r->changed = st.kept + st.remade;
    snprintf(r->detail, sizeof r->detail,
             "%d weight gradient%s read the X the backward keeps, %d a remade X (%d of "
             "them in their own quantization pass; their Linears save no codes)",
             st.kept, st.kept == 1 ? "" : "s", st.remade, st.fused);
    return FR_OK;
}

static fr_status run_fp8_producers(fr_pass_ctx *c, fr_pass_result *r)
{
    const char *mode = fr_env_get(FR_ENV_FP8_PRODUCERS);
    if (mode && strcmp(mode, "0") == 0) {
        snprintf(r->detail, sizeof r->detail, "off (FP8RUN_FP8_PRODUCERS=0)");
        return FR_OK;
    }
    const int forward_only = mode && strcmp(mode, "forward") == 0;
    if (mode && mode[0] && strcmp(mode, "1") != 0 && !forward_only)
        return fr_error(FR_ERR_INVALID_ARG, "FP8RUN_FP8_PRODUCERS=%s: 1 (the default), 0 or forward", mode);
    int fwd, bwd;
    FR_TRY(fr_fp8_producers(c->g, !forward_only, &fwd, &bwd));
    r->changed = fwd + bwd;
    snprintf(r->detail, sizeof r->detail,
             "%d SwiGLU node%s write%s the down projection's E4M3 codes, %d SwiGLUGrad node%s the gate/up "
             "projection's dY codes",
             fwd, fwd == 1 ? "" : "s", fwd == 1 ? "s" : "", bwd, bwd == 1 ? "" : "s");
    return FR_OK;
}

static fr_status run_unfused(fr_pass_ctx *c, fr_pass_result *r)
{
    int left; /* a report: the graph is unchanged (r->changed stays 0) */
    return fr_unfused_check(c->g, &left, r->detail, sizeof r->detail);
}

static fr_status run_attention_masks(fr_pass_ctx *c, fr_pass_result *r)
{
    int dense; /* a report: the graph is unchanged (r->changed stays 0) */
    return fr_attn_mask_report(c->g, &dense, r->detail, sizeof r->detail);
}

static fr_status run_fp8_compile(fr_pass_ctx *c, fr_pass_result *r)
{
    if (!c->report || !c->compiled)
        return fr_error(FR_ERR_INTERNAL, "pass fp8_compile: the runtime gave no report to fill");
    FR_TRY(fr_fp8_compile(c->g, &c->fp8, c->report));
    *c->compiled = 1;
    const fr_fp8_report *rep = c->report;
    r->changed = rep->n_linears;
    snprintf(r->detail, sizeof r->detail, "%d Linear%s (%d fp8, %d bf16, %d fp32), %d fused parameter%s",
             rep->n_linears, rep->n_linears == 1 ? "" : "s", rep->n_fp8, rep->n_bf16, rep->n_fp32, rep->n_fused,
             rep->n_fused == 1 ? "" : "s");
    return FR_OK;
}

static fr_status run_swiglu(fr_pass_ctx *c, fr_pass_result *r)
{
    int one_input = 0;
    FR_TRY(fr_fuse_swiglu(c->g, &r->changed, &one_input));
    if (c->compiled && *c->compiled) { /* the compile report lists the fused nodes too */
        c->report->n_swiglu = r->changed;
        c->report->n_swiglu_one_input = one_input;
    }
    snprintf(r->detail, sizeof r->detail, "%d fused (%d reading one fused gate/up Linear)", r->changed, one_input);
    return FR_OK;
}

static fr_status run_recompute(fr_pass_ctx *c, fr_pass_result *r)
{
    fr_recompute_mode mode;
    fr_recompute_stats st;
    FR_TRY(fr_recompute_parse(c->recompute, &mode));
    FR_TRY(fr_recompute(c->g, c->n_forward, mode, &st));
    r->changed = st.nodes;
    snprintf(r->detail, sizeof r->detail, "%s: %d region%s, %d forward node%s recomputed, %d backward read%s moved",
             c->recompute, st.regions, st.regions == 1 ? "" : "s", st.nodes, st.nodes == 1 ? "" : "s", st.reads,
             st.reads == 1 ? "" : "s");
    return FR_OK;
}

/* ---- the list: its order is the order the passes run in ----
 * A new pass: its file (passes/NAME.c), an adapter above (one line through run_count when it
 * is fr_status f(fr_graph *, int *count)), and one entry here, with a comment saying why it
 * goes where it does. Its stage follows from its place: before `prepare` it sees the imported
 * graph (symbolic shapes), after it the prepared one; before `fp8_compile` MatMul/Gemm, after
 * it ai.fp8run::Linear; in the differentiated stage the forward plus the backward autodiff
 * appended (only training builds reach it: compiles and evaluation-only trainers stop before). A new option it needs is a field of fr_train_options that the runtime's
 * resolver (tr_pass_option, runtime/train/train_build.c) names. */

static const fr_pass k_passes[] = {
    /* first, on the model itself: export and checkpoints then name the separated parameters */
    {"unshare", "parameters the exporter merged because their values were equal become separate again",
     FR_STAGE_MODEL, "unshare", 0, run_unshare},
    /* first on the training copy: what is a parameter decides what the passes after it may
       fold or rewrite (export's copy keeps every initializer) */
    {"select_params", "keep the trained parameters (--train / --freeze); the other initializers become "
     "constants", FR_STAGE_IMPORTED, NULL, 0, run_select_params},
    /* after parameter selection (what it freezes is the chosen base model), before retie (nothing
       of the base is trained then) and prepare (which infers the shapes of what it adds and
       folds the frozen weights' Transposes) */
    {"lora", "LoRA adapters (--lora-rank/--lora-targets) on the matched Linears; the base is frozen",
     FR_STAGE_IMPORTED, "lora", 0, run_lora},
    /* after parameter selection (a trained ratio is no constant), before prepare, whose
       inference refuses training-mode Dropout (inference semantics) */
    {"dropout", "ONNX Dropout in training mode becomes ai.fp8run::KeyedDropout, its mask keyed by --seed, "
     "step and micro-batch", FR_STAGE_IMPORTED, NULL, 0, run_dropout},
    /* after parameter selection (it ties trained parameters only), before prepare, which
       infers the Transpose it inserts and folds away what reads the untied copy no more */
    {"retie", "a bit-exact (transposed) copy of an embedding table reads the table again", FR_STAGE_IMPORTED,
     "retie", 0, run_retie},
    /* the last step on the imported graph: everything after it sees static shapes and folded
       constants. A compiled file keeps its result but not the resolved ops and shapes. */
    {"prepare", "Identity removal, shape inference with constant folding, dead-node elimination",
     FR_STAGE_IMPORTED, NULL, 1, run_prepare},
    /* right after prepare (the indices are constants then), before the attention passes, which
       read Slices of a fused projection but not gathers */
    {"gather_to_slice", "a gather of one constant index (GatherND [[i]], Gather [i]) becomes the Slice it is",
     FR_STAGE_PREPARED, NULL, 0, run_gather_slice},
    /* after gather_to_slice, whose Slices it moves, before the attention passes */
    {"hoist_slices", "Slice(Transpose(x)) becomes Transpose(Slice(x)) where a Transpose is read by Slices only",
     FR_STAGE_PREPARED, NULL, 0, run_slice_hoist},
    /* an exporter's RMSNorm written out (Pow/ReduceMean/Add/Sqrt/Reciprocal/Mul/Mul), on the
       prepared graph (constants folded); --no-fuse-rmsnorm keeps the ops (to compare) */
    {"fuse_rmsnorm", "each RMSNorm written out becomes one ai.fp8run::RMSNormalization node", FR_STAGE_PREPARED,
     "fuse_rmsnorm", 0, run_rmsnorm},
    /* an exporter's GELU (Erf or Tanh chain), under SwiGLU's switch (the MLP activations);
       before fuse_swiglu, which then takes GeGLU's Mul(Gelu(gate), up) */
    {"fuse_gelu", "each GELU written out (Erf or Tanh form) becomes one ai.fp8run::Gelu node", FR_STAGE_PREPARED,
     "fuse_swiglu", 0, run_gelu},
    /* on the prepared graph (static shapes to match), before the FP8 compiler lowers the
       MatMuls of two activations that the pattern reads */
    {"fuse_attention", "the unfused attention of each layer becomes one ai.fp8run::Attention node",
     FR_STAGE_PREPARED, "fuse_attention", 0, run_attention},
    /* after fuse_attention, which takes the softcap of attention scores into the fused node */
    {"fuse_softcap", "each Mul(Tanh(Div(x, c)), c) left (Gemma 2's final logits) becomes one "
     "ai.fp8run::Softcap node", FR_STAGE_PREPARED, NULL, 0, run_softcap},
    /* the RoPE feeding Q and K, under attention's switch (--no-fuse-attention keeps both);
       after it, as the trainer always ran them, so compiled graphs stay the same */
    {"fuse_rotary", "each RoPE (rotate-half, cos/sin tables) becomes one ai.fp8run::Rotary node",
     FR_STAGE_PREPARED, "fuse_attention", 0, run_rotary},
    /* a report, right after the attention fusions (the opset-23 import's included), whose
       notes on the fused nodes it reads: AttentionQKV keeps the masks but not the notes */
    {"attention_masks", "how each fused attention masks: causal / window attributes, key padding as its "
     "segment input Sk, or a dense additive mask (the slow kernels) and why", FR_STAGE_PREPARED, NULL, 0,
     run_attention_masks},
    /* after the fusions that take MatMuls out of its way, before the passes that read its
       Linears */
    {"fp8_compile", "MatMul/Gemm with a trained weight become ai.fp8run::Linear in fp8/bf16 (sibling "
     "Linears fused)", FR_STAGE_PREPARED, "precision", 0, run_fp8_compile},
    /* after the FP8 compiler, whose sibling fusion makes the wider Split, before the staging,
       which reads a Split into Q, K and V alone; under the staging's switch */
    {"regroup_qkv_split", "a fused Split [q | k | v | other] whose q, k, v feed one attention becomes "
     "Split [qkv | other] and Split(qkv) (parallel attention + MLP blocks)", FR_STAGE_PREPARED, "fuse_attention_io", 0,
     run_qkv_regroup},
    /* after the FP8 compiler, whose fused Q/K/V Linear and Split it reads, and after the
       attention and RoPE fusions, whose nodes it absorbs */
    {"fuse_attention_io", "each fused attention reads the fused Q/K/V projection (RoPE applied while "
     "it stages them) and writes the O projection's input: one ai.fp8run::AttentionQKV node",
     FR_STAGE_PREPARED, "fuse_attention_io", 0, run_attention_io},
    /* after the FP8 compiler: it then reads the fused gate/up Linear's one output */
    {"fuse_swiglu", "Mul(Mul(gate, Sigmoid(gate)), up) (and GeGLU's Mul(Gelu(gate), up)) becomes one "
     "ai.fp8run::SwiGLU node",
     FR_STAGE_PREPARED, "fuse_swiglu", 0, run_swiglu},
    /* after every other fusion (none of them then meets the fused node), on RMSNorm nodes
       (fuse_rmsnorm's too) and LayerNorm nodes; the trainer's resolver turns it off under --recompute, whose
       regions are found from the residual Adds */
    {"fuse_residual_norm", "each residual Add and the RMSNorm (LayerNorm) reading its sum become one "
     "ai.fp8run::AddRMSNorm (AddLayerNorm) node (the backward's Add of the sum's two gradients goes too)", FR_STAGE_PREPARED, "fuse_residual_norm", 0,
     run_residual_norm},
    /* after the fusions whose nodes it narrows (SwiGLU, AttentionQKV, AddRMSNorm, AddLayerNorm) and the FP8
       compiler (its Linears), before autodiff, which then gives the backward the same bf16
       inputs */
    {"narrow_activations", "the bf16/fp8 Linears' inputs written in bfloat16 by their producers (AddRMSNorm, "
     "AddLayerNorm, SwiGLU, AttentionQKV), and a Linear read only by SwiGLU, AttentionQKV or the residual add",
     FR_STAGE_PREPARED, "narrow_activations", 0, run_narrow},
    /* last on the prepared graph, after every fusion: what none of them took */
    {"unfused", "counts the ops the fusions left (Softmax, ReduceMean, Erf, Tanh, Sigmoid) and names the first "
     "of each", FR_STAGE_PREPARED, NULL, 0, run_unfused},
    /* on the backward autodiff built, before recompute (whose copies are of the forward) */
    {"narrow_gradients", "the gradients only the bf16/fp8 Linears' backward or the fused ops' backward read "
     "written in bfloat16 (SwiGLUGrad, AttentionQKVGrad, LinearGradData); AddRMSNormGrad reads H's bfloat16 copy",
     FR_STAGE_DIFFERENTIATED,
     "narrow_activations", 0, run_narrow_grad},
    /* on the backward autodiff built (it redirects the backward's reads), before dead-node
       elimination and the executors' liveness plans, which then free the originals early */
    {"recompute", "the backward reads a copy of each chosen block region's forward (--recompute), "
     "recomputed right before it", FR_STAGE_DIFFERENTIATED, "recompute", 0, run_recompute},
    /* after recompute (whose copies and order it judges liveness on), before chunked_lm_head,
       which reorders the nodes; the LM head is no fp8 Linear, so the two never meet */
    {"wgrad_operands", "an fp8 weight gradient reads X itself where the backward holds it anyway (or "
     "remakes an MLP activation, FP8RUN_WGRAD_OPERAND=remade): the Linear saves no codes",
     FR_STAGE_DIFFERENTIATED, NULL, 0, run_wgrad_operands},
    /* after wgrad_operands, which decides whether a Linear still saves X's codes (then its X
       stays a float); before chunked_lm_head, which reorders the nodes */
    {"fp8_producers", "a SwiGLU read only by an fp8 Linear (delayed recipe, no saved codes) writes X's E4M3 codes "
     "and amax itself (ai.fp8run::SwiGLUQuantize); a SwiGLUGrad read only by an fp8 data gradient, dY's codes "
     "both ways and amax (ai.fp8run::SwiGLUGradQuantize)", FR_STAGE_DIFFERENTIATED, NULL, 0, run_fp8_producers},
    /* last: it reorders the nodes (the forward/backward split recompute reads is gone after it),
       and it reads the narrowed head (y_dtype, dx_dtype) narrow_gradients decided */
    {"chunked_lm_head", "the LM head Linear, the loss head and their backward become one "
     "ai.fp8run::LinearCrossEntropy working in chunks of tokens (--chunked-lm-head on)", FR_STAGE_DIFFERENTIATED,
     "chunked_lm_head", 0, run_lm_head},
};

#define N_PASSES ((int)(sizeof k_passes / sizeof k_passes[0]))
_Static_assert(N_PASSES <= FR_PIPELINE_MAX_PASSES, "raise FR_PIPELINE_MAX_PASSES");

const fr_pass *fr_pipeline_passes(int *n)
{
    *n = N_PASSES;
    return k_passes;
}

const fr_pass *fr_pipeline_find(const char *name)
{
    for (int i = 0; name && i < N_PASSES; i++)
        if (strcmp(k_passes[i].name, name) == 0) return &k_passes[i];
    return NULL;
}

static fr_status run_one(const fr_pass *p, fr_pass_ctx *c)
{
    fr_pass_result tmp, *r = &tmp;
    if (c->results) {
        if (c->results->n >= FR_PIPELINE_MAX_PASSES)
            return fr_error(FR_ERR_INTERNAL, "pipeline: more than %d pass results", FR_PIPELINE_MAX_PASSES);
        r = &c->results->pass[c->results->n++];
    }
    memset(r, 0, sizeof *r);
    r->name = p->name;
    int on = 1;
    if (p->option) {
        if (!c->option)
            return fr_error(FR_ERR_INTERNAL, "pass %s: no option resolver for its option '%s'", p->name, p->option);
        FR_TRY(c->option(c->opts, p->option, &on));
    }
    if (!on) {
        snprintf(r->detail, sizeof r->detail, "off (%s)", p->option);
        return FR_OK;
    }
    r->ran = 1;
    return p->run(c, r); /* its errors already say what failed, as users know them */
}

fr_status fr_pipeline_run(fr_pass_ctx *ctx, fr_pass_stage stage)
{
    for (int i = 0; i < N_PASSES; i++)
        if (k_passes[i].stage == stage) FR_TRY(run_one(&k_passes[i], ctx));
    return FR_OK;
}

fr_status fr_pipeline_reload(fr_graph *g)
{
    fr_pass_ctx c;
    memset(&c, 0, sizeof c);
    c.g = g;
    for (int i = 0; i < N_PASSES; i++)
        if (k_passes[i].reload) {
            if (k_passes[i].option)
                return fr_error(FR_ERR_INTERNAL, "pass %s: a pass run on reload has no option", k_passes[i].name);
            FR_TRY(run_one(&k_passes[i], &c));
        }
    return FR_OK;
}

char *fr_pass_result_line(const fr_pass_result *r, char *buf, size_t n)
{
    if (n) snprintf(buf, n, "pass %s: %s", r->name ? r->name : "?", r->detail);
    return buf;
}
