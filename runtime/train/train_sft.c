/* Supervised fine-tuning in the trainer (fr_train_options.sft; see trainer.h): what the build
 * adds to the training graph and what a step feeds it.
 *
 * Graph. Two inputs the trainer feeds itself:
 *  - SFT_SEGMENTS int32 [B, T]: each position's segment id (its example's number in the window
 *    from 1, 0 on padding), wired as Sk and Sq (ops/attention.h) into every fused attention
 *    node (Attention, AttentionQKV) with seg_form "packed" (or "padded" when the batches hold
 *    one example per window, opt.sft_padded: the GPU then takes per-row key lengths): a query
 *    sees only the keys of its own example, and padding nothing;
 *  - SFT_WEIGHT float32 []: the loss head's mean is multiplied by it. A step of K micro-batches
 *    with n_m counted labels each (N in all) feeds K n_m / N to micro-batch m: the trainer's
 *    average of the K losses (and of the K gradients) is then the mean over the step's N
 *    target tokens, not the mean of K per-micro-batch means (which would weigh a micro-batch of
 *    few targets as much as one of many). Evaluation feeds 1.
 * Labels are the next token where it is a target of the same example (runtime/io/sft_data.h),
 * else ignore_index; a position_ids input restarts at 0 with each example (RoPE and learned
 * positions see each example as if it were alone); attention_mask stays all ones (the
 * segments do its work).
 *
 * A graph without fused attention nodes gets no segments: its windows must then hold one
 * example each (--packing off), padding at the end, which a causal model never attends to. */
#include <stdlib.h>
#include <string.h>

#include "ops/grad.h"
#include "ops/op.h"
#include "runtime/io/sft_data.h"
#include "runtime/train/train_internal.h"

#define SFT_SEGMENTS "fp8run_segment_ids"
#define SFT_WEIGHT "fp8run_loss_weight"

/* Index of the Sk input of a fused attention node, -1 for any other node. */
static int sk_index(const fr_node *n)
{
    if (n->dead || strcmp(n->domain, FR_DOMAIN_FP8RUN) != 0) return -1;
    if (strcmp(n->op_type, "Attention") == 0) return 4;    /* Q, K, V, M, Sk, Sq */
    if (strcmp(n->op_type, "AttentionQKV") == 0) return 3; /* X, cos, sin, Sk, Sq */
    return -1;
}

fr_status tr_sft_wire(fr_trainer *t, fr_graph *g)
{
    int n_attn = 0;
    for (int i = 0; i < g->n_nodes; i++) n_attn += sk_index(&g->nodes[i]) >= 0;
    t->sft_attention = n_attn;
    if (n_attn == 0) return FR_OK;
    int seg;
    FR_TRY(fr_graph_add_unique_value(g, SFT_SEGMENTS, &seg));
    fr_value_set_shape(&g->values[seg], FR_I32, 2, (int64_t[]){t->opt.batch, t->opt.seq_len});
    FR_TRY(fr_graph_mark_input(g, seg));
    for (int i = 0; i < g->n_nodes; i++) {
        fr_node *n = &g->nodes[i];
        int at = sk_index(n);
        if (at < 0) continue;
        if (n->n_inputs < at + 2) {
            int *in = fr_realloc_array(n->inputs, (size_t)at + 2, sizeof *in, "attention inputs");
            if (!in) return FR_ERR_OOM;
            for (int k = n->n_inputs; k < at + 2; k++) in[k] = -1; /* absent optional inputs */
            n->inputs = in;
            n->n_inputs = at + 2;
        }
        /* a key-padding Sk read from attention_mask (fed all ones here) gives way to the segments */
        n->inputs[at] = n->inputs[at + 1] = seg;
        FR_TRY(fr_node_set_attr_string(n, "seg_form", t->opt.sft_padded ? "padded" : "packed"));
    }
    return FR_OK;
}

fr_status tr_sft_weight(fr_trainer *t, fr_graph *g, int *loss)
{
    (void)t;
    int w, out, nid;
    FR_TRY(fr_graph_add_unique_value(g, SFT_WEIGHT, &w));
    fr_value_set_shape(&g->values[w], FR_F32, 0, NULL);
    FR_TRY(fr_graph_mark_input(g, w));
    FR_TRY(fr_graph_add_unique_value(g, "loss_weighted", &out));
    FR_TRY(fr_graph_add_node(g, "Mul", "", "sft_loss_weight", 2, (int[]){*loss, w}, 1, &out, &nid));
    FR_TRY(fr_node_infer(g, nid));
    *loss = out;
    return FR_OK;
}

int tr_sft_feed(const char *name, tr_feed *feed)
{
    if (strcmp(name, SFT_SEGMENTS) == 0) *feed = TR_FEED_SEGMENTS;
    else if (strcmp(name, SFT_WEIGHT) == 0) *feed = TR_FEED_LOSS_WEIGHT;
    else return 0;
    return 1;
}

fr_status tr_sft_alloc(fr_trainer *t)
{
    const size_t n = (size_t)(t->opt.batch * t->opt.seq_len);
    t->sft_labels = fr_malloc(n * sizeof *t->sft_labels, "SFT labels");
    t->sft_pos = fr_malloc(n * sizeof *t->sft_pos, "SFT positions");
    return t->sft_labels && t->sft_pos ? FR_OK : FR_ERR_OOM;
}

/* The labels of micro-batch m's windows into t->sft_labels; how many count. */
static int64_t micro_labels(fr_trainer *t, int64_t m, int64_t *labels)
{
    const int64_t B = t->opt.batch, T = t->opt.seq_len, W = T + 1, off = m * B * W;
    int64_t n = 0;
    for (int64_t b = 0; b < B; b++)
        n += fr_sft_labels(t->sft_windows + off + b * W, t->sft_seg + off + b * W, t->sft_tgt + off + b * W, T,
                           t->opt.ignore_index, labels ? labels + b * T : NULL);
    return n;
}

fr_status tr_sft_micro(fr_trainer *t, const int64_t *windows, float *weight)
{
    const int64_t B = t->opt.batch, T = t->opt.seq_len, W = T + 1, per = B * W;
    if (!t->sft_windows || windows < t->sft_windows || windows >= t->sft_windows + (int64_t)t->sft_k * per)
        return fr_error(FR_ERR_INVALID_ARG, "this trainer was built for SFT batches: give each window's segment ids "
                        "and target flags (fr_trainer_step_sft, fr_trainer_eval_sft)");
    const int64_t m = (windows - t->sft_windows) / per;
    const int64_t n = micro_labels(t, m, t->sft_labels);
    for (int64_t b = 0; b < B; b++) fr_sft_positions(t->sft_seg + m * per + b * W, T, t->sft_pos + b * T);
    /* the trainer averages the k micro-batches (and data parallel the ranks): k n / N each makes
       that average the mean over the N labels */
    *weight = t->sft_total > 0 ? (float)((double)t->sft_k * t->sft_ranks * (double)n / (double)t->sft_total) : 0.0f;
    return FR_OK;
}

/* Check and keep a step's (or an eval's) batch; the total of counted labels. */
static fr_status take_batch(fr_trainer *t, const int64_t *windows, const int32_t *seg, const uint8_t *tgt, int k,
                            int64_t all_targets)
{
    if (!t->opt.sft)
        return fr_error(FR_ERR_INVALID_ARG, "SFT batches need a trainer built for them (the sft option)");
    if (!windows || !seg || !tgt || k < 1)
        return fr_error(FR_ERR_INVALID_ARG, "SFT batch: no windows, segment ids or target flags, or k < 1");
    const int64_t T = t->opt.seq_len, W = T + 1, n = (int64_t)k * t->opt.batch * W;
    /* more examples in a window than the session was sized for would overflow the GPU
       attention's sequence slots (the device would stop the step): said here. The ids run 1, 2,
       ... within a window, so an id past the bound is the example too many. */
    const int64_t cap = t->opt.sft_padded ? 0 : t->opt.sft_max_examples;
    for (int64_t i = 0; i < n; i++) {
        const int64_t j = i % W;
        if (seg[i] < 0 || tgt[i] > 1 || (j > 0 && seg[i] != seg[i - 1] && seg[i] != 0 && seg[i] != seg[i - 1] + 1) ||
            (j > 0 && seg[i - 1] == 0 && seg[i] != 0) || (j == 0 && seg[i] > 1))
            return fr_error(FR_ERR_INVALID_ARG, "SFT batch: window %lld, position %lld: segment id %d (after %d) or "
                            "target flag %u breaks the layout (ids 1, 2, ... in runs from the window's start, then "
                            "0 padding; flags 0/1)", (long long)(i / W), (long long)j, (int)seg[i],
                            j > 0 ? (int)seg[i - 1] : 0, (unsigned)tgt[i]);
        if (seg[i] > 1 && t->opt.sft_padded)
            return fr_error(FR_ERR_INVALID_ARG, "SFT batch: window %lld holds more than one example, but this "
                            "trainer was built for one per window (packing off)", (long long)(i / W));
        if (cap > 0 && seg[i] > cap)
            return fr_error(FR_ERR_INVALID_ARG, "SFT batch: window %lld holds more than the %lld examples this "
                            "session was made for (sft_max_examples: the most any window of its data holds)",
                            (long long)(i / W), (long long)cap);
        if (seg[i] > 1 && t->sft_attention == 0)
            return fr_error(FR_ERR_INVALID_ARG, "SFT batch: window %lld holds more than one example, but the model "
                            "has no fused attention node to keep them apart: use --packing off (one example per "
                            "window)", (long long)(i / W));
    }
    t->sft_windows = windows;
    t->sft_seg = seg;
    t->sft_tgt = tgt;
    t->sft_k = k;
    t->sft_total = 0;
    for (int64_t m = 0; m < k; m++) t->sft_total += micro_labels(t, m, NULL);
    t->sft_ranks = 1;
    if (all_targets > 0) {
        if (all_targets < t->sft_total)
            return fr_error(FR_ERR_INVALID_ARG, "SFT batch: %lld labels count in all ranks' batches, fewer than the "
                            "%lld of this rank's", (long long)all_targets, (long long)t->sft_total);
        t->sft_total = all_targets;
        t->sft_ranks = t->opt.world_size > 0 ? t->opt.world_size : 1;
    }
    return FR_OK;
}

static void drop_batch(fr_trainer *t)
{
    t->sft_windows = NULL;
    t->sft_seg = NULL;
    t->sft_tgt = NULL;
    t->sft_k = 0;
}

int fr_trainer_sft_positions(const fr_trainer *t)
{
    for (int i = 0; i < t->n_inputs; i++)
        if (t->inputs[i].feed == TR_FEED_ARANGE) return 1; /* position_ids: restarted per example */
    for (int i = 0; i < t->g->n_nodes; i++) { /* rotary embedding: only distances count */
        const fr_node *n = &t->g->nodes[i];
        if (n->dead || strcmp(n->domain, FR_DOMAIN_FP8RUN) != 0) continue;
        if (strcmp(n->op_type, "Rotary") == 0) return 1;
        if (strcmp(n->op_type, "AttentionQKV") == 0 && n->n_inputs > 1 && n->inputs[1] >= 0) return 1;
    }
    return 0;
}

fr_status fr_trainer_step_sft_async(fr_trainer *t, const int64_t *windows, const int32_t *segments,
                                    const uint8_t *targets, int k, int64_t all_targets, int64_t *step)
{
    if (step) *step = -1;
    if (!t) return fr_error(FR_ERR_INVALID_ARG, "fr_trainer_step_sft: no trainer");
    FR_TRY(take_batch(t, windows, segments, targets, k, all_targets));
    /* the backends fill every micro-batch's inputs before this returns (they copy the windows) */
    fr_status st = fr_trainer_step_async(t, windows, k, step);
    drop_batch(t);
    return st;
}

fr_status fr_trainer_step_sft(fr_trainer *t, const int64_t *windows, const int32_t *segments, const uint8_t *targets,
                              int k, fr_train_stats *stats)
{
    if (!t) return fr_error(FR_ERR_INVALID_ARG, "fr_trainer_step_sft: no trainer");
    FR_TRY(take_batch(t, windows, segments, targets, k, 0));
    fr_status st = fr_trainer_step(t, windows, k, stats);
    drop_batch(t);
    return st;
}

fr_status fr_trainer_eval_sft(fr_trainer *t, const int64_t *windows, const int32_t *segments, const uint8_t *targets,
                              double *loss, int64_t *n_targets)
{
    if (!t) return fr_error(FR_ERR_INVALID_ARG, "fr_trainer_eval_sft: no trainer");
    FR_TRY(take_batch(t, windows, segments, targets, 1, 0));
    if (n_targets) *n_targets = t->sft_total;
    fr_status st = fr_trainer_eval(t, windows, loss);
    drop_batch(t);
    return st;
}
