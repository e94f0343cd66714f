/* fr_trainer_fp8_stats (trainer.h): the --log-fp8 records of the last step. */
#include <math.h>
#include <string.h>

#include "graph/fp8_format.h"
#include "runtime/train/train_internal.h"

/* ---- FP8 statistics (--log-fp8) ---- */

static const char *operand_str(fr_fp8_operand o) { return o == FR_FP8_OPERAND_X ? "x" : o == FR_FP8_OPERAND_W ? "w" : "dy"; }

static fr_dtype operand_fmt(const fr_fp8_report *r, fr_fp8_operand o)
{
    return o == FR_FP8_OPERAND_DY && !r->e4m3_only ? FR_F8E5M2 : FR_F8E4M3;
}

/* One record per operand of every fp8 Linear: delayed layers from their scaling state, the
 * others from the amaxes the step computed (dY has none outside the delayed recipe: the
 * record says so instead of inventing one). */
int fr_trainer_fp8_stats(const fr_trainer *t, fr_fp8_stat *out, int max)
{
    int n = 0;
    if (!t || !t->has_report || t->opt.eval_only) return 0;
    /* the device's amaxes and scales into the host copies (the state is logically const) */
    if (tr_sync_host((fr_trainer *)t) != FR_OK) return 0;
    const fr_fp8_report *r = &t->report;
    for (int li = 0; li < r->n_layers; li++) {
        const fr_fp8_layer *L = &r->layers[li];
        if (L->precision != FR_LIN_FP8) continue;
        for (int op = 0; op < 3; op++, n++) {
            if (!out || n >= max) continue;
            fr_fp8_stat *s = &out[n];
            memset(s, 0, sizeof *s);
            s->layer = L->name;
            s->operand = operand_str((fr_fp8_operand)op);
            s->recipe = fr_lin_recipe_name(L->recipe);
            s->format = operand_fmt(r, (fr_fp8_operand)op) == FR_F8E5M2 ? "e5m2" : "e4m3";
            s->fp8_max = fr_fp8_max(operand_fmt(r, (fr_fp8_operand)op));
            s->step = t->stats_step;
            s->amax = s->scale = s->next_scale = s->history_max = s->range_use = NAN;
            s->note = t->stats_skipped ? "the step was skipped (non-finite values): its amaxes may be partial" : "";
            if (t->stats_step < 0) {
                s->note = "no step taken yet";
                continue;
            }
            if (L->recipe == FR_LIN_DELAYED) {
                const tr_state *ts = NULL;
                for (int i = 0; i < t->n_states && !ts; i++)
                    if (t->states[i].st->layer == li && (int)t->states[i].st->operand == op) ts = &t->states[i];
                if (!ts || ts->amax_out < 0) {
                    s->note = "no amax: the operand is not computed in training (no gradient needed)";
                    continue;
                }
                s->has_amax = s->has_scale = 1;
                s->amax = ts->step_amax;
                s->scale = ts->step_scale;
                s->next_scale = ts->sc.scale;
                s->history_max = fr_fp8_scaling_amax(&ts->sc);
                s->updates = ts->sc.updates;
                s->range_use = s->amax * s->scale / s->fp8_max;
                s->saturated = s->range_use > 1.0;
                continue;
            }
            const tr_watch *w = NULL;
            for (int i = 0; i < t->n_watch && !w; i++)
                if (t->watch[i].layer == li && (int)t->watch[i].operand == op) w = &t->watch[i];
            if (!w) {
                s->note = L->recipe == FR_LIN_CURRENT
                              ? "no amax: the current recipe scales dY inside the backward GEMM and exposes no amax"
                              : "no amax: the block recipe scales dY per 1x128 block inside the backward GEMM";
                continue;
            }
            s->has_amax = 1;
            s->amax = w->step_amax;
            if (L->recipe == FR_LIN_CURRENT) {
                /* the scale of the micro-batch with the largest amax: its own amax maps to the
                   format's max (less the margin), so nothing saturates */
                float sc;
                if (fr_fp8_scale_from_amax(w->step_amax, operand_fmt(r, (fr_fp8_operand)op), r->margin, 1.0f, L->name,
                                           &sc) == FR_OK) {
                    s->has_scale = 1;
                    s->scale = s->next_scale = sc;
                    s->range_use = s->amax * s->scale / s->fp8_max;
                } else {
                    fr_clear_error();
                }
            } else {
                s->note = op == FR_FP8_OPERAND_X ? "block recipe: one scale per 1x128 block, no per-tensor scale"
                                                 : "block recipe: one scale per 128x128 tile, no per-tensor scale";
            }
        }
    }
    return n;
}
